"""Step 4: turn what a backend reported into verdicts.

Each detector looks at one case's ``Evidence`` and names the verdicts it sees; they are declared
once, in ``DETECTORS``. The judge runs them all, so a result lists every verdict that applies and
headlines the most specific (``runner.verdicts``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from runner.backends.base import BackendRun
from runner.compare import Comparison, compare_outputs, worst
from runner.matrix import Case
from runner.skips import SKIP_BACKEND, onnxruntime_lacks, skip_reason
from runner.suite.spec import Tolerance
from runner.verdicts import Outcome, headline
from runner.workload.optest import expected_outputs


@dataclass(frozen=True)
class Evidence:
    case: Case
    run: BackendRun
    reference: Mapping[str, np.ndarray]
    eager: BackendRun | None = None  # the eager twin's run, for a capture case
    # (layout label, reference) of content-different layouts that ran earlier in the sequence
    earlier: tuple[tuple[str, Mapping[str, np.ndarray]], ...] = ()

    @cached_property  # several detectors ask; compare once per case
    def vs_reference(self) -> dict[str, Comparison]:
        return compare_outputs(dict(self.run.outputs), dict(self.reference), self.case.tolerance)


@dataclass(frozen=True)
class Finding:
    verdict: str
    message: str
    stale_from: str | None = None


Detector = Callable[[Evidence], list[Finding]]


# What a backend reports when it cannot run an op test's one node at all (no kernel, its
# WebGPU EP will not take the node into a capture, an element type its adapter lacks): for a
# one-node model not a bug of the backend's capture, so the case is skipped with the backend's
# reason. An `error` in onnxruntime(-web)'s own words for a missing kernel or schema counts too.
LACKING_STATUSES = frozenset({"unsupported-op", "capture-unsupported", "skipped"})


def backend_status(ev: Evidence) -> list[Finding]:
    if ev.run.status == "ok":
        return []
    if ev.case.model.op_test is not None and (
        ev.run.status in LACKING_STATUSES
        or ev.run.status == "error"
        and onnxruntime_lacks(ev.run.message)
    ):
        return [Finding("skipped", f"{SKIP_BACKEND}: {ev.run.status}: {ev.run.message}")]
    return [Finding(ev.run.status, ev.run.message)]


def _eager_run(ev: Evidence) -> BackendRun | None:
    """The run whose output kernels are judged by: the case's own, or a capture case's twin."""
    run = ev.eager if ev.case.capture else ev.run
    return run if run is not None and run.status == "ok" else None


def _worst_mismatch(comparisons: Mapping[str, Comparison]) -> tuple[str, Comparison] | None:
    bad = {name: c for name, c in comparisons.items() if not c.ok}
    return max(bad.items(), key=lambda item: item[1].max_abs) if bad else None


def _describe(c: Comparison) -> str:
    return f"{c.mismatched}/{c.total} elements, max abs {c.max_abs:.3g}"


def reference_mismatch(ev: Evidence) -> list[Finding]:
    """Eager output against the oracle; for a capture case, its eager twin's."""
    run = _eager_run(ev)
    if run is None:
        return []
    worst_bad = _worst_mismatch(
        compare_outputs(dict(run.outputs), dict(ev.reference), ev.case.tolerance)
    )
    if worst_bad is None:
        return []
    name, c = worst_bad
    who = "eager twin" if ev.case.capture else "eager output"
    return [
        Finding(
            "reference-mismatch", f"{who} differs from onnxruntime CPU on {name!r}: {_describe(c)}"
        )
    ]


EXACT = Tolerance(abs=0.0, rel=0.0)


def _against_file(
    actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], tolerance: Tolerance
) -> dict[str, Comparison]:
    """As ORT-web's runner compares with a file: floats within tolerance, integers exactly."""
    comparisons = {}
    for name, value in expected.items():
        within = tolerance if value.dtype.kind in "fc" else EXACT
        comparisons.update(compare_outputs(dict(actual), {name: value}, within))
    return comparisons


def expected_mismatch(ev: Evidence) -> list[Finding]:
    """An op test's eager output (a capture case's twin's) against its file's expected outputs,
    as ORT-web's runner compares; says so explicitly when the file disagrees with onnxruntime
    CPU."""
    op_case = ev.case.model.op_test
    run = _eager_run(ev)
    if op_case is None or run is None:
        return []
    expected = expected_outputs(op_case)
    tolerance = ev.case.tolerance
    vs_file = _worst_mismatch(_against_file(run.outputs, expected, tolerance))
    file_vs_cpu = _worst_mismatch(_against_file(ev.reference, expected, tolerance))
    who = "eager twin" if ev.case.capture else "eager output"
    note = None
    if file_vs_cpu is not None:
        name, c = file_vs_cpu
        note = (
            f"the file's expected output disagrees with onnxruntime CPU on {name!r}: {_describe(c)}"
        )
    if vs_file is not None:
        name, c = vs_file
        message = f"{who} differs from the file's expected output on {name!r}: {_describe(c)}"
        return [Finding("expected-mismatch", "; ".join(filter(None, (message, note))))]
    if note and reference_mismatch(ev):  # the backend sides with the file, not the oracle
        return [Finding("reference-mismatch", f"{note}, and the {who} agrees with the file")]
    return []


def capture_mismatch(ev: Evidence) -> list[Finding]:
    if not ev.case.capture or ev.run.status != "ok":
        return []
    if ev.eager is not None and ev.eager.status == "ok":
        against, what = ev.eager.outputs, "eager"
    else:  # no eager twin ran: the oracle stands in
        against, what = ev.reference, "the reference (no eager twin)"
    comparisons = compare_outputs(dict(ev.run.outputs), dict(against), ev.case.tolerance)
    bad = {name: c for name, c in comparisons.items() if not c.ok}
    if not bad:
        return []
    name, c = max(bad.items(), key=lambda item: item[1].max_abs)
    return [
        Finding(
            "capture-mismatch",
            f"capture output {name!r} differs from {what}: "
            f"{c.mismatched}/{c.total} elements, max abs {c.max_abs:.3g}",
        )
    ]


def stale_layout(ev: Evidence) -> list[Finding]:
    """A wrong output that an earlier layout's reference explains better than its own.

    Names the earlier layout whose reference fits best; among equals (layouts differing only in
    order share a reference), the first to run, where a stale cache entry would come from.
    """
    if not ev.case.capture or ev.run.status != "ok" or not ev.earlier:
        return []
    if all(c.ok for c in ev.vs_reference.values()):
        return []
    own = worst(ev.vs_reference)[0]
    fits = []
    for index, (label, reference) in enumerate(ev.earlier):
        other = compare_outputs(dict(ev.run.outputs), dict(reference), ev.case.tolerance)
        if all(c.ok for c in other.values()) or worst(other)[0] < own / 10:
            fits.append((worst(other)[0], index, label))
    if not fits:
        return []
    error, _, label = min(fits)
    return [
        Finding(
            "stale-layout",
            f"output matches layout {label!r}'s reference (max abs "
            f"{error:.3g}) better than its own (max abs {own:.3g})",
            stale_from=label,
        )
    ]


def nondeterministic(ev: Evidence) -> list[Finding]:
    """Runs after the first (replays, under capture) must agree bit for bit."""
    repeats = ev.run.runs[1:] if ev.case.capture else ev.run.runs
    if ev.run.status != "ok" or len(repeats) < 2:
        return []
    first = repeats[0]
    for i, other in enumerate(repeats[1:], start=2):
        for name, value in first.items():
            if not np.array_equal(value, other.get(name), equal_nan=True):
                return [
                    Finding(
                        "nondeterministic",
                        f"run {i} of the same input gave another {name!r} than run 1",
                    )
                ]
    return []


def capture_not_engaged(ev: Evidence) -> list[Finding]:
    trace = ev.run.trace
    if not ev.case.capture or ev.run.status != "ok" or ev.run.timings.runs < 2:
        return []
    if trace.replay_bind_groups_created or trace.replay_uniform_writes:
        return [
            Finding(
                "capture-not-engaged",
                f"replays created {trace.replay_bind_groups_created}"
                f" bind groups and wrote uniforms {trace.replay_uniform_writes} times",
            )
        ]
    return []


DETECTORS: tuple[Detector, ...] = (
    backend_status,
    reference_mismatch,
    expected_mismatch,
    capture_mismatch,
    stale_layout,
    nondeterministic,
    capture_not_engaged,
)


@dataclass(frozen=True)
class Judgement:
    verdicts: frozenset[str]
    verdict: str  # the headline
    message: str
    max_abs: float | None  # against the reference
    max_rel: float | None
    attribution: str | None = None
    stale_from: str | None = None
    findings: tuple[Finding, ...] = ()


def outcome(verdicts: frozenset[str], expect: frozenset[str]) -> Outcome:
    """Verdicts against an expectation."""
    if "skipped" in verdicts:
        return Outcome.SKIPPED
    if expect == {"pass"}:
        return Outcome.EXPECTED if verdicts == {"pass"} else Outcome.UNEXPECTED
    if verdicts & expect:
        return Outcome.EXPECTED
    return Outcome.UNEXPECTED_PASS if verdicts == {"pass"} else Outcome.UNEXPECTED


def attribute(ev: Evidence, verdicts: frozenset[str]) -> str | None:
    """Where a failure lives: eager too (a kernel bug), the static-shape capture path alone
    (eager, which binds afresh every run, agrees: the seed's phenomenon C), or only after a
    layout change (a stale layout, or the first layout failing when captured again)."""
    if verdicts <= {"pass", "skipped"} or ev.run.status != "ok":
        return None
    if verdicts & {"reference-mismatch", "expected-mismatch"}:
        return "eager too"
    if "stale-layout" in verdicts or ev.case.revisit:
        return "capture only, after a layout change"
    return "capture only" if ev.case.capture else "eager"


def judge(ev: Evidence) -> Judgement:
    """Every detector's findings; a case that could not run here is `skipped` and nothing else."""
    known_skip = skip_reason(ev.case)
    findings = (
        (Finding("skipped", known_skip),)
        if known_skip
        else tuple(f for detector in DETECTORS for f in detector(ev))
    )
    if any(f.verdict == "skipped" for f in findings):
        findings = tuple(f for f in findings if f.verdict == "skipped")
    verdicts = frozenset(f.verdict for f in findings) or frozenset({"pass"})
    max_abs = max_rel = None
    if ev.run.status == "ok":
        max_abs, max_rel = worst(ev.vs_reference)
    return Judgement(
        verdicts=verdicts,
        verdict=headline(verdicts),
        message="; ".join(f.message for f in findings if f.message),
        max_abs=max_abs,
        max_rel=max_rel,
        attribution=attribute(ev, verdicts),
        stale_from=next((f.stale_from for f in findings if f.stale_from), None),
        findings=findings,
    )
