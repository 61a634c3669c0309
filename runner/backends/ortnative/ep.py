"""``EpBackend``: cases on ONNX Runtime's WebGPU EP, in the child process of one version.

Eager runs are what an application without capture does: numpy in, numpy out. Capture runs take
the only path onnxruntime's Python API offers (microsoft/onnxruntime#32074): per graph, WebGPU
OrtValues, written in place before each run, bound once to an IOBinding, run with the run option
``gpu_graph_id`` and read back with ``copy_outputs_to_cpu``. The plugin's session makes the
values and writes them (``update_inplace``); onnxruntime-webgpu's Python API can do neither on
its device, so its values are the outputs of a one-node upload session bound to the device, and
are written with ``copy_tensors`` (``builtin.DeviceValues``). The API refuses what a capture
cannot honour, by design: a new buffer after a graph was captured (``buffers: {inputs: fresh}``
or ``{outputs: fresh}``), and outputs onnxruntime allocates itself, so ``outputs: none`` binds
fixed outputs as ``rewrite`` does. A session onnxruntime made on the CPU EP alone (its answer
when the WebGPU EP fails) is an error, never a pass; the nodes it runs on the CPU beside the
EP are named in the run's details.
A sequence's sessions stay alive until it closes, so a revisit replays an earlier capture.

Every capture run is checked against onnxruntime's log (``replays``): a graph's first run must
record, every later run must replay that graph.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort

from runner.backends.base import (
    BackendOptions,
    BackendRun,
    ScenarioWork,
    Timings,
    Trace,
    Work,
    case_timeout,
    ran_on,
)
from runner.backends.ortnative.builtin import WEBGPU_EP, DeviceValues, one_node, vulkan_driver
from runner.backends.ortnative.faults import (
    CAPTURE_OPTION_DROPPED,
    GRAPHS_SHARE_INPUTS,
    INPUT_SNAPSHOT_AT_CAPTURE,
    SHAPE_ONLY_CAPTURE_CACHE,
)
from runner.backends.ortnative.replays import (
    LOG_SEVERITY_INFO,
    logged_errors,
    ort_log,
    replayed_graphs,
)
from runner.environment import package_version
from runner.errors import EnvironmentUnusable
from runner.matrix import Case
from runner.oracle import compute_reference
from runner.scenario.values import CREATE, RELEASE, RELEASE_GRAPH, RUN, ScenarioRun, StepRun
from runner.schedule import Feed
from runner.suite.spec import BufferModes
from runner.verdicts import CAPTURE_REFUSED, onnxruntime_lacks
from runner.workload import Workload

CPU_EP = "CPUExecutionProvider"
# ONNX Runtime's device discovery, not Dawn, decides: it offers the plugin real GPUs only.
NO_GPU = "no WebGPU EP device: ONNX Runtime found no GPU (lavapipe and SwiftShader do not count)"
# onnxruntime-webgpu takes its options as session config entries (its provider options are
# ignored, even a bogus one)
CAPTURE_ENTRY = "ep.webgpuexecutionprovider.enableGraphCapture"
PREFERRED_LAYOUT_ENTRY = "ep.webgpuexecutionprovider.preferredLayout"
# What onnxruntime logs (at INFO) for a node the WebGPU EP will not take; it then runs the node
# on the CPU without a word more.
_NO_KERNEL = re.compile(r"webgpu kernel not found in registries for Op type: (\S+) node name: (.*)")


class Refused(Exception):
    """onnxruntime's Python API refused a binding, as it does by design under capture."""


@dataclass
class GraphBinding:
    """One captured graph's IOBinding and the values bound to it. ``written`` are the input
    values the application writes each run (``bound`` unless a fault binds others)."""

    io: Any
    written: dict[str, Any]
    outputs: dict[str, Any]
    recorded: bool = False
    # Swapped caches: the two (inputs, outputs) value sets the runs alternate between, each
    # writing its in-place outputs into the values the other reads (none unless swapped).
    sides: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = ()
    turns: int = 0


@dataclass
class NativeSession:
    session: Any
    signature: tuple
    # Nodes onnxruntime runs on the CPU beside the WebGPU EP: outside capture the EP leaves
    # some (int64 Cast and Unsqueeze of shapes and masks) to the CPU by design; a capture
    # session takes every node or is refused (capture-unsupported).
    on_cpu: tuple[str, ...] = ()
    graphs: dict[int, GraphBinding] = field(default_factory=dict)


class RunFailed(Exception):
    """A run failed for another reason than a refusal; `errors` are what onnxruntime logged."""

    def __init__(self, message: str, errors: list[str]):
        super().__init__(message)
        self.errors = errors


class SessionRefused(Exception):
    """onnxruntime would not make the session; `run` is what to report."""

    def __init__(self, run: BackendRun):
        super().__init__(run.message)
        self.run = run


@dataclass(frozen=True)
class OneRun:
    """A run's outputs and what onnxruntime logged of it."""

    outputs: dict[str, np.ndarray]
    records: bool  # the first run of its graph's binding
    replayed: tuple[int, ...]  # the graphs onnxruntime says it replayed
    errors: list[str]

    @property
    def recorded(self) -> bool:
        """The first run of its graph's binding, and onnxruntime replayed nothing for it."""
        return self.records and not self.replayed

    def reran(self, graph: int) -> bool:
        """A capture run after the first that executed the model instead of replaying `graph`."""
        return not self.records and graph not in self.replayed


@dataclass
class Shared:
    """What every run of a case or a scenario shares: its workload, faults, and the sessions a
    fault may borrow a capture from (in creation order)."""

    workload: Workload
    faults: frozenset[str]
    sessions: Callable[[], Iterable[NativeSession]]

    @functools.cached_property
    def output_specs(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Only asked for when a graph binds."""
        return _output_specs(self.workload)


def signature(workload: Workload) -> tuple:
    """Input and output names, shapes and types: what a shape-keyed capture cache would see."""
    shapes = sorted((k, v.shape, str(v.dtype)) for k, v in workload.inputs.items())
    return (tuple(shapes), workload.output_names)


class EpBackend:
    name = "ort-native"

    def __init__(self, options: BackendOptions):
        """``--adapter cpu`` runs the same bindings on onnxruntime's CPU EP, which captures
        nothing (every capture case is then capture-not-engaged): a way to check a suite's
        bindings and faults without a GPU. Any other ``--adapter`` picks the EP device whose
        description holds it (a vendor, a PCI bus id)."""
        self.options = options
        self.provider = CPU_EP if options.on_cpu else WEBGPU_EP
        # onnxruntime-webgpu: the EP built in, on the adapter Dawn takes (lavapipe, where the
        # parent points this process at it); else the plugin, on a device ONNX Runtime found
        self.builtin = not options.on_cpu and WEBGPU_EP in ort.get_available_providers()
        self.values = DeviceValues() if self.builtin else None
        if self.builtin:
            self.device, self.adapter = None, self._probe()
        else:
            if not options.on_cpu:
                import onnxruntime_ep_webgpu  # the plugin, from this version's environment

                library = onnxruntime_ep_webgpu.get_library_path()
                ort.register_execution_provider_library("webgpu", library)
            self.device = self._pick_device(None if options.on_cpu else options.adapter)
            self.adapter = describe(self.device)
        self.memory = "cpu" if options.on_cpu else "webgpu"
        self._sessions: dict[tuple[str, str], NativeSession] = {}  # the open sequence's

    def _probe(self) -> str:
        """The adapter onnxruntime-webgpu runs on, as this process loaded it, after a one-node
        session ran on the EP; EnvironmentUnusable when the EP would not start (onnxruntime
        then falls back to the CPU without raising)."""
        model = one_node("Relu", np.float32, (1,))
        with ort_log() as lines:
            session = ort.InferenceSession(model, providers=[WEBGPU_EP])
        if session.get_providers()[0] != WEBGPU_EP:
            said = [line for line in lines if "Error" in line or "adapter" in line]
            raise EnvironmentUnusable(
                f"onnxruntime-webgpu {ort.__version__}'s WebGPU EP did not start: "
                + (" ".join(said[-2:]) or "no word from onnxruntime")
            )
        session.run(None, {"x": np.ones(1, np.float32)})
        return vulkan_driver()

    def _pick_device(self, preference: str | None):
        devices = [d for d in ort.get_ep_devices() if d.ep_name == self.provider]
        if preference:
            devices = [d for d in devices if preference.lower() in describe(d).lower()]
        if not devices:
            listed = ", ".join(d.ep_name for d in ort.get_ep_devices()) or "none"
            found = f"onnxruntime {ort.__version__} lists EP devices: {listed}"
            if preference:
                raise EnvironmentUnusable(f"no WebGPU EP device matching {preference!r} ({found})")
            raise EnvironmentUnusable(f"{NO_GPU} ({found})")
        return devices[0]

    def environment(self) -> dict[str, Any]:
        return {
            "onnxruntime": ort.__version__,
            "onnxruntime_ep_webgpu": package_version("onnxruntime-ep-webgpu"),
            "build": "onnxruntime-webgpu" if self.builtin else "onnxruntime + plugin",
            "provider": self.provider,
            "device": self.adapter,
            "faults": sorted(self.options.inject),
        }

    def close(self) -> None:
        self._sessions.clear()  # the bindings go before the values' sessions
        if self.values is not None:
            self.values.close()

    def run(self, work: Work) -> BackendRun | ScenarioRun:
        if isinstance(work, ScenarioWork):
            return ran_on(self._scenario(work), self.adapter)
        if work.opens_sequence:  # what an earlier sequence left goes, as ort-web's does
            self._sessions.clear()
        run = self._case(work.case, work.workload)
        if work.closes_sequence:
            self._sessions.clear()
        return ran_on(run, self.adapter)

    def _case(self, case: Case, workload: Workload) -> BackendRun:
        faults = case.inject | self.options.inject
        began = time.perf_counter()
        key = (workload.key, case.mode)
        native = self._sessions.get(key) if case.revisit else None
        created = native is None
        if created:
            try:
                native = self._session(workload, case.capture, case.dynamic, faults)
            except SessionRefused as refused:
                return refused.run
            self._sessions[key] = native
        try:
            return self._runs(case, workload, native, faults, began, created)
        except Refused as refused:
            return BackendRun("capture-unsupported", message=str(refused))

    def _scenario(self, plan: ScenarioWork) -> ScenarioRun:
        """A scenario's steps, each session with bindings of its own; never raises for its own
        failure. `release-graph` is onnxruntime's ``release_captured_graph`` (the next run of
        that graph binds and records anew); a rebinding the Python API refuses by design (a new
        buffer after a capture) is ``capture-unsupported`` at its step. Outputs are copied to
        the host as they are made, so ``hold`` and ``dispose`` keep nothing alive, and a
        session's ``location`` changes nothing."""
        workload, specs = plan.workload, {s.name: s for s in plan.scenario.sessions}
        faults = plan.inject | self.options.inject
        deadline = time.perf_counter() + plan.timeout
        sessions: dict[str, NativeSession] = {}
        shared = Shared(workload, faults, lambda: sessions.values())
        details: dict[str, Any] = {"provider": self.provider}
        if faults:
            details["faults"] = sorted(faults)
        steps: list[StepRun] = []
        for index, (step, feed) in enumerate(zip(plan.scenario.steps, plan.feeds, strict=True)):
            try:
                steps.append(self._scenario_step(step, feed, specs[step.session], sessions, shared))
            except SessionRefused as refused:
                return ScenarioRun(refused.run.status, refused.run.message, tuple(steps), details)
            except Refused as refused:
                return ScenarioRun("capture-unsupported", str(refused), tuple(steps), details)
            except RunFailed as failed:
                return ScenarioRun("error", str(failed), tuple(steps), details)
            except Exception as failed:  # an API this version lacks (release_captured_graph)
                message = f"{type(failed).__name__}: {failed}"
                return ScenarioRun("error", message, tuple(steps), details)
            if time.perf_counter() > deadline:
                message = f"over the time limit after step {index + 1}"
                return ScenarioRun("timeout", message, tuple(steps), details)
        return ScenarioRun("ok", "", tuple(steps), details)

    def _scenario_step(self, step, feed, spec, sessions: dict[str, NativeSession], shared):
        """One step of a scenario on `sessions` (by name), which it updates."""
        if step.action == CREATE or step.action == RUN and step.session not in sessions:
            made = self._session(shared.workload, spec.capture, False, shared.faults)
            sessions[step.session] = made
        native = sessions[step.session]
        if step.action == RELEASE_GRAPH:
            native.session.release_captured_graph(step.graph)
            native.graphs.pop(step.graph, None)
        elif step.action == RELEASE:
            del sessions[step.session]
        if step.action != RUN:
            return StepRun()
        inputs = shared.workload.inputs_of(feed.variant)
        modes = BufferModes("fresh" if step.inputs == "fresh" else "rewrite", spec.outputs)
        ran = self._run_once(native, shared, feed.graph, inputs, modes, spec.capture)
        if not spec.capture:
            return StepRun(ran.outputs)
        return StepRun(ran.outputs, records=ran.recorded, reruns=int(ran.reran(feed.graph)))

    def _create(self, workload: Workload, capture: bool, dynamic: bool, faults: frozenset[str]):
        options = ort.SessionOptions()
        options.enable_mem_pattern = False  # the WebGPU EP's capture requires it
        options.log_severity_level = LOG_SEVERITY_INFO
        if not dynamic:  # a decoder's prefill runs at its own sequence length
            for dim, value in workload.shared_shape.items():
                options.add_free_dimension_override_by_name(dim, value)
        capture = capture and CAPTURE_OPTION_DROPPED not in faults
        layout = workload.preferred_layout
        if self.builtin:
            if capture:
                options.add_session_config_entry(CAPTURE_ENTRY, "1")
            if layout:
                options.add_session_config_entry(PREFERRED_LAYOUT_ENTRY, layout)
            return ort.InferenceSession(workload.model, options, providers=[WEBGPU_EP])
        provider_options = {}
        if self.provider == WEBGPU_EP:
            provider_options = {
                **({"enableGraphCapture": "1"} if capture else {}),
                **({"preferredLayout": layout} if layout else {}),
            }
        options.add_provider_for_devices([self.device], provider_options)
        return ort.InferenceSession(workload.model, sess_options=options)

    def _runs(self, case, workload, native, faults, began_case, created) -> BackendRun:
        session_ms = (time.perf_counter() - began_case) * 1e3
        deadline = began_case + case_timeout(case, self.options)
        feeds = workload.feeds(self.options.runs)
        runs, times, replayed, errors = [], [], [], []
        reruns, unrecorded = 0, set()
        shared = Shared(workload, faults, lambda: self._sessions.values())
        caches = CarriedCaches(workload, case.capture)
        for index, feed in enumerate(feeds):
            inputs = caches.inputs_to_write(feed)
            began = time.perf_counter()
            try:
                if feed.prefill:
                    ran = self._prefill(native, shared, feed, case.capture)
                else:
                    ran = self._run_once(
                        native, shared, feed.graph, inputs, case.buffers, case.capture
                    )
            except Refused as refused:
                raise Refused(f"run {index + 1}: {refused}") from None
            except RunFailed as failed:
                message = f"run {index + 1}: {failed}"
                trace = Trace(errors=tuple(errors + failed.errors))
                return BackendRun("error", runs=tuple(runs), message=message, trace=trace)
            if not feed.prefill:  # not a step: its time is in no step's timing
                times.append((time.perf_counter() - began) * 1e3)
            runs.append(ran.outputs)
            caches.ran(feed, ran.outputs)
            errors += ran.errors
            if case.capture and not feed.prefill:
                replayed.append(list(ran.replayed))
                if ran.records and ran.replayed and created:
                    unrecorded.add(feed.graph)  # its first run replayed: nothing recorded
                reruns += ran.reran(feed.graph)
            if time.perf_counter() > deadline:
                break
        timed_out = len(runs) < len(feeds)
        timings = Timings.of_runs(session_ms, times)
        details: dict[str, Any] = {"session_created": created, "provider": self.provider}
        if native.on_cpu:
            details["on_cpu"] = list(native.on_cpu)
        if case.capture:
            details["replayed_graphs"] = replayed
        if faults:
            details["faults"] = sorted(faults)
        return BackendRun(
            status="timeout" if timed_out else "ok",
            runs=tuple(runs),
            message=f"stopped after {len(runs)} runs: over the time limit" if timed_out else "",
            timings=timings,
            trace=Trace(
                replay_reruns=reruns,
                unrecorded_graphs=tuple(sorted(unrecorded)),
                errors=tuple(errors),
            ),
            details=details,
        )

    def _session(
        self, workload: Workload, capture: bool, dynamic: bool, faults: frozenset[str]
    ) -> NativeSession:
        """A new session; SessionRefused with the run to report when onnxruntime will not
        make it (a missing kernel, a capture it cannot take)."""
        try:
            with ort_log() as lines:
                made = self._create(workload, capture, dynamic, faults)
        except Exception as exc:
            raise SessionRefused(
                _refusal(f"{type(exc).__name__}: {exc}", logged_errors(lines))
            ) from None
        if self.provider == WEBGPU_EP and made.get_providers()[0] != WEBGPU_EP:
            raise SessionRefused(
                BackendRun("error", message="onnxruntime made the session on the CPU EP alone")
            )
        on_cpu = [f"{op} (node {name!r})" for op, name in _NO_KERNEL.findall("\n".join(lines))]
        return NativeSession(made, signature(workload), tuple(dict.fromkeys(on_cpu)))

    def _run_once(
        self,
        native: NativeSession,
        shared: Shared,
        graph: int,
        inputs,
        buffers: BufferModes,
        capture: bool,
    ) -> OneRun:
        """One run, eager or on `graph`'s binding, with what onnxruntime logged. Refused when
        the Python API's guards or a kernel refuse the capture; RunFailed for another failure."""
        binding, records = None, False
        try:
            with ort_log() as lines:
                if capture:
                    binding = self._binding(native, graph, inputs, shared)
                    records = not binding.recorded
                    outputs = self._replay(native, graph, binding, inputs, buffers, shared)
                else:
                    names = list(shared.workload.output_names)
                    values = native.session.run(names, dict(inputs))
                    outputs = dict(zip(names, values, strict=True))
        except Exception as exc:
            if capture and isinstance(exc, ValueError):  # the Python API's guards
                raise Refused(str(exc)) from None
            if capture and CAPTURE_REFUSED.search(str(exc)):  # a kernel's refusal
                raise Refused(f"{type(exc).__name__}: {exc}") from None
            raise RunFailed(f"{type(exc).__name__}: {exc}", logged_errors(lines)) from None
        if binding is not None:
            binding.recorded = True
        return OneRun(outputs, records, tuple(replayed_graphs(lines)), logged_errors(lines))

    def _prefill(self, native: NativeSession, shared: Shared, feed: Feed, capture: bool) -> OneRun:
        """A decoder's prompt, uncaptured (run option ``gpu_graph_id`` -1, as genai runs it), on
        the case's session. Under capture its IOBinding is its own, but its past caches and
        present outputs are the values the graph's first decode step reads (made here when the
        graph has no binding yet), so that step starts from the device's caches."""
        workload = shared.workload
        inputs = workload.inputs_of(feed.variant)
        if not capture:
            return self._run_once(native, shared, feed.graph, inputs, BufferModes(), False)
        binding = self._binding(native, feed.graph, workload.inputs, shared)  # its shapes
        if binding.sides:  # swapped: the side the first decode step reads
            caches = binding.sides[binding.turns % 2][0]
        else:
            caches = {past: binding.outputs[present] for present, past in workload.in_place.items()}
        io = native.session.io_binding()
        for name, value in inputs.items():
            if name in caches:
                self._write(caches[name], value)
                io.bind_ortvalue_input(name, caches[name])
            else:
                io.bind_cpu_input(name, np.ascontiguousarray(value))
        for name in workload.output_names:
            if name in workload.in_place:
                io.bind_ortvalue_output(name, caches[workload.in_place[name]])
            else:
                io.bind_output(name)  # onnxruntime allocates it
        run_options = ort.RunOptions()
        run_options.add_run_config_entry("gpu_graph_id", "-1")
        try:
            with ort_log() as lines:
                native.session.run_with_iobinding(io, run_options)
                values = io.copy_outputs_to_cpu()
        except Exception as exc:
            raise RunFailed(f"{type(exc).__name__}: {exc}", logged_errors(lines)) from None
        outputs = dict(zip(workload.output_names, values, strict=True))
        return OneRun(outputs, False, tuple(replayed_graphs(lines)), logged_errors(lines))

    def _value(self, native: NativeSession, shape, dtype) -> Any:
        if self.values is not None:
            return self.values.value(shape, dtype)
        if self.memory == "cpu":  # every version's API has this one
            return ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype, "cpu", 0)
        return native.session.create_ortvalue_from_shape_and_type(list(shape), dtype, self.memory)

    def _write(self, value, array: np.ndarray) -> None:
        """`array` into the device value `value`, in place."""
        array = np.ascontiguousarray(array)
        if self.values is not None:
            ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(array)], [value], None)
        else:
            value.update_inplace(array)

    def _binding(self, native, graph, inputs, shared: Shared) -> GraphBinding:
        """The graph's binding, made and bound on its first run; an output the workload's
        `in_place` names is bound to its input's value (a decoder's static KV cache), or, when
        `swapped`, to a second value that the next run reads (``sides``)."""
        if graph in native.graphs:
            return native.graphs[graph]
        workload, faults, specs = shared.workload, shared.faults, shared.output_specs
        in_place = workload.in_place
        written = {name: self._value(native, a.shape, a.dtype) for name, a in inputs.items()}
        bound = written
        if INPUT_SNAPSHOT_AT_CAPTURE in faults:
            bound = {name: self._value(native, a.shape, a.dtype) for name, a in inputs.items()}
            for name, value in bound.items():
                self._write(value, inputs[name])
        if GRAPHS_SHARE_INPUTS in faults and graph > 0 and 0 in native.graphs:
            bound = native.graphs[0].written
        outputs = {
            name: bound[in_place[name]] if name in in_place else self._value(native, *spec)
            for name, spec in specs.items()
        }
        sides = ()
        if workload.swapped:
            pasts = {name: bound[name] for name in in_place.values()}
            spare = {name: self._value(native, *specs[name]) for name in in_place}
            outputs |= spare
            sides = (
                (pasts, spare),
                (
                    {in_place[n]: v for n, v in spare.items()},
                    {n: pasts[in_place[n]] for n in spare},
                ),
            )
        io = native.session.io_binding()
        for name, value in bound.items():
            io.bind_ortvalue_input(name, value)
        for name, value in outputs.items():
            io.bind_ortvalue_output(name, value)
        native.graphs[graph] = GraphBinding(io, written, outputs, sides=sides)
        return native.graphs[graph]

    def _replay(self, native, graph, binding, inputs, buffers: BufferModes, shared: Shared):
        """Write the run's inputs as `buffers` say, run the graph, read its outputs."""
        if binding.recorded and buffers.inputs == "fresh":
            binding.written = {n: self._value(native, a.shape, a.dtype) for n, a in inputs.items()}
            for name, value in binding.written.items():
                binding.io.bind_ortvalue_input(name, value)
        if binding.recorded and buffers.outputs == "fresh":
            binding.outputs = {
                n: self._value(native, v.shape(), _NUMPY[v.data_type()])
                for n, v in binding.outputs.items()
            }
            for name, value in binding.outputs.items():
                binding.io.bind_ortvalue_output(name, value)
        if binding.sides:  # swapped caches: this run's side
            pasts, presents = binding.sides[binding.turns % 2]
            binding.turns += 1
            binding.written |= pasts
            binding.outputs |= presents
            for name, value in pasts.items():
                binding.io.bind_ortvalue_input(name, value)
            for name, value in presents.items():
                binding.io.bind_ortvalue_output(name, value)
        donor = (
            _donor(native, shared.sessions()) if SHAPE_ONLY_CAPTURE_CACHE in shared.faults else None
        )
        borrowed = donor.graphs.get(graph) if donor and binding.recorded else None
        target, session = (borrowed, donor.session) if borrowed else (binding, native.session)
        for name, value in target.written.items():
            if name in inputs:  # a decoder's carried caches are not written
                self._write(value, inputs[name])
        run_options = ort.RunOptions()
        run_options.add_run_config_entry("gpu_graph_id", str(graph))
        session.run_with_iobinding(target.io, run_options)
        return dict(zip(target.outputs, target.io.copy_outputs_to_cpu(), strict=True))


class CarriedCaches:
    """A decoder's KV caches from run to run (the workload's ``DeviceCache``). A graph's first
    run writes every input. Under capture a later run writes all but the caches, which stay in
    the values its binding shares between past and present; eagerly (numpy in and out) it is
    fed the caches the graph's previous run returned. A rewind writes the previous run's
    caches, read back, with the positions it drops zeroed (the Python API writes a value
    whole). Without a device cache (an encoder) every run writes every input."""

    def __init__(self, workload: Workload, capture: bool):
        self.workload, self.capture = workload, capture
        self.spec = workload.device_cache
        self.last: dict[int, Mapping[str, np.ndarray]] = {}  # graph -> its last run's outputs

    def inputs_to_write(self, feed: Feed) -> Mapping[str, np.ndarray]:
        inputs = self.workload.inputs_of(feed.variant)
        if self.spec is None or feed.graph not in self.last:
            return inputs
        own = {name: value for name, value in inputs.items() if name not in self.spec.inputs}
        length = self.spec.rewinds.get(feed.variant)
        if self.capture and length is None:
            return own
        last = self.last[feed.graph]
        caches = {past: last[present].copy() for present, past in self.workload.in_place.items()}
        if length is not None:
            for cache in caches.values():
                cache[:, :, length:] = 0
        return own | caches

    def ran(self, feed: Feed, outputs: Mapping[str, np.ndarray]) -> None:
        self.last[feed.graph] = outputs


def _donor(native: NativeSession, sessions: Iterable[NativeSession]) -> NativeSession | None:
    """An earlier capture session with `native`'s signature, among `sessions` (the fault)."""
    for other in sessions:
        if other is native:
            return None
        if other.signature == native.signature and other.graphs:
            return other
    return None


_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(uint32)": np.uint32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def _output_specs(workload: Workload) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each output's shape and type, for the values a capture binds before its first run:
    static shapes make them the same every run, and onnxruntime on the CPU says what they are."""
    return {name: (v.shape, v.dtype) for name, v in compute_reference(workload).items()}


def _refusal(message: str, errors: list[str]) -> BackendRun:
    """A session onnxruntime would not create: a missing kernel, a capture it cannot take."""
    lacks = onnxruntime_lacks(message)
    if lacks:
        return BackendRun("unsupported-op", message=lacks)
    status = "capture-unsupported" if "graph capture" in message else "error"
    return BackendRun(status, message=message, trace=Trace(errors=tuple(errors)))


def describe(device) -> str:
    """An EP device in words: type, vendor, ids and what onnxruntime knows of it."""
    hardware = device.device
    facts: Mapping[str, str] = dict(hardware.metadata)
    extra = ", ".join(f"{k} {v}" for k, v in facts.items())
    vendor = hardware.vendor or f"vendor 0x{hardware.vendor_id:04x}"
    kind = str(hardware.type).rsplit(".", 1)[-1]
    return f"{device.ep_name} on {kind} {vendor} device 0x{hardware.device_id:04x}" + (
        f" ({extra})" if extra else ""
    )
