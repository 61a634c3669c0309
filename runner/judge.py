"""Step 4: turn what a backend reported into verdicts.

Each detector looks at one case's ``Evidence`` and names the verdicts it sees; they are declared
once, in ``DETECTORS``. The judge runs them all, so a result lists every verdict that applies and
headlines the most specific (``runner.verdicts``).

Every run of a case gets its own inputs (the case's input sequence, ``runner.schedule``), so
each run is judged against what belongs to its inputs: the eager twin's run of the same inputs,
the oracle's reference for them. When the oracle could not run the case, the judges that remain
(the op test's file, capture against eager) still judge it, and the message says why there is
no reference.

This is the only place verdicts are decided. A repro bundle judges with it too: ``repro.py``
imports it, and the bundle's page runs it under Pyodide (``runner.scenario.bundled``). So it
imports only the standard library and other such modules (tests/test_architecture.py): the
arrays are opaque here, and ``Evidence.measure`` compares them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from runner.measure import Comparison, Measure, Outputs, Tolerance, worst
from runner.schedule import BASE, Feed, Variant
from runner.verdicts import SKIP_BACKEND, Outcome, headline, onnxruntime_lacks


class JudgedCase(Protocol):
    """What the judge reads of a case (``runner.matrix.Case``; a bundle's step on its page)."""

    @property
    def capture(self) -> bool: ...
    @property
    def dynamic(self) -> bool: ...
    @property
    def mode(self) -> str: ...
    @property
    def graphs(self) -> int: ...
    @property
    def revisit(self) -> bool: ...
    @property
    def tolerance(self) -> Tolerance: ...
    @property
    def expect(self) -> frozenset[str]: ...
    @property
    def moved(self) -> bool: ...


class JudgedTrace(Protocol):
    """What replays asked of WebGPU, as far as capture engagement shows in it."""

    @property
    def replay_bind_groups_created(self) -> int: ...
    @property
    def replay_uniform_writes(self) -> int: ...
    @property
    def replay_reruns(self) -> int: ...
    @property
    def unrecorded_graphs(self) -> tuple[int, ...]: ...


class JudgedRun(Protocol):
    """What the judge reads of a backend's report (``runner.backends.base.BackendRun``)."""

    @property
    def status(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def runs(self) -> Sequence[Outputs]: ...
    @property
    def trace(self) -> JudgedTrace: ...


@dataclass(frozen=True)
class CaseFacts:
    """A `JudgedCase` as plain values, for evidence that has no ``Case``: a repro bundle's
    step, read from its files, and a scenario's session."""

    capture: bool
    graphs: int
    tolerance: Tolerance
    expect: frozenset[str] = frozenset({"pass"})
    revisit: bool = False
    dynamic: bool = False
    moved: bool = False

    @property
    def mode(self) -> str:
        return "capture" if self.capture else "eager"


@dataclass(frozen=True)
class ReplayCounts:
    """A `JudgedTrace` as plain values: what the replays asked of WebGPU."""

    replay_bind_groups_created: int = 0
    replay_uniform_writes: int = 0
    replay_reruns: int = 0
    unrecorded_graphs: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunFacts:
    """A `JudgedRun` as plain values, beside `CaseFacts`."""

    status: str
    message: str = ""
    runs: tuple[Outputs, ...] = ()
    trace: ReplayCounts = ReplayCounts()


def default_measure() -> Measure:
    """numpy's comparisons, the suite's. Imported here, when the suite asks: a bundle's page
    judges without numpy and passes its own measure."""
    from runner.compare import NUMPY

    return NUMPY


@dataclass(frozen=True)
class Twin:
    """Another mode's run of the same cell (eager for a capture case, dynamic for both), with
    the inputs each of its runs got."""

    run: JudgedRun
    feeds: tuple[Feed, ...] = ()  # () : every run got the base inputs

    def outputs_of(self, variant: Variant) -> Outputs | None:
        """Its output for `variant`'s inputs, if it ran them and ran at all."""
        if self.run.status != "ok":
            return None
        runs = self.run.runs
        for outputs, feed in zip(runs, _feeds(self.feeds, len(runs)), strict=True):
            if feed.variant == variant:
                return outputs
        return None


def _feeds(feeds: tuple[Feed, ...], runs: int) -> tuple[Feed, ...]:
    """One feed per run: `feeds` (() : every run got the base inputs)."""
    feeds = feeds or (Feed(0, BASE),)
    return (feeds + (feeds[-1],) * runs)[:runs]


def _last(run: JudgedRun) -> Outputs:
    """The last run's outputs: under capture, a replay, which is what is under test."""
    return run.runs[-1] if run.runs else {}


@dataclass(frozen=True)
class Evidence:
    case: JudgedCase
    run: JudgedRun
    references: Mapping[Variant, Outputs]  # the oracle's, per input variant; {}: none
    feeds: tuple[Feed, ...] = ()  # what each run got (the workload's schedule); (): base only
    eager: Twin | None = None  # the eager twin, for a capture case
    dynamic: Twin | None = None  # the dynamic twin, for eager and capture cases
    # (layout label, references) of content-different layouts that ran earlier in the sequence
    earlier: tuple[tuple[str, Mapping[Variant, Outputs]], ...] = ()
    no_reference: str = ""  # why the oracle gave no reference, when it gave none
    expected: Outputs | None = None  # an op test's file's expected outputs; None: no op test
    measure: Measure = field(default_factory=default_measure)
    # per input variant, each reference element's slack: how far rounding the inputs moves it
    # (``runner.oracle.conditioning``), asked for only where the tolerance alone fails; None:
    # the tolerance alone
    slack: Callable[[Variant], Outputs] | None = None

    def compare(
        self, actual: Outputs, expected: Outputs, exact_integers: bool = False
    ) -> dict[str, Comparison]:
        return self.measure.compare(actual, expected, self.case.tolerance, exact_integers)

    def against_reference(self, actual: Outputs, variant: Variant) -> dict[str, Comparison]:
        """`actual` against the reference for `variant`'s inputs, each element within the
        tolerance or else its slack (an element ill-conditioned rounding explains is no bug)."""
        reference = self.references[variant]
        plain = self.compare(actual, reference)
        if self.slack is None or all(c.ok for c in plain.values()):
            return plain
        return self.measure.compare(
            actual, reference, self.case.tolerance, slack=self.slack(variant)
        )

    @property
    def run_feeds(self) -> tuple[Feed, ...]:
        """One feed per run the backend reported."""
        return _feeds(self.feeds, len(self.run.runs))

    @property
    def last_variant(self) -> Variant:
        return self.run_feeds[-1].variant if self.run.runs else BASE

    def expected_for(self, feed: Feed) -> tuple[Outputs | None, str]:
        """What a capture run of `feed` must give: the eager twin's run of the same inputs, or
        else the reference for them; and which of the two it is."""
        if self.eager is not None:
            eager = self.eager.outputs_of(feed.variant)
            if eager is not None:
                return eager, "eager"
        return self.references.get(feed.variant), "the reference (no eager twin)"

    @cached_property  # several detectors ask; compare once per case
    def vs_reference(self) -> dict[str, Comparison]:
        """The last run (under capture, a replay) against the reference for its inputs."""
        if self.last_variant not in self.references:
            return {}
        return self.against_reference(_last(self.run), self.last_variant)


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


def _lacks_kernel(run: JudgedRun) -> bool:
    """The backend has no kernel for a node (its own word, or onnxruntime's)."""
    return run.status == "unsupported-op" or (
        run.status == "error" and onnxruntime_lacks(run.message) is not None
    )


def backend_status(ev: Evidence) -> list[Finding]:
    """The backend's own failure. What it cannot run at all is a skip where nobody asked it to:
    an op test's one node it lacks (or will not capture), a case moved to it by `--backend`
    that uses an operator it has no kernel for."""
    if ev.run.status == "ok":
        return []
    op_test_lacks = ev.expected is not None and (
        ev.run.status in LACKING_STATUSES or _lacks_kernel(ev.run)
    )
    if op_test_lacks or ev.case.moved and _lacks_kernel(ev.run):
        return [Finding("skipped", f"{SKIP_BACKEND}: {ev.run.status}: {ev.run.message}")]
    return [Finding(ev.run.status, ev.run.message)]


def _eager_runs(ev: Evidence) -> Twin | None:
    """The runs kernels are judged by: the case's own (eager, dynamic), or a capture case's
    eager twin's."""
    twin = ev.eager if ev.case.capture else Twin(ev.run, ev.feeds)
    return twin if twin is not None and twin.run.status == "ok" else None


def _who(ev: Evidence) -> str:
    return "eager twin" if ev.case.capture else f"{ev.case.mode} output"


def _worst_mismatch(comparisons: Mapping[str, Comparison]) -> tuple[str, Comparison] | None:
    bad = {name: c for name, c in comparisons.items() if not c.ok}
    return max(bad.items(), key=lambda item: item[1].max_abs) if bad else None


def _distinct_runs(feeds: tuple[Feed, ...]) -> Iterator[tuple[int, Feed]]:
    """The first run of each input variant."""
    seen: set[Variant] = set()
    for index, feed in enumerate(feeds):
        if feed.variant not in seen:
            seen.add(feed.variant)
            yield index, feed


def _run_note(index: int, feeds: tuple[Feed, ...]) -> str:
    """Which run, where the runs had different inputs."""
    return f" (run {_run_name(index, feeds)})" if len({f.variant for f in feeds}) > 1 else ""


def _run_name(index: int, feeds: tuple[Feed, ...]) -> str:
    """``3``, or ``1, the prefill`` for a decoder's prefill."""
    return f"{index + 1}, the prefill" if feeds[index].prefill else str(index + 1)


def reference_mismatch(ev: Evidence) -> list[Finding]:
    """Eager output against the oracle, every run's against the reference for its inputs; for a
    capture case, its eager twin's."""
    twin = _eager_runs(ev)
    if twin is None or not ev.references:
        return []
    feeds = _feeds(twin.feeds, len(twin.run.runs))
    found = []
    for index, feed in _distinct_runs(feeds):
        if feed.variant not in ev.references:
            continue
        bad = _worst_mismatch(ev.against_reference(twin.run.runs[index], feed.variant))
        if bad is not None:
            found.append((bad[1].max_abs, index, bad))
    if not found:
        return []
    _, index, (name, c) = max(found, key=lambda item: item[0])
    return [
        Finding(
            "reference-mismatch",
            f"{_who(ev)} differs from onnxruntime CPU on {name!r}{_run_note(index, feeds)}: "
            f"{c.describe()}",
        )
    ]


def expected_mismatch(ev: Evidence) -> list[Finding]:
    """An op test's eager output for the file's own inputs (a capture case's twin's) against the
    file's expected outputs, as ORT-web's runner compares; says so explicitly when the file
    disagrees with onnxruntime CPU."""
    twin = _eager_runs(ev)
    if ev.expected is None or twin is None:
        return []
    actual = twin.outputs_of(BASE)
    if actual is None:
        return []
    vs_file = _worst_mismatch(ev.compare(actual, ev.expected, exact_integers=True))
    cpu = ev.references.get(BASE)
    file_vs_cpu = (
        None if cpu is None else _worst_mismatch(ev.compare(cpu, ev.expected, exact_integers=True))
    )
    note = None
    if file_vs_cpu is not None:
        name, c = file_vs_cpu
        note = (
            f"the file's expected output disagrees with onnxruntime CPU on {name!r}: {c.describe()}"
        )
    if vs_file is not None:
        name, c = vs_file
        message = f"{_who(ev)} differs from the file's expected output on {name!r}: {c.describe()}"
        return [Finding("expected-mismatch", "; ".join(filter(None, (message, note))))]
    if note and reference_mismatch(ev):  # the backend sides with the file, not the oracle
        return [Finding("reference-mismatch", f"{note}, and the {_who(ev)} agrees with the file")]
    return []


def non_finite(ev: Evidence) -> list[Finding]:
    """Every run's outputs against the reference for its inputs: NaN or infinity where
    onnxruntime CPU's values are finite (an exp past 88, a division by zero, a buffer nothing
    wrote). It comes with reference-mismatch or capture-mismatch, which say where; a rule that
    expects it pins the symptom itself."""
    if ev.run.status != "ok":
        return []
    feeds = ev.run_feeds
    for index, (outputs, feed) in enumerate(zip(ev.run.runs, feeds, strict=True)):
        if feed.variant not in ev.references:
            continue
        for name, c in ev.compare(outputs, ev.references[feed.variant]).items():
            if c.non_finite:
                return [
                    Finding(
                        "non-finite",
                        f"{ev.case.mode} output {name!r}{_run_note(index, feeds)} holds "
                        f"{c.non_finite}/{c.total} NaN or infinite elements where onnxruntime "
                        "CPU's are finite",
                    )
                ]
    return []


def capture_mismatch(ev: Evidence) -> list[Finding]:
    """Every capture run against what eager gave for the same inputs."""
    if not ev.case.capture or ev.run.status != "ok":
        return []
    feeds = ev.run_feeds
    found = []
    for index, (outputs, feed) in enumerate(zip(ev.run.runs, feeds, strict=True)):
        expected, what = ev.expected_for(feed)
        if expected is None:
            continue
        bad = _worst_mismatch(ev.compare(outputs, expected))
        if bad is not None:
            found.append((bad[1].max_abs, index, what, bad))
    if not found:
        return []
    _, index, what, (name, c) = max(found, key=lambda item: item[0])
    where = f" in run {_run_name(index, feeds)} of {len(feeds)}" if len(feeds) > 1 else ""
    first = found[0][1]  # where a loop's runs start to go wrong, when the worst is later
    where += f" (runs differ from run {first + 1})" if first != index else ""
    return [
        Finding(
            "capture-mismatch",
            f"capture output {name!r} differs from {what}{where}: {c.describe()}",
        )
    ]


def stale_layout(ev: Evidence) -> list[Finding]:
    """A wrong output that an earlier layout's reference explains better than its own.

    Names the earlier layout whose reference fits best; among equals (layouts differing only in
    order share a reference), the first to run, where a stale cache entry would come from.
    """
    if not ev.case.capture or ev.run.status != "ok" or not ev.earlier or not ev.vs_reference:
        return []
    if all(c.ok for c in ev.vs_reference.values()):
        return []
    own = worst(ev.vs_reference)[0]
    fits = []
    for index, (label, references) in enumerate(ev.earlier):
        reference = references.get(ev.last_variant)
        if reference is None:
            continue
        other = ev.compare(_last(ev.run), reference)
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


def _fits_better(
    outputs: Outputs, own: Outputs, candidates: list[tuple[int, Feed, Outputs]], ev: Evidence
) -> tuple[float, int, Feed] | None:
    """The candidate `outputs` fits best, if it fits within tolerance or ten times closer than
    `own`, which it must not fit."""
    vs_own = ev.compare(outputs, own)
    if all(c.ok for c in vs_own.values()):
        return None
    error_own = worst(vs_own)[0]
    fits = []
    for index, feed, expected in candidates:
        other = ev.compare(outputs, expected)
        if all(c.ok for c in other.values()) or worst(other)[0] < error_own / 10:
            fits.append((worst(other)[0], index, feed))
    return min(fits, key=lambda fit: (fit[0], fit[1])) if fits else None


def _crossed_runs(ev: Evidence, same_graph: bool) -> Iterator[tuple[int, Feed, Feed, float, int]]:
    """Capture runs whose output fits an earlier run's expected output better than their own:
    (run, its feed, the earlier run's feed, error against it, the earlier run). Earlier runs of
    the same graph with other inputs (`same_graph`), or earlier runs of other graphs."""
    if not ev.case.capture or ev.run.status != "ok":
        return
    feeds = ev.run_feeds
    for index, (outputs, feed) in enumerate(zip(ev.run.runs, feeds, strict=True)):
        own, _ = ev.expected_for(feed)
        if own is None:
            continue
        candidates = []
        for earlier, other in enumerate(feeds[:index]):
            if other.variant == feed.variant or (other.graph == feed.graph) != same_graph:
                continue
            expected, _ = ev.expected_for(other)
            if expected is not None:
                candidates.append((earlier, other, expected))
        fit = _fits_better(outputs, own, candidates, ev)
        if fit is not None:
            error, earlier, other = fit
            yield index, feed, other, error, earlier


def wrong_graph(ev: Evidence) -> list[Finding]:
    """A replay of one graph whose output is another graph's result (its inputs' output)."""
    for index, feed, other, error, earlier in _crossed_runs(ev, same_graph=False):
        return [
            Finding(
                "wrong-graph",
                f"run {index + 1} (graph {feed.graph}) returned graph {other.graph}'s result: "
                f"it matches the output for run {earlier + 1}'s inputs (max abs {error:.3g}) "
                "better than its own",
                stale_from=f"graph {other.graph}",
            )
        ]
    return []


def stale_input(ev: Evidence) -> list[Finding]:
    """A replay whose output belongs to an earlier run's inputs: it read stale inputs."""
    for index, feed, _, error, earlier in _crossed_runs(ev, same_graph=True):
        graph = f" (graph {feed.graph})" if ev.case.graphs > 1 else ""
        return [
            Finding(
                "stale-input",
                f"run {index + 1}{graph} returned the output for run {earlier + 1}'s inputs "
                f"(max abs {error:.3g}) rather than for its own",
                stale_from=f"run {earlier + 1}",
            )
        ]
    return []


def nondeterministic(ev: Evidence) -> list[Finding]:
    """Runs of the same inputs must agree bit for bit; under capture, replays only (each graph's
    first run after its prefill records)."""
    if ev.run.status != "ok":
        return []
    recording = {f.graph for f in ev.run_feeds} if ev.case.capture else set()
    first: dict[Variant, tuple[int, Outputs]] = {}
    for index, (outputs, feed) in enumerate(zip(ev.run.runs, ev.run_feeds, strict=True)):
        if feed.prefill:
            continue
        if feed.graph in recording:
            recording.discard(feed.graph)
            continue
        if feed.variant not in first:
            first[feed.variant] = (index, outputs)
            continue
        earlier, reference = first[feed.variant]
        name = ev.measure.first_difference(reference, outputs)
        if name is not None:
            return [
                Finding(
                    "nondeterministic",
                    f"run {index + 1} of the same input gave another {name!r} than run "
                    f"{earlier + 1}",
                )
            ]
    return []


def capture_not_engaged(ev: Evidence) -> list[Finding]:
    trace = ev.run.trace
    if not ev.case.capture or ev.run.status != "ok":
        return []
    if trace.unrecorded_graphs:
        graphs = ", ".join(map(str, trace.unrecorded_graphs))
        return [
            Finding(
                "capture-not-engaged",
                f"the first run of graph {graphs} recorded nothing (it created no bind group, "
                "or replayed): "
                "the backend does not keep a graph per gpu_graph_id",
            )
        ]
    if len(ev.run.runs) < 2:
        return []
    if trace.replay_bind_groups_created or trace.replay_uniform_writes:
        return [
            Finding(
                "capture-not-engaged",
                f"replays created {trace.replay_bind_groups_created}"
                f" bind groups and wrote uniforms {trace.replay_uniform_writes} times",
            )
        ]
    if trace.replay_reruns:
        return [
            Finding(
                "capture-not-engaged",
                f"{trace.replay_reruns} replays executed the model again: no captured graph "
                "was replayed for them",
            )
        ]
    return []


DETECTORS: tuple[Detector, ...] = (
    backend_status,
    reference_mismatch,
    expected_mismatch,
    capture_mismatch,
    non_finite,
    stale_layout,
    wrong_graph,
    stale_input,
    nondeterministic,
    capture_not_engaged,
)


@dataclass(frozen=True)
class Judgement:
    verdicts: frozenset[str]
    verdict: str  # the headline
    outcome: Outcome  # the verdicts against the case's expectation
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


def _static_differs(ev: Evidence) -> bool:
    """Whether the static-shape eager runs differ from the dynamic twin's on the same inputs."""
    eager = _eager_runs(ev)
    if ev.dynamic is None or eager is None or ev.case.dynamic:
        return False
    for index, feed in _distinct_runs(_feeds(eager.feeds, len(eager.run.runs))):
        dynamic = ev.dynamic.outputs_of(feed.variant)
        if dynamic is not None:
            comparisons = ev.compare(eager.run.runs[index], dynamic)
            if _worst_mismatch(comparisons) is not None:
                return True
    return False


def attribute(ev: Evidence, verdicts: frozenset[str]) -> str | None:
    """Where a failure lives: eager too (a kernel bug), the static-shape path (static eager
    differs from dynamic, which pins no dim), the static-shape capture path alone (eager, which
    binds afresh every run, agrees), or only after a layout change (a stale layout, or the first
    layout failing when captured again)."""
    if verdicts <= {"pass", "skipped"} or ev.run.status != "ok":
        return None
    if verdicts & {"reference-mismatch", "expected-mismatch"}:
        return "static-shape path" if _static_differs(ev) else "eager too"
    if "stale-layout" in verdicts or ev.case.revisit:
        return "capture only, after a layout change"
    return "capture only" if ev.case.capture else ev.case.mode


def judge(ev: Evidence) -> Judgement:
    """Every detector's findings; a case that could not run here is `skipped` and nothing else."""
    findings = tuple(f for detector in DETECTORS for f in detector(ev))
    if any(f.verdict == "skipped" for f in findings):
        findings = tuple(f for f in findings if f.verdict == "skipped")
    verdicts = frozenset(f.verdict for f in findings) or frozenset({"pass"})
    max_abs = max_rel = None
    if ev.run.status == "ok" and ev.vs_reference:
        max_abs, max_rel = worst(ev.vs_reference)
    messages = [f.message for f in findings if f.message]
    if ev.no_reference and "skipped" not in verdicts:
        messages.append(f"no reference: {ev.no_reference}")
    return Judgement(
        verdicts=verdicts,
        verdict=headline(verdicts),
        outcome=outcome(verdicts, ev.case.expect),
        message="; ".join(messages),
        max_abs=max_abs,
        max_rel=max_rel,
        attribution=attribute(ev, verdicts),
        stale_from=next((f.stale_from for f in findings if f.stale_from), None),
        findings=findings,
    )
