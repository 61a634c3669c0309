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
from collections.abc import Mapping
from dataclasses import dataclass, field

from runner.backends.base import Backend, BackendOptions, BackendRun
from runner.backends.sequence import ScenarioPlan
from runner.casestep import Oracle
from runner.compare import NUMPY
from runner.history import CaseResult
from runner.history.record import result_id
from runner.matrix import Case
from runner.measure import Outputs, Tolerance
from runner.scenario.feeds import scenario_feeds
from runner.scenario.judging import ScenarioJudged, judge_steps
from runner.scenario.values import ScenarioRun
from runner.schedule import Feed, Variant
from runner.suite.scenarios import Scenario
from runner.suite.spec import BackendTarget, Suite
from runner.workload import Workload, materialize

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
    """A scenario's stored result, and which of its steps failed (``explore`` shrinks on it);
    what it ran, for a repro bundle to hold."""

    result: CaseResult
    failing_step: int | None  # index into the scenario's steps; None: it passed or was skipped
    feeds: tuple[Feed | None, ...]  # per step: a run's graph and inputs
    workload: Workload | None = None  # None: the model or its inputs could not be built
    references: Mapping[Variant, Outputs] = field(default_factory=dict)  # onnxruntime CPU's


def step_scenario(
    item: ScenarioTarget, backend: Backend, oracle: Oracle, options: BackendOptions, run_id: str
) -> SteppedScenario:
    """`item` run on `backend` and judged; never raises for the scenario's own failure."""
    began = time.perf_counter()
    scenario, suite = item.scenario, item.suite
    tolerance = scenario.tolerance or suite.tolerance
    feeds = scenario_feeds(scenario)
    case = Case(
        suite,
        scenario.model,
        scenario.shape,
        suite.layouts[0],
        item.target,
        True,
        tolerance,
        scenario.expectation,
        inject=options.inject,
    )
    references, run, workload = {}, ScenarioRun(), None
    try:
        workload = materialize(case, schedule=tuple(f for f in feeds if f is not None))
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
    judged = judge_steps(judged_scenario(scenario, tolerance), run, feeds, references, NUMPY)
    result = CaseResult.of(  # a case's record, but for its id, mode, line and trace
        run_id,
        case,
        BackendRun(run.status, message=run.message),
        judged.judgement,
        wall_ms=(time.perf_counter() - began) * 1000,
        model_digest=workload.model_digest if workload else None,
    )
    result = dataclasses.replace(
        result,
        result_id=result_id(run_id, item.id),
        case_id=item.id,
        capture=MODE,
        suite_line=scenario.line,
        trace={"steps": len(run.steps), **run.details},
    )
    failing = judged.step if judged.failing else None
    return SteppedScenario(result, failing, feeds, workload, references)


def judged_scenario(scenario: Scenario, tolerance: Tolerance) -> ScenarioJudged:
    """What the judge reads of `scenario`."""
    return ScenarioJudged(
        scenario.steps,
        {s.name: s.capture for s in scenario.sessions},
        scenario.expectation.expect,
        tolerance,
    )
