"""What a backend gets to run a scenario, and what it reports back (``runner.scenario``).

A backend that runs scenarios has ``run_scenario(plan) -> ScenarioRun``; one that cannot do a
step reports ``skipped`` with the reason, before running anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from runner.schedule import Feed
from runner.suite.scenarios import Scenario
from runner.suite.spec import BackendTarget

if TYPE_CHECKING:
    from runner.workload import Workload


@dataclass(frozen=True)
class ScenarioPlan:
    scenario: Scenario
    target: BackendTarget
    workload: Workload  # the model at the scenario's shape, every run's inputs (its variants)
    feeds: tuple[Feed | None, ...]  # per step: a run's graph and inputs; None for other steps
    inject: frozenset[str] = frozenset()
    timeout_s: float = 120.0


@dataclass(frozen=True)
class StepRun:
    """One finished step: a run's outputs and what it asked of WebGPU; {} for other steps."""

    outputs: Mapping[str, np.ndarray] = field(default_factory=dict)
    bind_groups_created: int = 0
    uniform_writes: int = 0
    records: bool = False  # a capture run that recorded its graph (the rest replay)


@dataclass(frozen=True)
class ScenarioRun:
    """``steps`` holds every step that finished; with a status other than ok, the next step
    is the one that failed (or, ``skipped``, none ran)."""

    status: str = "ok"  # one of base.RUN_STATUSES
    message: str = ""
    steps: tuple[StepRun, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
