"""What a backend gets to run a scenario (``runner.scenario``); it reports a
``runner.scenario.values.ScenarioRun``.

A backend that runs scenarios has ``run_scenario(plan) -> ScenarioRun``; one that cannot do a
step reports ``skipped`` with the reason, before running anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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
