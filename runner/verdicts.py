"""The verdict vocabulary, shared by the suite format (``expect:``) and the judge, and the
phrases a skip's reason starts with.

Ordered from most to least specific: when several apply to one case, the first listed here is
the headline.
"""

from __future__ import annotations

import enum
import re

VERDICTS: dict[str, str] = {
    "stale-layout": "under this layout the output matches an earlier layout's reference better "
    "than its own: a replay used that layout's constants",
    "wrong-graph": "a replay of one captured graph returned another graph's result (names the "
    "graph): the graphs share buffers they should not",
    "stale-input": "a replay's output matches an earlier run's inputs' output better than its "
    "own (names the run): the replay read inputs that were no longer current",
    "capture-not-engaged": "capture was asked for, but the replay created bind groups or "
    "rewrote uniforms: the capture path was not tested",
    "capture-mismatch": "the capture output differs from the same case's eager output",
    "nondeterministic": "replays of the same input disagree",
    "reference-mismatch": "the eager output differs from onnxruntime on the CPU (a kernel bug)",
    "expected-mismatch": "the eager output of an op test differs from its file's expected output "
    "(the message says whether the file also disagrees with onnxruntime on the CPU)",
    "non-finite": "an output holds NaN or infinity where onnxruntime on the CPU computes finite "
    "values (it comes with a mismatch verdict, which says where)",
    "capture-unsupported": "the backend refused to create a capture session",
    "unsupported-op": "the model uses an operator the backend does not implement",
    "timeout": "the case ran past its time limit",
    "error": "the backend failed while running the case",
    "skipped": "the case cannot run here (the reason says why); not a failure",
    "pass": "every output within tolerance",
}

FAILURES = frozenset(VERDICTS) - {"pass", "skipped"}

# The report's short code for each verdict; its legend lists them in VERDICTS' order.
VERDICT_CODES = {
    "pass": "✓",
    "skipped": "–",
    "stale-layout": "SL",
    "wrong-graph": "WG",
    "stale-input": "SI",
    "capture-not-engaged": "NE",
    "capture-mismatch": "CM",
    "nondeterministic": "ND",
    "reference-mismatch": "RM",
    "capture-unsupported": "CU",
    "unsupported-op": "UO",
    "timeout": "TO",
    "error": "ER",
    "expected-mismatch": "EM",
    "non-finite": "NF",
}

# What a failing verdict looks like from outside, for a repro bundle's ISSUE.md title.
SYMPTOMS = {
    "stale-layout": "graph capture replays an earlier session's constants",
    "capture-mismatch": "graph capture output differs from eager",
    "capture-not-engaged": "enableGraphCapture does not capture (replays rebuild bind groups)",
    "nondeterministic": "graph capture replays of one input disagree",
    "reference-mismatch": "output differs from onnxruntime CPU",
    "non-finite": "output holds NaN or infinity where onnxruntime CPU's is finite",
    "stale-input": "graph capture replays return an earlier run's inputs' output",
    "wrong-graph": "a captured graph returns another graph's result",
}


class Outcome(enum.StrEnum):
    """A case's verdicts against its expectation (``runner.judge.outcome``)."""

    EXPECTED = "expected"
    UNEXPECTED = "unexpected"
    UNEXPECTED_PASS = "unexpected-pass"  # a bug expected to fail passed: like pytest's strict xpass
    SKIPPED = "skipped"


# Outcomes that fail a run (an unexpected pass too: the suite's expectation is out of date).
FAILING_OUTCOMES = frozenset({Outcome.UNEXPECTED, Outcome.UNEXPECTED_PASS})


def headline(verdicts: set[str] | frozenset[str]) -> str:
    """The most specific of several verdicts (``pass`` when there are none)."""
    for name in VERDICTS:
        if name in verdicts:
            return name
    return "pass"


# Every skip's reason starts with one of these; reports group skips by them.
SKIP_PLATFORM = "platform condition not met"
SKIP_TYPE = "element type the backend lacks"
SKIP_BACKEND = "backend lacks the operator or type"  # seen at run time (runner.judge)
SKIP_OPTION = "backend lacks the session option"
SKIP_REASONS = (SKIP_PLATFORM, SKIP_TYPE, SKIP_BACKEND, SKIP_OPTION)


# onnxruntime's words, in every build (onnxruntime-web's too), for a missing kernel
# (NOT_IMPLEMENTED) and for a missing schema (an op or domain the build leaves out).
_LACKS = re.compile(
    r"Could not find an implementation[^\n]*|No Op registered for[^\n]*"
    r"|\S+ is not a registered function/op"
)


# a kernel of onnxruntime's WebGPU EP refusing to run under capture (GroupQueryAttention without a
# shared KV cache, MultiHeadAttention off its flash path); onnxruntime-web's pages say the same
# (``runStatus`` in scenario.mjs)
CAPTURE_REFUSED = re.compile(r"graph capture (requires|not implemented)", re.I)


def onnxruntime_lacks(message: str) -> str | None:
    """The part of an onnxruntime error saying it has no kernel or schema for a node, if any."""
    lacks = _LACKS.search(message)
    return lacks.group() if lacks else None
