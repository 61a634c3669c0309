"""The step every unit of work goes through: a matrix case or a scenario, from selected to
judged and recorded. It decides the skip (``runner.skips``, once, here), materializes the
workload, asks onnxruntime CPU for references, hands the backend its work through its one entry
point (``Backend.run``), builds the judge's ``Evidence`` (a case's here; a scenario's session by
session in ``runner.scenario.judging``), judges, localizes when asked, and makes the stored
result.

Every path that judges steps here: the run (``runner.pipeline``, which ``bisect`` probes
through), explore's examples, repro's reruns of cut models and of scenarios, and the benchmarks;
so a unit is judged on the same evidence however it runs. A case is a scenario's simplest form:
one session, run ``runs`` times; a layout-change sequence (``LayoutSequence``) steps as a whole
(``Step.sequence``), which keeps what its later cases are judged against (the eager and dynamic
twins' runs, the references of layouts captured earlier, and those captures, which localization
replays first) and tells the backend where the sequence opens and closes. A unit the oracle
cannot run still runs where the judge can do without a reference (a case); a scenario, judged
run by run against the CPU, fails.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from runner.backends.base import (
    Backend,
    BackendOptions,
    BackendRun,
    CaseWork,
    ScenarioWork,
    case_timeout,
)
from runner.cause import Cause, cause_of
from runner.compare import NUMPY
from runner.history import CaseResult
from runner.history.record import result_id
from runner.judge import Evidence, Judgement, Twin, judge
from runner.localize import LOCALIZED_VERDICTS, first_divergent_node
from runner.matrix import Case, LayoutSequence, ScenarioTarget
from runner.measure import Tolerance
from runner.oracle import References, conditioning
from runner.scenario.judging import ScenarioJudged, judge_steps
from runner.scenario.values import ScenarioRun
from runner.schedule import Feed, Variant
from runner.skips import scenario_skip_reason, skip_reason
from runner.suite.scenarios import Scenario
from runner.suite.spec import mode_name
from runner.verdicts import Outcome
from runner.workload import Workload, materialize
from runner.workload.optest import expected_outputs

# onnxruntime CPU's outputs for every input variant of a workload; raises what onnxruntime
# raises when it cannot run the model (``runner.oracle.ReferenceCache.references``).
Oracle = Callable[[Workload], References]

SCENARIO_MODE = "scenario"  # a scenario result's `capture`: its sessions say which capture

Unit = Case | ScenarioTarget


@dataclass(frozen=True)
class Stepped:
    """What one unit's step found: enough for its stored result, for explore's shrinking and
    for repro's bundle."""

    case: Case  # a scenario's: the case its sessions share (model, shape, target, tolerance)
    run: BackendRun | ScenarioRun  # what the backend reported; a skip or failed build says why
    judgement: Judgement
    wall_ms: float  # the whole step: materialize ... localize
    references: References = field(default_factory=dict)  # {}: none
    no_reference: str = ""  # why the oracle gave none, when it could not run the case
    divergent_node: dict[str, Any] | None = None
    workload: Workload | None = None  # None: never materialized
    scenario: ScenarioTarget | None = None  # None: a matrix case
    failing_step: int | None = None  # a scenario's step that did not pass (index); else None
    feeds: tuple[Feed | None, ...] = ()  # a scenario's, per step: a run's graph and inputs

    @property
    def model_digest(self) -> str | None:
        return self.workload.model_digest if self.workload else None

    def result(self, run_id: str) -> CaseResult:
        """The record the stores keep; a scenario's under the id ``scenario=NAME/BACKEND``, its
        message starting with the failing step."""
        result = case_result(
            run_id,
            self.case,
            self.run
            if isinstance(self.run, BackendRun)
            else BackendRun(self.run.status, message=self.run.message, adapter=self.run.adapter),
            self.judgement,
            self.divergent_node,
            wall_ms=self.wall_ms,
            model_digest=self.model_digest,
        )
        if self.scenario is None:
            return result
        return dataclasses.replace(
            result,
            result_id=result_id(run_id, self.scenario.id),
            case_id=self.scenario.id,
            capture=SCENARIO_MODE,
            suite_line=self.scenario.scenario.line,
            trace={"steps": len(self.run.steps), **self.run.details},
        )


class Step:
    """Steps units: a layout-change sequence case by case, remembering within it what the judge
    and localization look back at, or a scenario."""

    def __init__(self, oracle: Oracle, options: BackendOptions, localize: bool = False):
        self._oracle = oracle
        self._options = options
        self._localize = localize

    def run(self, unit: Unit, backend: Backend, workload: Workload | None = None) -> Stepped:
        """`unit` on `backend`, a case as a sequence of its own, its workload materialized
        unless given (repro's cut models); never raises for the unit's own failure."""
        if isinstance(unit, ScenarioTarget):
            return self._scenario(unit, backend)
        workloads = {unit.id: workload} if workload is not None else {}
        return next(self.sequence(LayoutSequence((unit,)), backend, workloads))

    def sequence(
        self,
        sequence: LayoutSequence,
        backend: Backend,
        workloads: Mapping[str, Workload] | None = None,
        started: Callable[[Case], None] | None = None,
    ) -> Iterator[Stepped]:
        """Each case of `sequence` stepped in order on `backend` (told where the sequence opens
        and closes), `workloads` by case id in place of materialized ones, `started` told of
        each case as it starts. A failure to localize waits for the sequence's end, so that
        localization's reruns leave the later cases' device alone; the cases after it wait
        with it, so that the stepped come in the sequence's order."""
        twins: dict[tuple[str, str], Twin] = {}  # (cell, mode) -> its eager/dynamic run
        layouts: dict[str, tuple[str, References]] = {}  # workload key -> (layout, refs)
        captured: list[tuple[Case, Workload]] = []  # the capture cases so far, in order
        waiting: list[tuple[Stepped, tuple[tuple[Case, Workload], ...]]] = []
        opens = True  # until a case reaches the backend
        for index, case in enumerate(sequence.cases):
            if started is not None:
                started(case)
            closes = index == len(sequence.cases) - 1
            workload = (workloads or {}).get(case.id)
            stepped = self._case(case, backend, workload, (opens, closes), twins, layouts)
            before = tuple(captured)
            if stepped.workload is not None:  # it reached the backend
                opens = False
                if not case.capture:
                    feeds = stepped.workload.feeds(self._options.runs)
                    twins[case.cell, case.mode] = Twin(stepped.run, feeds)
                else:
                    if stepped.references:
                        label = case.layout.label
                        layouts.setdefault(stepped.workload.key, (label, stepped.references))
                    captured.append((case, stepped.workload))
            if waiting or self._localizes(stepped):
                waiting.append((stepped, before))
            else:
                yield stepped
        for stepped, before in waiting:
            yield self._localized(stepped, backend, before) if self._localizes(stepped) else stepped

    def _localizes(self, stepped: Stepped) -> bool:
        return self._localize and bool(stepped.judgement.verdicts & LOCALIZED_VERDICTS)

    def _localized(
        self, stepped: Stepped, backend: Backend, before: Sequence[tuple[Case, Workload]]
    ) -> Stepped:
        """`stepped` with its first divergent node, its judgement checked against the cause
        its rule declares."""
        began, case, judgement = time.perf_counter(), stepped.case, stepped.judgement
        divergent = diagnose(backend, case, stepped.workload, judgement.verdicts, before)
        return dataclasses.replace(
            stepped,
            judgement=_cause_checked(judgement, case.expectation.cause, divergent),
            divergent_node=divergent,
            wall_ms=stepped.wall_ms + _ms_since(began),
        )

    def _case(
        self,
        case: Case,
        backend: Backend,
        workload: Workload | None,
        place: tuple[bool, bool],
        twins: Mapping[tuple[str, str], Twin],
        layouts: Mapping[str, tuple[str, References]],
    ) -> Stepped:
        """`case` judged against the twins and the layouts captured before it in its sequence;
        `place`: whether it opens and whether it closes the sequence."""
        began = time.perf_counter()
        expected = None
        try:
            skip = skip_reason(case)
            if skip:
                return _unrun(case, BackendRun(status="skipped", message=skip), began)
            if workload is None:
                workload = materialize(case, self._options.runs)
            if case.model.op_test is not None:
                expected = expected_outputs(case.model.op_test)
        except Exception as exc:  # a model or input that cannot be built fails this case only
            return _unrun(case, _failed_run(exc), began)
        references, no_reference = self._references(workload)
        feeds = workload.feeds(self._options.runs)
        references = {v: workload.defined(v, outputs) for v, outputs in references.items()}
        slack = functools.cache(functools.partial(_slack, workload))
        run = _defined(backend.run(CaseWork(case, workload, *place)), workload, feeds)
        judgement = judge(
            Evidence(
                case,
                run,
                references,
                feeds=feeds,
                eager=twins.get((case.cell, "eager")) if case.capture else None,
                dynamic=None if case.dynamic else twins.get((case.cell, "dynamic")),
                earlier=tuple(v for k, v in layouts.items() if k != workload.key)
                if case.capture
                else (),
                no_reference=no_reference,
                expected=expected,
                slack=slack,
            )
        )
        ms = _ms_since(began)
        return Stepped(case, run, judgement, ms, references, no_reference, workload=workload)

    def _scenario(self, item: ScenarioTarget, backend: Backend) -> Stepped:
        began = time.perf_counter()
        case = item.as_case(self._options.inject)
        feeds = item.scenario.feeds()
        references, run, workload = {}, ScenarioRun(), None
        skip = scenario_skip_reason(item)
        if skip:
            run = ScenarioRun("skipped", skip)
        else:
            try:
                workload = materialize(case, schedule=tuple(f for f in feeds if f is not None))
                references = self._oracle(workload)
            except Exception as exc:  # a model or reference that cannot be built fails it
                run = ScenarioRun("error", f"{type(exc).__name__}: {exc}")
        if run.status == "ok":
            timeout = case_timeout(case, self._options)
            work = ScenarioWork(
                item.scenario, item.target, workload, feeds, self._options.inject, timeout
            )
            run = backend.run(work)
        judged = judge_steps(
            judged_scenario(item.scenario, item.tolerance), run, feeds, references, NUMPY
        )
        return Stepped(
            case,
            run,
            judged.judgement,
            _ms_since(began),
            references,
            workload=workload,
            scenario=item,
            failing_step=judged.step if judged.failing else None,
            feeds=feeds,
        )

    def _references(self, workload: Workload) -> tuple[References, str]:
        """The oracle's references, or none and why: the judges that need none still judge."""
        try:
            return self._oracle(workload), ""
        except Exception as exc:  # onnxruntime CPU refused the model
            return {}, f"onnxruntime CPU refused the case ({type(exc).__name__}: {exc})"


def judged_scenario(scenario: Scenario, tolerance: Tolerance) -> ScenarioJudged:
    """What the judge reads of `scenario`."""
    return ScenarioJudged(
        scenario.steps,
        {s.name: s.capture for s in scenario.sessions},
        scenario.expectation.expect,
        tolerance,
    )


def _defined(run: BackendRun, workload: Workload, feeds: tuple[Feed, ...]) -> BackendRun:
    """`run` with each run's outputs as far as the model defines them (``Workload.defined``)."""
    if workload.device_cache is None:
        return run
    runs = tuple(
        workload.defined(feeds[i].variant, outputs) if i < len(feeds) else outputs
        for i, outputs in enumerate(run.runs)
    )
    return dataclasses.replace(run, runs=runs)


def _slack(workload: Workload, variant: Variant) -> dict[str, Any]:
    """The references' slack for `variant` (``runner.oracle.conditioning``); none where
    onnxruntime CPU cannot compute it: the tolerance alone judges then."""
    try:
        return workload.defined(variant, conditioning(workload, variant))
    except Exception:  # the slack only passes what the tolerance failed; without it, it fails
        return {}


def _unrun(case: Case, why: BackendRun, began: float) -> Stepped:
    """A case the backend is not asked to run at all, judged on why."""
    return Stepped(case, why, judge(Evidence(case, why, {})), _ms_since(began))


def _failed_run(exc: Exception) -> BackendRun:
    return BackendRun(status="error", message=f"{type(exc).__name__}: {exc}")


def _ms_since(began: float) -> float:
    return (time.perf_counter() - began) * 1000


def _cause_checked(
    judgement: Judgement, declared: Cause | None, divergent: dict[str, Any] | None
) -> Judgement:
    """A failure its rule expects whose localized cause is not the one the rule declares is
    unexpected: the bug the rule pins is not the one that failed. One that localization could
    not place (a nondeterministic output, a crash) neither confirms nor contradicts it."""
    if declared is None or judgement.outcome != Outcome.EXPECTED:
        return judgement
    found = cause_of(judgement.verdict, divergent)
    if found == declared or (found is not None and not found.localized):
        return judgement
    return dataclasses.replace(
        judgement,
        outcome=Outcome.UNEXPECTED,
        message=f"{judgement.message}; localized cause {found}, where its rule declares {declared}",
    )


def diagnose(
    backend: Backend,
    case: Case,
    workload: Workload,
    verdicts: frozenset[str],
    prefix: Sequence[tuple[Case, Workload]],
) -> dict[str, Any] | None:
    """The first divergent node (``runner.localize``), or the error localizing raised."""
    try:
        return first_divergent_node(backend, case, workload, verdicts, list(prefix))
    except Exception as exc:  # localization is a diagnosis: its failure must not cost the result
        return {"error": f"{type(exc).__name__}: {exc}"}


def case_result(
    run_id: str,
    case: Case,
    run: BackendRun,
    judgement: Judgement,
    divergent_node: dict[str, Any] | None = None,
    *,
    wall_ms: float,
    model_digest: str | None = None,
) -> CaseResult:
    """The record the stores keep of `case`, run and judged."""
    expect = case.expectation.expect
    return CaseResult(
        result_id=result_id(run_id, case.id),
        run_id=run_id,
        case_id=case.id,
        suite=case.suite.name,
        suite_path=str(case.suite.path),
        model=case.model.name,
        shape=case.shape.as_dict(),
        layout=case.layout.label,
        layout_order=list(case.layout.order),
        layout_values=case.layout.values_dict(),
        backend=case.backend.id,
        bundle=case.backend.bundle,
        version=case.backend.version,
        capture=mode_name(case.capture),
        revisit=case.revisit,
        injected=sorted(case.inject),
        verdict=judgement.verdict,
        verdicts=sorted(judgement.verdicts),
        expected=sorted(expect),
        outcome=judgement.outcome,
        bug=case.expectation.bug,
        reason=case.expectation.reason,
        max_abs_error=_finite(judgement.max_abs),
        max_rel_error=_finite(judgement.max_rel),
        tolerance={"abs": case.tolerance.abs, "rel": case.tolerance.rel},
        timings=asdict(run.timings),
        wall_ms=wall_ms,
        trace=run.trace.summary(),
        attribution=judgement.attribution,
        stale_from=judgement.stale_from,
        divergent_node=divergent_node,
        message=judgement.message,
        finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        suite_line=case.model.line,
        model_digest=model_digest,
        adapter=run.adapter,
    )


def _finite(value: float | None) -> float | None:
    """JSON has no inf/NaN: a non-finite error is stored as null with the message saying why."""
    return value if value is not None and math.isfinite(value) else None
