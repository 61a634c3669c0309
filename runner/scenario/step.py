"""One scenario on one backend target, from its inputs to its stored result.

The model is materialized at the scenario's shape with every run's inputs (``feeds``), the
oracle computes onnxruntime CPU's outputs for each, the backend runs the steps
(``run_scenario``; a backend without it skips the scenario, saying so), and the first failing
step is judged (``judging``). The result is stored as a case's is, under the id
``scenario=NAME/BACKEND``, its message starting with the step.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from runner.backends.base import Backend, BackendOptions
from runner.backends.sequence import ScenarioPlan, ScenarioRun
from runner.casestep import Oracle
from runner.history import CaseResult
from runner.history.record import result_id
from runner.judge import Judgement
from runner.matrix import Case
from runner.scenario.feeds import scenario_feeds
from runner.scenario.judging import judge_steps
from runner.suite.scenarios import Scenario
from runner.suite.spec import BackendTarget, Suite
from runner.workload import materialize

MODE = "scenario"  # a result's `capture`: its sessions say which capture


@dataclass(frozen=True)
class ScenarioTarget:
    """A scenario of a suite, on one backend target: what a run steps."""

    suite: Suite
    scenario: Scenario
    target: BackendTarget

    @property
    def id(self) -> str:
        return f"scenario={self.scenario.name}/{self.target.id}"


@dataclass(frozen=True)
class SteppedScenario:
    """A scenario's stored result, and which of its steps failed (``explore`` shrinks on it)."""

    result: CaseResult
    failing_step: int | None  # index into the scenario's steps; None: it passed or was skipped


def step_scenario(
    item: ScenarioTarget, backend: Backend, oracle: Oracle, options: BackendOptions, run_id: str
) -> SteppedScenario:
    """`item` run on `backend` and judged; never raises for the scenario's own failure."""
    began = time.perf_counter()
    scenario, suite = item.scenario, item.suite
    tolerance = scenario.tolerance or suite.tolerance
    feeds = scenario_feeds(scenario)
    case = Case(
        suite, scenario.model, scenario.shape, suite.layouts[0], item.target, True, tolerance
    )
    references, run, digest = {}, ScenarioRun(), None
    try:
        workload = materialize(case, schedule=tuple(f for f in feeds if f is not None))
        digest = workload.model_digest
        references = oracle(workload)
    except Exception as exc:  # a model or reference that cannot be built fails this scenario
        run = ScenarioRun("error", f"{type(exc).__name__}: {exc}")
    if run.status == "ok":
        if not hasattr(backend, "run_scenario"):
            run = ScenarioRun("skipped", f"{item.target.name} does not run scenarios yet")
        else:
            plan = ScenarioPlan(
                scenario,
                item.target,
                workload,
                feeds,
                options.inject,
                options.timeout_s or suite.timeout_s,
            )
            run = backend.run_scenario(plan)
    judged = judge_steps(scenario, run, feeds, references, tolerance)
    step = scenario.steps[judged.step]
    judgement = judged.judgement
    failing = judgement.verdicts != {"pass"} and run.status != "skipped"
    if failing:
        line = f", line {step.line}" if step.line is not None else ""  # drawn steps have none
        where = f"step {judged.step + 1} ({step.describe()}{line})"
        judgement = dataclasses.replace(judgement, message=f"{where}: {judgement.message}")
    result = _result(item, judgement, run, tolerance, run_id, began, digest)
    return SteppedScenario(result, judged.step if failing else None)


def _result(item, judgement: Judgement, run, tolerance, run_id, began, digest) -> CaseResult:
    scenario, target = item.scenario, item.target
    return CaseResult(
        result_id=result_id(run_id, item.id),
        run_id=run_id,
        case_id=item.id,
        suite=item.suite.name,
        suite_path=str(item.suite.path),
        model=scenario.model.name,
        shape=scenario.shape.as_dict(),
        layout=item.suite.layouts[0].label,
        layout_order=list(item.suite.layouts[0].order),
        layout_values=item.suite.layouts[0].values_dict(),
        backend=target.id,
        bundle=target.bundle,
        version=target.version,
        capture=MODE,
        verdict=judgement.verdict,
        verdicts=sorted(judgement.verdicts),
        expected=sorted(scenario.expectation.expect),
        outcome=judgement.outcome,
        bug=scenario.expectation.bug,
        reason=scenario.expectation.reason,
        max_abs_error=judgement.max_abs,
        max_rel_error=judgement.max_rel,
        tolerance=asdict(tolerance),
        message=judgement.message,
        finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        wall_ms=(time.perf_counter() - began) * 1000,
        attribution=judgement.attribution,
        stale_from=judgement.stale_from,
        suite_line=scenario.line,
        model_digest=digest,
        trace={"steps": len(run.steps), **run.details},
    )
