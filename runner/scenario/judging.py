"""A scenario's runs as the judge's ``Evidence``: one session's runs since it was created.

Each run step is judged with the runs of its session before it (in that session's life), so
``stale-input`` can name the earlier run whose output came back, ``wrong-graph`` the graph, and
``nondeterministic`` compare ``inputs: same`` runs; capture runs are judged against onnxruntime
CPU for their own inputs (there is no eager twin in a scenario). The first step whose evidence
does not pass is the scenario's failing step.

A repro bundle of a scenario judges here too (``runner.scenario.bundled``): on its page, under
Pyodide, so this module imports only what the judge does and ``runner.scenario.values``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.judge import CaseFacts, Evidence, Judgement, ReplayCounts, RunFacts, judge
from runner.measure import Measure, Outputs, Tolerance
from runner.scenario.values import (
    CREATE,
    RELEASE,
    RELEASE_GRAPH,
    RUN,
    ScenarioRun,
    ScenarioStep,
    StepRun,
    session_graphs,
)
from runner.schedule import Feed, Variant


@dataclass(frozen=True)
class ScenarioJudged:
    """What the judge reads of a scenario: its steps, which sessions capture, what it expects."""

    steps: tuple[ScenarioStep, ...]
    capture: Mapping[str, bool]  # session -> whether it captures
    expect: frozenset[str]
    tolerance: Tolerance

    def to_json(self) -> dict[str, Any]:
        """Its steps, sessions and expectation as a repro bundle's ``repro.json`` holds them."""
        return {
            "steps": [dataclasses.asdict(step) for step in self.steps],
            "capture": dict(self.capture),
            "expect": sorted(self.expect),
        }

    @classmethod
    def of(cls, data: Mapping[str, Any], tolerance: Tolerance) -> ScenarioJudged:
        steps = tuple(ScenarioStep(**step) for step in data["steps"])
        return cls(steps, data["capture"], frozenset(data["expect"]), tolerance)


@dataclass(frozen=True)
class StepJudgement:
    step: int  # index into the scenario's steps
    # its message starts with the step (``step N (run: a, line L): ...``) when it failed
    judgement: Judgement
    failing: bool  # it did not pass (and the backend did not skip the scenario)


def judge_steps(
    scenario: ScenarioJudged,
    run: ScenarioRun,
    feeds: Sequence[Feed | None],
    references: Mapping[Variant, Outputs],
    measure: Measure,
) -> StepJudgement:
    """The first step that does not pass, judged; else the last run step's (a pass). A step
    the backend failed is judged on the backend's status and message; a failure after every
    step finished (the backend's clean-up: its message says so) is the last step's."""
    index, judgement = _first_failing(scenario, run, feeds, references, measure)
    if judgement.verdicts == {"pass"} or run.status == "skipped":
        return StepJudgement(index, judgement, False)
    step = scenario.steps[index]
    line = f", line {step.line}" if step.line is not None else ""  # drawn steps have none
    where = f"step {index + 1} ({step.describe()}{line})"
    return StepJudgement(
        index, dataclasses.replace(judgement, message=f"{where}: {judgement.message}"), True
    )


def _first_failing(scenario, run, feeds, references, measure) -> tuple[int, Judgement]:
    life: dict[str, list[int]] = {}  # session -> its run steps since it was created
    last = None
    for index, step in enumerate(scenario.steps):
        if step.action in (CREATE, RELEASE):
            life[step.session] = []
        if index >= len(run.steps):
            failed = RunFacts(run.status, run.message)
            return index, judge(_evidence(scenario, step.session, failed, (), {}, measure))
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
        session_feeds = tuple(feeds[i] for i in runs)
        last = judge(_evidence(scenario, step.session, judged, session_feeds, references, measure))
        if last.verdicts != {"pass"}:
            return index, last
    if run.status != "ok":  # every step finished, then the backend's clean-up failed: the last's
        failed = RunFacts(run.status, run.message)
        return index, judge(_evidence(scenario, step.session, failed, (), {}, measure))
    return len(run.steps) - 1, last


def _session_runs(
    scenario: ScenarioJudged, session: str, steps: list[StepRun], feeds: list[Feed]
) -> RunFacts:
    """A session's runs and its replays' trace: each graph's first run records, unless it
    recorded nothing (a build that ignores graph ids)."""
    capture = scenario.capture[session]
    firsts = {}
    for i, feed in enumerate(feeds):
        firsts.setdefault(feed.graph, i)
    replays = [s for i, s in enumerate(steps) if i not in firsts.values()]
    unrecorded = ()
    if capture and any(steps[i].records for i in firsts.values()):
        unrecorded = tuple(g for g, i in firsts.items() if not steps[i].records)
    trace = ReplayCounts(
        sum(s.bind_groups_created for s in replays) if capture else 0,
        sum(s.uniform_writes for s in replays) if capture else 0,
        sum(s.reruns for s in replays) if capture else 0,
        unrecorded_graphs=unrecorded,
    )
    return RunFacts("ok", "", tuple(s.outputs for s in steps), trace)


def _evidence(scenario: ScenarioJudged, session, runs, feeds, references, measure) -> Evidence:
    case = CaseFacts(
        scenario.capture[session],
        session_graphs(scenario.steps, session),
        scenario.tolerance,
        scenario.expect,
    )
    return Evidence(case, runs, references, feeds=feeds, measure=measure)
