"""A failure's root cause: the mechanism that went wrong and the node it went wrong in.

Two failures with one cause are one bug, whatever their verdict label, the nodes around the
culprit and the shapes: a Reshape's output replayed stale beside a ReduceSum is the same bug as
the lone Reshape's, and as an Identity's. The cause is read off the verdict and localization's
first divergent node (``runner.localize``): what the culprit computes decides the mechanism,
never a list of ops. A suite's ``cases:`` rule may declare the cause it expects (``cause:``);
``run`` checks it against the localized one, and ``explore-report`` pins a finding whose cause a
bugs suite declares on its target.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MECHANISMS: dict[str, str] = {
    "wrong-result": "a node's eager output differs from onnxruntime CPU: a kernel bug",
    "stale-copy-output": "under capture, a graph output holding an input's values unchanged (a "
    "view or a copy, whichever op makes it) replays an earlier run's",
    "stale-layout": "under capture, a node uses an earlier layout's constants",
    "wrong-replay": "under capture, a node's output differs from its eager output",
    "capture-not-engaged": "a capture session's replays rebuild their bind groups: the build "
    "captures nothing, whatever the model",
    "refusal": "the backend will not run a node on its GPU, or will not capture the graph",
    "crash": "the backend fails or runs out of time",
}
# mechanisms whose culprit is no part of the cause: the same whichever op carries them
OP_FREE = frozenset({"stale-copy-output", "capture-not-engaged"})
# those localization names (``runner.localize``), which ``run`` checks a declared cause against
LOCALIZED_MECHANISMS = frozenset(
    {"wrong-result", "stale-copy-output", "stale-layout", "wrong-replay"}
)
REFUSALS = frozenset({"capture-unsupported", "unsupported-op"})
# verdicts whose cause is the build's, whatever the model: a case expecting one states it
BUILD_VERDICTS = frozenset({"capture-not-engaged"})
CRASHES = frozenset({"error", "timeout"})


@dataclass(frozen=True)
class Cause:
    mechanism: str
    culprit: str = ""  # the culprit's op; "" where the mechanism has none (``OP_FREE``)
    localized: bool = True  # False: no node found; `culprit` is then the model's ops, joined

    def __str__(self) -> str:
        """``stale-copy-output``, ``wrong-result of Slice``; a cause no node was found for
        says so (``wrong-result of Gelu+Slice (not localized)``)."""
        text = f"{self.mechanism} of {self.culprit}" if self.culprit else self.mechanism
        return text if self.localized else f"{text} (not localized)"


def parse_cause(text: str) -> Cause:
    """A cause a suite declares: ``MECHANISM of OP``, or ``stale-copy-output`` alone (the
    suite schema checks the spelling first); ValueError naming what is expected otherwise."""
    mechanism, _, culprit = text.partition(" of ")
    if mechanism not in LOCALIZED_MECHANISMS or (mechanism in OP_FREE) == bool(culprit):
        raise ValueError(
            f"expected 'MECHANISM of OP' with MECHANISM one of "
            f"{', '.join(sorted(LOCALIZED_MECHANISMS - OP_FREE))}, or "
            f"{' or '.join(sorted(OP_FREE & LOCALIZED_MECHANISMS))} alone, not {text!r}"
        )
    return Cause(mechanism, culprit)


def cause_of(
    verdict: str, divergent: Mapping[str, Any] | None, unlocalized: str = ""
) -> Cause | None:
    """The cause of a failure of headline `verdict`, from its first divergent node; where none
    was found, by its verdict alone with `unlocalized` (what tells it apart: the model's ops) as
    its culprit. None for a pass or a skip."""
    if verdict in REFUSALS:  # told apart by the backend's message, shrunk to what it refuses
        return Cause("refusal")
    if verdict in CRASHES:
        return Cause("crash")
    if verdict in BUILD_VERDICTS:  # of the build, not of a node
        return Cause(verdict)
    if verdict in ("pass", "skipped"):
        return None
    if divergent and divergent.get("op_type"):
        if divergent.get("against") == "onnxruntime CPU":
            return Cause("wrong-result", divergent["op_type"])
        if divergent.get("copy"):
            return Cause("stale-copy-output")
        stale = verdict == "stale-layout"
        return Cause("stale-layout" if stale else "wrong-replay", divergent["op_type"])
    mechanism = {
        "reference-mismatch": "wrong-result",
        "expected-mismatch": "wrong-result",
        "stale-layout": "stale-layout",
    }.get(verdict, "wrong-replay")
    return Cause(mechanism, unlocalized, localized=False)
