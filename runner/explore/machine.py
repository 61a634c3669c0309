"""Scenarios drawn by a Hypothesis rule-based state machine, one rule per step of the vocabulary.

Each rule appends one ``ScenarioStep`` under the precondition the suite loader checks (a
run on a live session, ``inputs: same`` after a run of that graph, ``create`` after ``release``,
graph ids on capture sessions only), so every drawn scenario is one a suite could say; the
teardown hands the finished scenario to ``examine``, which runs and judges it and raises when it
fails. Hypothesis shrinks a failing scenario by dropping steps and simplifying their choices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from runner.explore.space import ExploredModel, Space
from runner.scenario.values import CREATE, DISPOSE, RELEASE, RELEASE_GRAPH, RUN, ScenarioStep
from runner.suite.scenarios import Scenario, ScenarioSession

MAX_SESSIONS = 3  # the known triggers need two; a third lets one run in between
GRAPHS = 2  # gpu_graph_id 0 and 1
# What a session can be, simplest first (Hypothesis shrinks towards the first): capture with
# outputs left on the GPU, or pre-allocated (the same or new buffers every run); without
# capture, outputs on the CPU or the GPU. Capture with outputs on the CPU is left out:
# onnxruntime-web refuses it by design ("Only 'gpu-buffer' location is supported when
# enableGraphCapture is true"), and wgpu reads every output to the host anyway.
SESSION_KINDS = (
    ScenarioSession("", True, "none", "gpu-buffer"),
    ScenarioSession("", True, "rewrite"),
    ScenarioSession("", True, "fresh"),
    ScenarioSession("", False, "none", "cpu"),
    ScenarioSession("", False, "none", "gpu-buffer"),
)


Examine = Callable[[ExploredModel, Scenario], None]  # raises when the scenario fails


def machine_factory(space: Space, examine: Examine) -> Callable[[], RuleBasedStateMachine]:
    """What ``run_state_machine_as_test`` calls for each example."""

    def scenario_machine() -> ScenarioMachine:
        return ScenarioMachine(space, examine)

    return scenario_machine


class ScenarioMachine(RuleBasedStateMachine):
    def __init__(self, space: Space, examine: Examine):
        super().__init__()
        self.space, self.examine = space, examine
        self.model: ExploredModel | None = None
        self.sessions: list[ScenarioSession] = []
        self.steps: list[ScenarioStep] = []
        self.alive: list[str] = []
        self.released: list[str] = []
        self.held: list[str] = []
        self.ran: set[tuple[str, int]] = set()  # (session, graph) run since its creation
        self.recorded: set[tuple[str, int]] = set()  # (capture session, graph) recorded

    def _can(self, action: str) -> bool:
        return action in self.space.actions

    def _session(self, name: str) -> ScenarioSession:
        return next(s for s in self.sessions if s.name == name)

    def _pick(self, data, names: Sequence[str]) -> str:
        return data.draw(st.sampled_from(sorted(names)), label="session")

    @initialize(data=st.data())
    def choose_model(self, data):
        self.model = data.draw(self.space.source.strategy(), label="model")

    @precondition(lambda self: len(self.sessions) < MAX_SESSIONS)
    @rule(data=st.data())
    def run_new_session(self, data):
        """A session's first run creates it."""
        kind = data.draw(st.sampled_from(SESSION_KINDS), label="kind")
        name = f"s{len(self.sessions) + 1}"
        self.sessions.append(ScenarioSession(name, kind.capture, kind.outputs, kind.location))
        self.alive.append(name)
        self._run(data, name)

    @precondition(lambda self: self.alive)
    @rule(data=st.data())
    def run(self, data):
        self._run(data, self._pick(data, self.alive))

    def _run(self, data, name: str) -> None:
        capture = self._session(name).capture
        graph = data.draw(st.integers(0, GRAPHS - 1), label="graph") if capture else 0
        choices = ["rewrite", "fresh"] + ["same"] * ((name, graph) in self.ran)
        inputs = data.draw(st.sampled_from(choices), label="inputs")
        hold = data.draw(st.booleans(), label="hold")
        self.steps.append(ScenarioStep(RUN, name, graph, inputs, hold))
        self.ran.add((name, graph))
        if capture:
            self.recorded.add((name, graph))
        if hold and name not in self.held:
            self.held.append(name)

    @precondition(lambda self: self._can(DISPOSE) and self.held)
    @rule(data=st.data())
    def dispose(self, data):
        name = self._pick(data, self.held)
        self.held.remove(name)
        self.steps.append(ScenarioStep(DISPOSE, name))

    @precondition(lambda self: self._can(RELEASE_GRAPH) and self.recorded)
    @rule(data=st.data())
    def release_graph(self, data):
        name, graph = data.draw(st.sampled_from(sorted(self.recorded)), label="graph")
        self.recorded.discard((name, graph))
        self.steps.append(ScenarioStep(RELEASE_GRAPH, name, graph))

    @precondition(lambda self: self._can(RELEASE) and self.alive)
    @rule(data=st.data())
    def release(self, data):
        name = self._pick(data, self.alive)
        self.alive.remove(name)
        self.released.append(name)
        self.held = [h for h in self.held if h != name]
        self.ran = {r for r in self.ran if r[0] != name}
        self.recorded = {r for r in self.recorded if r[0] != name}
        self.steps.append(ScenarioStep(RELEASE, name))

    @precondition(lambda self: self._can(CREATE) and self.released)
    @rule(data=st.data())
    def create(self, data):
        name = self._pick(data, self.released)
        self.released.remove(name)
        self.alive.append(name)
        self.steps.append(ScenarioStep(CREATE, name))

    def scenario(self) -> Scenario:
        drawn = Scenario(
            name="",
            model=self.model.model,
            shape=self.model.shape,
            sessions=tuple(self.sessions),
            steps=tuple(self.steps),
            backends=(self.space.target,),
        )
        return cut_after(drawn, len(self.steps) - 1)

    def teardown(self):
        if any(step.action == RUN for step in self.steps):
            self.examine(self.model, self.scenario())


def cut_after(scenario: Scenario, index: int) -> Scenario:
    """`scenario`'s steps up to `index`, named for their count, with the sessions they use."""
    steps = scenario.steps[: index + 1]
    used = {step.session for step in steps}
    return dataclasses.replace(
        scenario,
        name=f"explored-{len(steps)}-steps",
        sessions=tuple(s for s in scenario.sessions if s.name in used),
        steps=steps,
    )
