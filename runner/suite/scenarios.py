"""A suite's ``scenarios:``: named sessions of one model and a list of steps over them.

A scenario is data (sessions, then steps), so that a generator can build one as well as a YAML
file: ``parse_scenarios`` checks what the schema cannot (a session a step names, a step on a
released session, ``inputs: same`` with nothing to repeat) and says where, FILE:LINE.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runner.measure import Tolerance
from runner.scenario.values import (
    ACTIONS,
    CREATE,
    RELEASE,
    RELEASE_GRAPH,
    RUN,
    ScenarioStep,
    session_graphs,
)
from runner.schedule import Feed
from runner.suite.spec import BackendTarget, Expectation, ModelSpec, Shape


@dataclass(frozen=True)
class ScenarioSession:
    name: str
    capture: bool = True
    outputs: str = "none"  # pre-allocated outputs: none | rewrite | fresh (as `buffers:`)
    location: str = "gpu-buffer"  # where outputs the backend allocates stay: gpu-buffer | cpu


@dataclass(frozen=True)
class Scenario:
    name: str
    model: ModelSpec
    shape: Shape
    sessions: tuple[ScenarioSession, ...]
    steps: tuple[ScenarioStep, ...]
    backends: tuple[BackendTarget, ...]  # (): the suite's
    expectation: Expectation = Expectation()
    tolerance: Tolerance | None = None  # None: the suite's
    line: int | None = None

    def session(self, name: str) -> ScenarioSession:
        return next(s for s in self.sessions if s.name == name)

    def graphs(self, session: str) -> int:
        """How many graph ids the session's steps name."""
        return session_graphs(self.steps, session)

    def feeds(self) -> tuple[Feed | None, ...]:
        """Per step, a run's feed (None for other steps). Every run with new inputs (`rewrite`,
        `fresh`) gets a draw of its own, so no two runs share inputs by accident; `same` repeats
        its session's previous run of that graph (the loader checked there is one)."""
        draws = 0
        last: dict[tuple[str, int], Feed] = {}
        feeds: list[Feed | None] = []
        for step in self.steps:
            if step.action == RELEASE:
                last = {k: v for k, v in last.items() if k[0] != step.session}
            if step.action != RUN:
                feeds.append(None)
                continue
            if step.inputs == "same":
                feed = last[step.session, step.graph]
            else:
                feed = Feed(step.graph, (step.graph, draws))
                draws += 1
            last[step.session, step.graph] = feed
            feeds.append(feed)
        return tuple(feeds)

    def session_specs(self) -> dict[str, dict[str, Any]]:
        """Each session as a page takes it (harness.js, and a repro bundle's ``repro.json``)."""
        return {
            s.name: {
                "capture": s.capture,
                "outputs": s.outputs,
                "location": s.location,
                "graphs": self.graphs(s.name),
            }
            for s in self.sessions
        }


# (path in the suite, message, expected): a problem the loader reports at that path's line
Report = Callable[[tuple, str, str], None]


def parse_scenario(
    spec: Mapping,
    path: tuple,
    models: Mapping[str, ModelSpec],
    default_shape: Callable[[ModelSpec], Shape],
    backends: tuple[BackendTarget, ...],
    line: Callable[[tuple], int],
    report: Report,
) -> Scenario | None:
    """A scenario from its (schema-valid) entry at `path`; None after reporting its problems."""
    model = models.get(spec["model"])
    if model is None or model.op_test is not None:
        known = ", ".join(n for n, m in models.items() if m.op_test is None)
        report((*path, "model"), f"unknown model {spec['model']!r}", f"one of {known}")
        return None
    sessions = tuple(
        ScenarioSession(
            name,
            session.get("capture", True),
            session.get("outputs", "none"),
            session.get("location", "gpu-buffer" if session.get("capture", True) else "cpu"),
        )
        for name, session in spec["sessions"].items()
    )
    for session in sessions:
        if not session.capture and session.outputs != "none":
            report(
                (*path, "sessions", session.name, "outputs"),
                f"session {session.name!r} pre-allocates outputs without capture",
                "outputs: none, or capture: true",
            )
    steps = tuple(_step(entry, line((*path, "steps", i))) for i, entry in enumerate(spec["steps"]))
    capturing = {s.name: s.capture for s in sessions}
    if _check_steps(steps, capturing, (*path, "steps"), report):
        shape = Shape(tuple(spec["shape"].items())) if "shape" in spec else default_shape(model)
        expect = spec.get("expect", "pass")
        return Scenario(
            spec["name"],
            model,
            shape,
            sessions,
            steps,
            backends,
            Expectation(
                frozenset([expect] if isinstance(expect, str) else expect),
                spec.get("bug"),
                spec.get("reason"),
            ),
            Tolerance(**spec["tolerance"]) if "tolerance" in spec else None,
            line(path),
        )
    return None


def _step(entry: Mapping, line: int) -> ScenarioStep:
    action = next(a for a in ACTIONS if a in entry)
    return ScenarioStep(
        action,
        entry[action],
        entry.get("graph", 0),
        entry.get("inputs", "rewrite"),
        entry.get("hold", False),
        line,
    )


def _check_steps(steps, capturing: Mapping[str, bool], path: tuple, report: Report) -> bool:
    """Whether every step names a session in a state it can act on; reports each that does not."""
    alive: set[str] = set()
    ran: set[tuple[str, int]] = set()  # (session, graph) with a run since its creation
    ok, runs = True, 0
    for i, step in enumerate(steps):

        def refuse(message: str, expected: str, at: tuple = (*path, i, step.action)) -> None:
            nonlocal ok
            ok = False
            report(at, message, expected)

        if step.session not in capturing:
            refuse(f"unknown session {step.session!r}", f"one of {', '.join(sorted(capturing))}")
            continue
        if (step.graph or step.action == RELEASE_GRAPH) and not capturing[step.session]:
            refuse(f"session {step.session!r} captures no graph", "a session with capture: true")
            continue
        if step.action == CREATE:
            if step.session in alive:
                refuse(f"session {step.session!r} exists already", "`release:` before `create:`")
            alive.add(step.session)
            continue
        if step.action == RUN and step.session not in alive:
            if any(s.session == step.session and s.action == RELEASE for s in steps[:i]):
                refuse(f"session {step.session!r} was released", "`create:` before this run")
                continue
            alive.add(step.session)  # a session's first run creates it
        if step.session not in alive:
            refuse(f"session {step.session!r} does not exist here", "a step after its first run")
            continue
        if step.action == RUN:
            runs += 1
            if step.inputs == "same" and (step.session, step.graph) not in ran:
                refuse(
                    f"inputs: same, but session {step.session!r} has not run graph {step.graph}",
                    "an earlier run of this session and graph",
                )
            ran.add((step.session, step.graph))
        elif step.action == RELEASE:
            alive.discard(step.session)
            ran = {r for r in ran if r[0] != step.session}
    if ok and not runs:
        report(path, "no step runs a session", "at least one `run:` step")
        return False
    return ok


def scenario_entry(scenario: Scenario, name: str) -> dict[str, Any]:
    """The scenario as a suite's ``scenarios:`` entry says it (without expectations)."""
    return {
        "name": name,
        "model": scenario.model.name,
        "sessions": {s.name: _session_entry(s) for s in scenario.sessions},
        "steps": [_step_entry(s) for s in scenario.steps],
    }


def _session_entry(session: ScenarioSession) -> dict[str, Any]:
    entry: dict[str, Any] = {} if session.capture else {"capture": False}
    if session.outputs != "none":
        entry["outputs"] = session.outputs
    elif session.location != ("gpu-buffer" if session.capture else "cpu"):
        entry["location"] = session.location
    return entry


def _step_entry(step: ScenarioStep) -> dict[str, Any]:
    entry: dict[str, Any] = {step.action: step.session}
    if step.graph:
        entry["graph"] = step.graph
    if step.action == RUN:
        entry.update({"inputs": step.inputs} if step.inputs != "rewrite" else {})
        entry.update({"hold": True} if step.hold else {})
    return entry
