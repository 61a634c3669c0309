"""A scenario's steps on one device: sessions of one prepared plan, each with buffers of its own.

A capture session records a graph on its first run of that graph and replays it after;
``release-graph`` drops the recording (the next run records again), ``release`` the session
(``create`` or its next run makes a new one, on new buffers). Outputs are read back to the host
as they are made, so ``hold`` and ``dispose`` have nothing to keep alive here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from runner.backends.base import ScenarioWork
from runner.backends.wgpu.device import Device
from runner.backends.wgpu.executor import Capture, Session
from runner.backends.wgpu.faults import CAPTURE_FALLS_BACK_TO_EAGER, Faults
from runner.backends.wgpu.prepare import prepare
from runner.backends.wgpu.tensors import DeviceTypeError, UnsupportedOp
from runner.scenario.values import (
    CREATE,
    RELEASE,
    RELEASE_GRAPH,
    RUN,
    ScenarioRun,
    ScenarioStep,
    StepRun,
)
from runner.schedule import Feed
from runner.suite.scenarios import ScenarioSession
from runner.suite.spec import BufferModes
from runner.workload import Workload


def run_scenario(device: Device, plan: ScenarioWork, faults: Faults) -> ScenarioRun:
    scenario = plan.scenario
    sessions = {s.name: s for s in scenario.sessions}
    return run_steps(
        device, plan.workload, sessions, scenario.steps, plan.feeds, faults, plan.timeout
    )


def run_steps(
    device: Device,
    workload: Workload,
    specs: Mapping[str, ScenarioSession],
    scenario_steps: Sequence[ScenarioStep],
    feeds: Sequence[Feed | None],
    faults: Faults,
    timeout_s: float,
) -> ScenarioRun:
    """The steps, as the suite runs them and a repro bundle's ``repro.py`` replays them."""
    deadline = time.perf_counter() + timeout_s
    steps: list[StepRun] = []
    try:
        prepared = prepare(
            workload.model,
            workload.inputs,
            workload.uniform_order,
            workload.output_names,
            workload.shape,
            faults.compose,
        )
        sessions: dict[str, Session] = {}
        captures: dict[str, dict[int, Capture]] = {}
        for index, step in enumerate(scenario_steps):
            if step.action == CREATE or step.action == RUN and step.session not in sessions:
                sessions[step.session] = Session(device, prepared, 1000 + index)
                captures[step.session] = {}
            if step.action == RUN:
                held = sessions[step.session], captures[step.session], specs[step.session]
                steps.append(_run(*held, step, feeds[index], workload, index, faults))
            else:
                if step.action == RELEASE_GRAPH:
                    dropped = captures[step.session].pop(step.graph, None)
                    if dropped is not None:
                        device.captures.pop(dropped.key, None)
                elif step.action == RELEASE:
                    sessions.pop(step.session)
                    for dropped in captures.pop(step.session).values():
                        device.captures.pop(dropped.key, None)
                steps.append(StepRun())
            if time.perf_counter() > deadline:
                return ScenarioRun(
                    "timeout", f"over the time limit after step {index + 1}", tuple(steps)
                )
    except (UnsupportedOp, DeviceTypeError) as error:
        return ScenarioRun("unsupported-op", str(error), tuple(steps))
    except Exception as error:  # the step's own failure: the scenario's result names it
        return ScenarioRun("error", f"{type(error).__name__}: {error}", tuple(steps))
    details = {"faults": sorted(faults.names)} if faults.names else {}
    return ScenarioRun("ok", "", tuple(steps), details)


def _run(
    session: Session,
    captures: dict[int, Capture],
    spec: ScenarioSession,
    step: ScenarioStep,
    feed: Feed,
    workload: Workload,
    index: int,
    faults: Faults,
) -> StepRun:
    inputs = workload.inputs_of(feed.variant)
    before = session.device.counters.snapshot()
    records = False
    if spec.capture and CAPTURE_FALLS_BACK_TO_EAGER not in faults:
        records = feed.graph not in captures
        if records:
            captures[feed.graph] = session.capture(faults, feed.graph, inputs)[0]
        modes = BufferModes("fresh" if step.inputs == "fresh" else "rewrite", spec.outputs)
        outputs, _ = session.replay(captures[feed.graph], inputs, index, modes)
    else:
        outputs, _ = session.run_eager(inputs)
    after = session.device.counters.snapshot()
    return StepRun(outputs, after[0] - before[0], after[1] - before[1], records)
