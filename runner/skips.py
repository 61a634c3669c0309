"""Why a case or a scenario cannot run here, said before it runs.

A scenario is skipped when its backend runs none of its steps or lacks one of them (the
descriptor's ``scenario_actions``: the one place that says which steps a backend runs).

A case is skipped, with its reason, when its test's ``platformCondition`` does not match the
backend's platform, when the backend cannot hold one of its element types, or when its layout
names a preferred data layout and the backend's sessions take no such option (the descriptor's
``preferred_layouts``). What a backend finds it lacks only when it runs (an operator without a
kernel, a graph its WebGPU EP will not capture) the judge skips the same way
(``runner.judge``). Every reason starts with one of the
``SKIP_*`` phrases of ``runner.verdicts``, which reports group by. Zero-sized tensors need no
reason: every backend here takes them (tests/test_optests*.py). A case onnxruntime on the CPU
(the oracle) cannot run, e.g. a contrib op only other execution providers implement, is not
skipped: it runs, and is judged against its file and capture against eager
(``runner.pipeline``).
"""

from __future__ import annotations

import platform
import re
import sys

from runner.backends import REGISTRY
from runner.matrix import Case, ScenarioTarget
from runner.verdicts import SKIP_OPTION, SKIP_PLATFORM, SKIP_TYPE


# What ORT-web's `platformCondition` regexes are matched against: platform.js's description in
# a browser ("Chrome Headless 120.0 on Linux 64-bit"); here the backend's runtime stands in for
# the browser and its version is left out (unknown before the browser starts).
def platform_description(backend: str) -> str:
    system = {"Darwin": "OS X"}.get(platform.system(), platform.system())
    bits = "64-bit" if sys.maxsize > 2**32 else "32-bit"
    return f"{REGISTRY[backend].runtime} on {system} {bits}"


def skip_reason(case: Case) -> str | None:
    """Why `case` cannot run on its backend here: its layout's preferred data layout is no
    option there, its package's model could not be fetched, or the op test is not for this
    platform or these types; None if it can."""
    backend = case.backend.name
    if case.layout.preferred_layout and not REGISTRY[backend].preferred_layouts:
        return (
            f"{SKIP_OPTION}: {backend}'s sessions have no preferredLayout (layout "
            f"{case.layout.label} asks for {case.layout.preferred_layout})"
        )
    source = case.model.package
    if source is not None and not source.cached.is_file():
        return (
            f"{source.label} is not in the cache folder: the run could not fetch it (its notes "
            "say why)"
        )
    op_case = case.model.op_test
    if op_case is None:
        return None
    test = op_case.test
    description = platform_description(backend)
    if test.platform_condition and not re.search(test.platform_condition, description):
        return f"{SKIP_PLATFORM}: {test.platform_condition!r} does not match {description!r}"
    types = {t for t in (*test.input_types, *test.output_types) if t}
    if "string" in types:
        return f"{SKIP_TYPE}: string tensors (the judge compares numbers only)"
    lacking = sorted(types - (REGISTRY[backend].element_types or types))
    if lacking:
        return f"{SKIP_TYPE}: {backend} has no {', '.join(lacking)} tensors"
    return None


def scenario_skip_reason(item: ScenarioTarget) -> str | None:
    """Why `item`'s backend cannot run its steps; None if it can."""
    name = item.target.name
    actions = REGISTRY[name].scenario_actions
    if not actions:
        return f"{name} does not run scenarios yet"
    lacking = sorted({step.action for step in item.scenario.steps} - set(actions))
    if lacking:
        return f"{name} has no {', '.join(lacking)} step (it runs {', '.join(actions)})"
    return None
