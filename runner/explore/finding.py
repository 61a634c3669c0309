"""A failing scenario explore keeps: how failures are told apart, and the suite file it writes.

Two failures are the same bug while exploring when they share the verdict, the failing step's
action and, for a backend's own failure, its message, for a capture-mismatch its buffer modes
(``Failure.kind``), so Hypothesis shrinks each kind apart; two findings are the same when they
share the verdict and the minimal scenario's ``signature`` (sessions named by first use).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from platform import platform
from typing import Any

import yaml

from runner.errors import InvalidInput
from runner.explore.space import ExploredModel
from runner.history import CaseResult
from runner.matrix import ScenarioTarget
from runner.repro import bundle
from runner.repro.command import repro_descriptor
from runner.repro.scenario import write_scenario_bundle
from runner.scenario.values import RUN
from runner.step import Stepped
from runner.suite.scenarios import Scenario, scenario_entry
from runner.suite.spec import BackendTarget

FailureKind = tuple[str, str, str]
# Verdicts told apart by the backend's message: an error is the same bug only with the same text.
BACKEND_FAILURES = frozenset({"error", "capture-unsupported", "unsupported-op", "timeout"})
UNATTRIBUTED = "capture-mismatch"  # wrong, and like no other run's reference: told apart by buffers


@dataclass(frozen=True)
class BackendMachine:
    """What a finding's reason says the backend ran on (its environment)."""

    version: str
    adapter: str
    environment: Mapping[str, Any]  # the backend's, as run.json records it


@dataclass(frozen=True)
class Failure:
    """A scenario that did not pass, with its result and the step that failed."""

    explored: ExploredModel
    scenario: Scenario
    stepped: Stepped  # its judgement, failing step, workload and references

    @property
    def result(self) -> CaseResult:
        return self.stepped.result("explore")

    @property
    def failing_step(self) -> int:
        return self.stepped.failing_step

    @property
    def kind(self) -> FailureKind:
        """Verdict and failing action; for a backend's own failure (an error, a refusal) also
        its text, numbers left out; for a run's output that matches nothing
        (``capture-mismatch``), its inputs and its session's outputs: a new input buffer and a
        new output buffer per run are two bugs alike in that verdict."""
        verdict = self.result.verdict
        step = self.scenario.steps[self.failing_step]
        text = ""
        if verdict in BACKEND_FAILURES:
            text = re.sub(r"\d+", "N", self.result.message.partition("): ")[2])
        elif verdict == UNATTRIBUTED and step.action == RUN:
            text = f"inputs {step.inputs}, outputs {self.scenario.session(step.session).outputs}"
        return verdict, step.action, text

    @property
    def size(self) -> int:
        return len(self.scenario.steps)

    @property
    def cause(self) -> None:
        """None: a scenario is not localized; its kind tells it apart (``runner.cause``)."""
        return None

    @property
    def unit(self) -> str:
        return "steps"

    @property
    def signature(self) -> tuple:
        """What dedup compares: the verdict and the steps (``signature``)."""
        return self.result.verdict, signature(self.scenario)


@dataclass(frozen=True)
class Found:
    """A minimal failing example (a scenario's ``Failure``, a drawn model's
    ``runner.explore.cases.ModelFailure``), where it was written and what was tried before it."""

    failure: Any
    path: Path
    examples_before: int  # examples run in this explore before its first failure was seen
    seconds_to_first: float
    # Its pass ended with the budget's grace or its kinds' share of the budget
    # (``Kinds.shrinking_spent``), before Hypothesis had finished shrinking what the pass found
    # (it or another kind): it may shrink further, replayed from the example database by
    # another explore over the same cache folder.
    shrinking_cut: bool = False

    @property
    def size(self) -> str:
        """How big it is: ``3 steps``, ``1 node``."""
        return sized(self.failure.size, self.failure.unit)


def sized(size: int, unit: str) -> str:
    """``3 steps``, ``1 node``: `unit` is plural."""
    return f"{size} {unit.removesuffix('s') if size == 1 else unit}"


def signature(scenario: Scenario) -> tuple:
    """The steps and session kinds with sessions renamed by first use: what dedup compares."""
    names: dict[str, str] = {}
    for step in scenario.steps:
        names.setdefault(step.session, f"s{len(names) + 1}")
    sessions = tuple(
        sorted((names[s.name], s.capture, s.outputs, s.location) for s in scenario.sessions)
    )
    steps = tuple((s.action, names[s.session], s.graph, s.inputs, s.hold) for s in scenario.steps)
    return sessions, steps


def found_by(target: BackendTarget, machine: BackendMachine, injected: frozenset[str]) -> str:
    """What a finding's reason says first: where explore found it."""
    faults = f"; injected faults: {', '.join(sorted(injected))}" if injected else ""
    return (
        f"found by explore on {target.id} (version {machine.version}, adapter "
        f"{machine.adapter}){faults}"
    )


def finding_header(
    path: Path, injected: frozenset[str], seed: int | None, models: str = "suites"
) -> str:
    """A finding's suite file's first lines: its schema, and how to reproduce it."""
    inject = "".join(f" --inject {f}" for f in sorted(injected))
    drawn = " --models generated" if models == "generated" else ""
    return (
        "# yaml-language-server: $schema=../schemas/suite.schema.json\n"
        f"# Found by `python -m runner explore{drawn}"
        f"{f' --seed {seed}' if seed is not None else ''}`; "
        f"reproduce it with:\n#   python -m runner run {path}{inject}\n"
    )


def write_finding(
    failure: Failure, out: Path, machine: BackendMachine, injected: frozenset[str], seed: int | None
) -> Path:
    """``out/<verdict>-<hash>.yaml``: a suite holding the scenario, expecting what it saw."""
    verdict, target = failure.result.verdict, failure.scenario.backends[0]
    digest = hashlib.sha256(repr((verdict, signature(failure.scenario))).encode()).hexdigest()
    name = f"{verdict}-{digest[:10]}"
    path = out / f"{name}.yaml"
    model = failure.explored.model
    reason = f"{found_by(target, machine, injected)}: {failure.result.message}"
    scenario = {**scenario_entry(failure.scenario, name), "expect": verdict, "reason": reason}
    suite = {
        "name": f"found-{name}",
        "models": {model.name: _model_entry(failure.explored, out)},
        **({"shapes": [failure.explored.shape.as_dict()]} if failure.explored.shape.dims else {}),
        "backends": [target.entry()],
        "exclude": [{"model": model.name}],  # the scenario alone
        "scenarios": [scenario],
    }
    header = finding_header(path, injected, seed)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(suite, sort_keys=False, width=100))
    _write_bundle(failure, out / name, path, machine, injected, seed)
    return path


def _write_bundle(
    failure: Failure,
    folder: Path,
    path: Path,
    machine: BackendMachine,
    injected: frozenset[str],
    seed: int | None,
) -> None:
    """The finding's repro bundle, beside its YAML, from the run that found it (none where its
    backend writes none)."""
    if repro_descriptor(failure.result) is None:
        return
    target = failure.scenario.backends[0]
    item = ScenarioTarget(failure.explored.suite, failure.scenario, target)
    bundle.clear_previous(folder)  # a finding written again replaces its bundle
    write = functools.partial(
        write_scenario_bundle,
        folder,
        item,
        dataclasses.replace(failure.result, suite_path=str(path)),
        failure.stepped,
        injected,
        environment={"backends": {target.name: machine.environment}, "platform": platform()},
        command=f"python -m runner explore{f' --seed {seed}' if seed is not None else ''}",
    )
    try:
        write(local=False)
    except InvalidInput:  # a local build, with no published URL: the bundle holds its files
        write(local=True)


def _model_entry(explored: ExploredModel, out: Path) -> dict[str, Any]:
    """The model's entry as its source gave it, its file's path made relative to `out`."""
    entry = dict(explored.entry)
    if "path" in entry:
        entry["path"] = os.path.relpath(entry["path"], out.resolve())
    return entry
