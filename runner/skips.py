"""Why an op-test case cannot run here, said before it runs.

A case is skipped, with its reason, when its test's ``platformCondition`` does not match the
backend's platform; when the backend cannot hold one of its element types; or when onnxruntime
on the CPU (the oracle) has no kernel or schema for its operator and types, e.g. a contrib op
only other execution providers implement. What a backend finds it lacks only when it runs (an
operator without a kernel, a graph its WebGPU EP will not capture) the judge skips the same way
(``runner.judge``). Every reason starts with one of the ``SKIP_*`` phrases, which reports group by.
Zero-sized tensors need no reason: every backend here takes them (tests/test_optests*.py).
"""

from __future__ import annotations

import functools
import platform
import re
import sys

from runner.backends import REGISTRY
from runner.matrix import Case
from runner.oracle import cpu_session
from runner.suite.spec import OpTest
from runner.workload.optest import op_test_model

SKIP_PLATFORM = "platform condition not met"
SKIP_TYPE = "element type the backend lacks"
SKIP_ORACLE = "onnxruntime CPU lacks the operator or type"
SKIP_BACKEND = "backend lacks the operator or type"  # seen at run time (runner.judge)
SKIP_REASONS = (SKIP_PLATFORM, SKIP_TYPE, SKIP_ORACLE, SKIP_BACKEND)


# What ORT-web's `platformCondition` regexes are matched against: platform.js's description in
# a browser ("Chrome Headless 120.0 on Linux 64-bit"); here the backend's runtime stands in for
# the browser and its version is left out (unknown before the browser starts).
def platform_description(backend: str) -> str:
    system = {"Darwin": "OS X"}.get(platform.system(), platform.system())
    bits = "64-bit" if sys.maxsize > 2**32 else "32-bit"
    return f"{REGISTRY[backend].runtime} on {system} {bits}"


def skip_reason(case: Case) -> str | None:
    """Why the op-test `case` cannot run on its backend here; None if it can (or is no op test)."""
    op_case = case.model.op_test
    if op_case is None:
        return None
    test, backend = op_case.test, case.backend.name
    description = platform_description(backend)
    if test.platform_condition and not re.search(test.platform_condition, description):
        return f"{SKIP_PLATFORM}: {test.platform_condition!r} does not match {description!r}"
    types = {t for t in (*test.input_types, *test.output_types) if t}
    if "string" in types:
        return f"{SKIP_TYPE}: string tensors (the judge compares numbers only)"
    lacking = sorted(types - (REGISTRY[backend].element_types or types))
    if lacking:
        return f"{SKIP_TYPE}: {backend} has no {', '.join(lacking)} tensors"
    if op_case.invalid:
        return None  # no model to ask the oracle about: the case fails as `error`
    return oracle_lacks(test)


@functools.lru_cache(maxsize=1024)
def oracle_lacks(test: OpTest) -> str | None:
    """Why onnxruntime on the CPU cannot take the test's model, if it lacks a kernel or schema.

    Other refusals (an attribute the schema rejects, a type the ONNX schema forbids) are the
    test's own errors and left to the run to report.
    """
    try:
        cpu_session(op_test_model(test))
    except Exception as exc:  # onnxruntime raises its own classes, all plain Exceptions
        lacks = onnxruntime_lacks(str(exc))
        if lacks:
            return f"{SKIP_ORACLE}: {lacks}"
    return None


# onnxruntime's words, in every build (onnxruntime-web's too), for a missing kernel
# (NOT_IMPLEMENTED) and for a missing schema (an op or domain the build leaves out).
_LACKS = re.compile(
    r"Could not find an implementation[^\n]*|No Op registered for[^\n]*"
    r"|\S+ is not a registered function/op"
)


def onnxruntime_lacks(message: str) -> str | None:
    """The part of an onnxruntime error saying it has no kernel or schema for a node, if any."""
    lacks = _LACKS.search(message)
    return lacks.group() if lacks else None
