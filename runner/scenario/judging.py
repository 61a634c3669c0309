"""A scenario's runs as the judge's ``Evidence``: one session's runs since it was created.

Each run step is judged with the runs of its session before it (in that session's life), so
``stale-input`` can name the earlier run whose output came back, ``wrong-graph`` the graph, and
``nondeterministic`` compare ``inputs: same`` runs; capture runs are judged against onnxruntime
CPU for their own inputs (there is no eager twin in a scenario). The first step whose evidence
does not pass is the scenario's failing step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runner.backends.sequence import ScenarioRun, StepRun
from runner.judge import Evidence, Judgement, judge
from runner.measure import Outputs, Tolerance
from runner.schedule import Feed, Variant
from runner.suite.scenarios import CREATE, RELEASE, RELEASE_GRAPH, RUN, Scenario


@dataclass(frozen=True)
class SessionCase:
    """A scenario session, as the judge reads a case (``JudgedCase``)."""

    capture: bool
    graphs: int
    tolerance: Tolerance
    expect: frozenset[str]
    dynamic: bool = False
    revisit: bool = False

    @property
    def mode(self) -> str:
        return "capture" if self.capture else "eager"


@dataclass(frozen=True)
class SessionTrace:
    """What the session's replays asked of WebGPU (``JudgedTrace``)."""

    replay_bind_groups_created: int = 0
    replay_uniform_writes: int = 0
    replay_reruns: int = 0
    unrecorded_graphs: tuple[int, ...] = ()


@dataclass(frozen=True)
class SessionRuns:
    """The session's runs so far (``JudgedRun``)."""

    status: str
    message: str
    runs: tuple[Outputs, ...]
    trace: SessionTrace


@dataclass(frozen=True)
class StepJudgement:
    step: int  # index into the scenario's steps
    judgement: Judgement


def judge_steps(
    scenario: Scenario,
    run: ScenarioRun,
    feeds: Sequence[Feed | None],
    references: Mapping[Variant, Outputs],
    tolerance: Tolerance,
) -> StepJudgement:
    """The first step that does not pass, judged; else the last run step's (a pass). A step
    the backend failed is judged on the backend's status and message."""
    life: dict[str, list[int]] = {}  # session -> its run steps since it was created
    last = None
    for index, step in enumerate(scenario.steps):
        if step.action in (CREATE, RELEASE):
            life[step.session] = []
        if index >= len(run.steps):
            failed = SessionRuns(run.status, run.message, (), SessionTrace())
            return StepJudgement(
                index, judge(_evidence(scenario, step.session, failed, (), {}, tolerance))
            )
        if step.action == RELEASE_GRAPH:  # its next run records again
            life[step.session] = [
                i for i in life.get(step.session, []) if feeds[i].graph != step.graph
            ]
        if step.action != RUN:
            continue
        runs = life.setdefault(step.session, [])
        runs.append(index)
        judged = _session_runs(
            scenario, step.session, [run.steps[i] for i in runs], [feeds[i] for i in runs]
        )
        last = judge(
            _evidence(
                scenario, step.session, judged, tuple(feeds[i] for i in runs), references, tolerance
            )
        )
        if last.verdicts != {"pass"}:
            return StepJudgement(index, last)
    return StepJudgement(len(run.steps) - 1, last)


def _session_runs(scenario, session: str, steps: list[StepRun], feeds: list[Feed]) -> SessionRuns:
    """A session's runs and its replays' trace: each graph's first run records, unless it
    recorded nothing (a build that ignores graph ids)."""
    capture = scenario.session(session).capture
    firsts = {}
    for i, feed in enumerate(feeds):
        firsts.setdefault(feed.graph, i)
    replays = [s for i, s in enumerate(steps) if i not in firsts.values()]
    unrecorded = ()
    if capture and any(steps[i].records for i in firsts.values()):
        unrecorded = tuple(g for g, i in firsts.items() if not steps[i].records)
    trace = SessionTrace(
        sum(s.bind_groups_created for s in replays) if capture else 0,
        sum(s.uniform_writes for s in replays) if capture else 0,
        unrecorded_graphs=unrecorded,
    )
    return SessionRuns("ok", "", tuple(s.outputs for s in steps), trace)


def _evidence(scenario, session, runs, feeds, references, tolerance) -> Evidence:
    case = SessionCase(
        scenario.session(session).capture,
        scenario.graphs(session),
        tolerance,
        scenario.expectation.expect,
    )
    return Evidence(case, runs, references, feeds=feeds)
