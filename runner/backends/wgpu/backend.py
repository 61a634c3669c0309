"""``WgpuBackend``: runs cases as WGSL compute kernels on the adapter wgpu finds.

A device of its own for each layout-change sequence (and each scenario), with its sessions
(prepared models), pipelines, bind groups and captures: the cases of a sequence share them, so a
stale binding between its layouts stays observable, and nothing an earlier sequence left
reaches a later one (a result does not depend on which suites ran before it, and an explored
example's verdict is its own). See ``executor`` for how eager and capture runs differ, and
``faults`` for the bugs a case can inject.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import wgpu
import wgpu.backends.wgpu_native

from runner.backends.base import (
    BackendOptions,
    BackendRun,
    CaseWork,
    ScenarioWork,
    Timings,
    Trace,
    Work,
    case_timeout,
    ran_on,
)
from runner.backends.wgpu.device import Device, adapter_environment, digest
from runner.backends.wgpu.executor import Capture, Session
from runner.backends.wgpu.faults import CAPTURE_FALLS_BACK_TO_EAGER, Faults
from runner.backends.wgpu.kvcache import DeviceKvCache
from runner.backends.wgpu.prepare import prepare
from runner.backends.wgpu.scenario import run_scenario
from runner.backends.wgpu.tensors import DeviceTypeError, UnsupportedOp
from runner.backends.wgpu.trace import case_trace, logged_errors
from runner.errors import EnvironmentUnusable
from runner.scenario.values import ScenarioRun
from runner.schedule import BASE, Variant
from runner.workload import Workload


class WgpuBackend:
    name = "wgpu"

    def __init__(self, options: BackendOptions):
        self.options = options
        self._opened: Device | None = None  # the open sequence's or scenario's
        self._preference: str | None = None  # the adapter it was opened for
        probe = Device.open(options.adapter)  # fail now, not per case, if there is no adapter
        self._adapter_info = adapter_environment(probe.adapter)
        probe.device.destroy()

    def _device(self, preference: str | None, fresh: bool) -> Device:
        """The open device, opened afresh for a new sequence or scenario (`fresh`), where none
        is open, or for another adapter preference."""
        if fresh or self._opened is None or preference != self._preference:
            self.close()
            self._preference, self._opened = preference, Device.open(preference)
        return self._opened

    def environment(self) -> dict[str, Any]:
        return {
            "wgpu": wgpu.__version__,
            "wgpu_native": wgpu.backends.wgpu_native.__version__,
            "adapter": self._adapter_info,
            "faults": sorted(Faults.of(self.options.inject).names),
        }

    def run(self, work: Work) -> BackendRun | ScenarioRun:
        if isinstance(work, ScenarioWork):
            run = self._scenario(work)
        else:
            run = self._case(work)
        if self._opened is None:  # it never reached a device
            return run
        info = self._opened.adapter.info
        if isinstance(work, CaseWork) and work.closes_sequence:
            self.close()
        return ran_on(run, f"{info['device']} ({info['backend_type']}, {info['description']})")

    def _case(self, work: CaseWork) -> BackendRun:
        with logged_errors() as errors:
            try:
                return self._run(work, errors)
            except UnsupportedOp as error:
                details = {"op": error.op_type, "node": error.node}
                return BackendRun("unsupported-op", message=str(error), details=details)
            except DeviceTypeError as error:  # an input type the device cannot hold
                return BackendRun("unsupported-op", message=str(error))
            except EnvironmentUnusable as error:  # the case asks for an adapter not here
                return BackendRun("skipped", message=str(error))
            except Exception as error:
                trace = Trace(errors=tuple(errors))
                return BackendRun("error", message=f"{type(error).__name__}: {error}", trace=trace)

    def _scenario(self, plan: ScenarioWork) -> ScenarioRun:
        """A scenario's steps on the device (``scenario``); never raises for its own failure."""
        device = self._device(self.options.adapter or plan.target.adapter, fresh=True)
        with logged_errors():
            return run_scenario(device, plan, Faults.of(plan.inject, self.options.inject))

    def close(self) -> None:
        if self._opened is not None:
            self._opened.device.destroy()
        self._opened = None

    def _session(
        self, device: Device, workload: Workload, faults: Faults, variant: Variant = BASE
    ) -> tuple[Session, bool]:
        """The session for `variant`'s shape (a decoder's prefill has one of its own), and
        whether this call created it."""
        inputs, dims = workload.inputs_of(variant), workload.shape_of(variant)
        shapes = sorted((k, v.shape, str(v.dtype)) for k, v in inputs.items())
        model = hashlib.sha256(workload.model).hexdigest()
        order, outputs = workload.uniform_order, workload.output_names
        key = digest(model, shapes, sorted(dims.items()), order, outputs, faults.in_kernels)
        if key in device.sessions:
            return device.sessions[key], False
        plan = prepare(workload.model, inputs, order, outputs, dims, faults.compose)
        session = Session(device, plan, len(device.sessions) + 1)
        device.sessions[key] = session
        return session, True

    def _run(self, work: CaseWork, errors: list[str]) -> BackendRun:
        case, workload = work.case, work.workload
        device = self._device(self.options.adapter or case.backend.adapter, work.opens_sequence)
        start = device.counters.snapshot()
        began = time.perf_counter()
        faults = Faults.of(case.inject, self.options.inject)  # the pipeline merges them too
        session, created = self._session(device, workload, faults)
        session_ms = (time.perf_counter() - began) * 1e3
        deadline = began + case_timeout(case, self.options)
        # dynamic runs as eager: prepare pins every dim, wgpu has no dynamic-shape path
        use_capture = case.capture and CAPTURE_FALLS_BACK_TO_EAGER not in faults
        captures: dict[int, tuple[Capture, bool]] = {}  # graph -> (capture, recorded here)
        feeds, seen = workload.feeds(self.options.runs), set()
        cache = DeviceKvCache(workload, session)
        runs, times, replayed = [], [], [0, 0, 0]
        for index, feed in enumerate(feeds):
            inputs = cache.inputs_to_write(feed)
            before = device.counters.snapshot()
            began_run = time.perf_counter()
            if feed.prefill:
                prefill = self._session(device, workload, faults, feed.variant)[0]
                outputs, _ = prefill.run_eager(inputs)
                cache.prefilled(feed, prefill)
                runs.append(outputs)  # not a step: its time is in no step's timing
                continue
            records = feed.graph not in seen
            seen.add(feed.graph)
            if use_capture:
                if records:
                    recording_inputs = workload.inputs_of(feed.variant)
                    captures[feed.graph] = session.capture(faults, feed.graph, recording_inputs)
                capture = captures[feed.graph][0]
                outputs, dispatches = session.replay(capture, inputs, index, case.buffers)
            else:
                outputs, dispatches = session.run_eager(inputs, feed.graph)
            cache.stepped(feed)
            times.append((time.perf_counter() - began_run) * 1e3)
            runs.append(outputs)
            if not records:  # a graph's first run records; the rest replay
                after = device.counters.snapshot()
                replayed = [r + a - b for r, a, b in zip(replayed, after, before, strict=True)]
            if time.perf_counter() > deadline:
                break
        timed_out = len(runs) < len(feeds)
        timings = Timings.of_runs(session_ms, times)
        details: dict[str, Any] = {
            "adapter": device.adapter.info["device"],
            "session": session.number,
            "session_created": created,
            "dispatches": len(session.plan.steps),
        }
        if use_capture:
            capture, recorded = captures[0]
            details["capture"] = {"key": capture.key, "recorded": recorded}
        if case.graphs > 1:
            details["graphs"] = case.graphs
        if case.dynamic:
            details["dynamic"] = "run as eager: wgpu pins every dim (no dynamic-shape path)"
        if faults.names:
            details["faults"] = sorted(faults.names)
        return BackendRun(
            status="timeout" if timed_out else "ok",
            runs=tuple(runs),
            message=f"stopped after {len(runs)} runs: over the time limit" if timed_out else "",
            timings=timings,
            trace=case_trace(dispatches, start, device.counters.snapshot(), replayed, errors),
            details=details,
        )
