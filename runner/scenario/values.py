"""A scenario's steps and what a backend reports for each: pure values.

The suite loader parses steps into them (``runner.suite.scenarios``), backends report
`ScenarioRun`s, and ``runner.scenario.judging`` reads both; a repro bundle's page builds them
from its files under Pyodide, so this module imports only the standard library and
``runner.measure`` (tests/test_architecture.py: ``PAGE_MODULES``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.measure import Outputs

RUN, DISPOSE, RELEASE_GRAPH, RELEASE, CREATE = (
    "run",
    "dispose",
    "release-graph",
    "release",
    "create",
)
ACTIONS = (RUN, DISPOSE, RELEASE_GRAPH, RELEASE, CREATE)


@dataclass(frozen=True)
class ScenarioStep:
    action: str  # one of ACTIONS
    session: str
    graph: int = 0
    inputs: str = "rewrite"  # run: rewrite | fresh | same
    hold: bool = False  # run: keep its outputs alive
    line: int | None = None  # where the step is written

    def describe(self) -> str:
        """The step as YAML says it, in one line."""
        extra = [f"graph: {self.graph}"] if self.graph and self.action != CREATE else []
        if self.action == RUN:
            extra += [f"inputs: {self.inputs}"] * (self.inputs != "rewrite")
            extra += ["hold: true"] * self.hold
        return ", ".join([f"{self.action}: {self.session}", *extra])


def session_graphs(steps: Sequence[ScenarioStep], session: str) -> int:
    """How many graph ids a session's steps name."""
    return 1 + max((s.graph for s in steps if s.session == session), default=0)


@dataclass(frozen=True)
class StepRun:
    """One finished step: a run's outputs and what it asked of WebGPU; {} for other steps."""

    outputs: Outputs = field(default_factory=dict)
    bind_groups_created: int = 0
    uniform_writes: int = 0
    records: bool = False  # a capture run that recorded its graph (the rest replay)
    reruns: int = 0  # 1 for a replay the backend's log shows executing the model again

    @classmethod
    def counted(cls, outputs: Outputs, counts: Mapping[str, int]) -> StepRun:
        """A run as a page reports it (``scenario.mjs``), with its WebGPU call counts: it
        recorded its graph if it created bind groups."""
        created = counts.get("createBindGroup", 0)
        return cls(outputs, created, counts.get("uniformWrites", 0), created > 0)


@dataclass(frozen=True)
class ScenarioRun:
    """``steps`` holds every step that finished; with a status other than ok, the next step
    is the one that failed (or, ``skipped``, none ran)."""

    status: str = "ok"  # one of runner.backends.base.RUN_STATUSES
    message: str = ""
    steps: tuple[StepRun, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    adapter: str | None = None  # as BackendRun's: the adapter the backend's process found
