"""Run a plan on a device: eager, or captured once and replayed.

Eager: every run writes the inputs, creates each dispatch's uniform buffer (written once) and
bind group afresh, encodes the dispatches, submits, and reads the outputs (each run, eager or
replayed, copies them all into the session's readback buffer and maps it once).

Capture: the first run of each graph of a capture case looks up the session's capture key in
the device's capture cache; on a miss it records the dispatch list (pipeline, bind group,
workgroup counts per step), each bind group with its uniform buffer taken from the device's
bind-group cache under a complete signature: program key (kernel, element types, rank, uniform
field order), uniform bytes, and the identities of the bound buffers. Every run then replays the
capture: it writes the run's inputs into the capture's input buffers, encodes the recorded list
into one command buffer, and reads the capture's output buffers. No bind group is created and no
uniform written after recording. The capture key is a digest of the IO shapes, the uniform
order and every step's signature, so any change of layout, constant or buffer records anew.

Graphs (``graphs: N``): graph 0 records on the session's own input and output buffers, every
later graph on input and output buffers of its own (intermediates are shared: graphs run one
after another), so each replays on its own IO, as the C++ WebGPU EP keeps a graph per
gpu_graph_id. Buffer modes (``buffers:``): with ``fresh`` inputs each run writes a new buffer
and the replay copies it into the buffers it recorded with; with ``fresh`` outputs the replay
copies its outputs into a new buffer, which is read. So this executor is correct in every mode.

Faults (``faults.FAULTS``): ``shape-only-capture-cache`` (the seed's bug) looks captures up by
the IO shapes alone, finding the first clean capture recorded for those shapes; so a later
layout with the same shapes replays an earlier layout's capture, with that layout's bind groups
and uniforms, and silently returns the earlier layout's result. ``racy-replay`` records a second
command list whose MatMuls sum in the opposite order, and replays alternate between the two.
``stale-input-binding`` records against input buffers of the capture's own, which replays never
write; ``input-snapshot-at-capture`` against buffers holding a copy of the recording run's
inputs (``lengths-frozen-at-capture`` and ``cache-frozen-at-capture``: of a decoder's attention
mask, of its KV caches); ``graphs-share-inputs`` binds graph 0's input buffers in every later
graph. All record under a capture key that includes them, so no clean case finds their capture.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np
import wgpu

from runner.backends.base import Dispatch
from runner.backends.wgpu.device import Buffer, Device, digest
from runner.backends.wgpu.faults import (
    GRAPHS_SHARE_INPUTS,
    RACY_REPLAY,
    REVERSED_SUM,
    SHAPE_ONLY_CAPTURE_CACHE,
    STALE_INPUT_BINDING,
    Faults,
)
from runner.backends.wgpu.kernels import Program, compose
from runner.backends.wgpu.prepare import Plan, Step
from runner.backends.wgpu.tensors import Tensor, from_device, to_device
from runner.backends.wgpu.trace import dispatch_record
from runner.backends.wgpu.uniforms import UNIFORM_SLOT
from runner.suite.spec import BufferModes

Command = tuple[wgpu.GPUComputePipeline, wgpu.GPUBindGroup, tuple[int, int, int]]


@dataclass(frozen=True, eq=False)
class Recording:
    commands: tuple[Command, ...]
    dispatches: tuple[Dispatch, ...]  # what each command binds, for the trace


@dataclass(frozen=True, eq=False)
class Capture:
    key: str
    recordings: tuple[Recording, ...]  # run n replays recordings[n % len]; one unless racy
    inputs: tuple[Buffer, ...]  # graph inputs, in the recording plan's order
    outputs: tuple[tuple[Buffer, Tensor], ...]  # graph outputs, same


class Session:
    """A plan resident on a device: a buffer per stored tensor, constants uploaded, pipelines
    compiled. Sessions live as long as the device (see ``Device.sessions``)."""

    def __init__(self, device: Device, plan: Plan, number: int):
        self.device = device
        self.plan = plan
        self.number = number
        self.buffers = {
            name: device.buffer(plan.tensors[name].nbytes, f"s{number}/{name}")
            for name in dict.fromkeys(plan.storage.values())
        }
        for name, value in plan.constants.items():
            data = to_device(value, name)
            if data.size:
                device.device.queue.write_buffer(self.buffers[name].gpu, 0, data)
        self.pipelines = [device.pipeline(step.program) for step in plan.steps]
        # every graph output of a run is copied here and mapped once (a decoder: logits and caches)
        size = sum(plan.tensors[name].nbytes for name in plan.outputs)
        usage = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
        self.readback = device.buffer(max(4, size), f"s{number}/readback", usage)
        # graph -> its own buffers for the storage of graph inputs and outputs (graph 0: none)
        self.graph_io: dict[int, dict[str, Buffer]] = {}

    def io_shapes(self) -> tuple:
        tensors = self.plan.tensors
        return (
            tuple((tensors[n].shape, tensors[n].dtype) for n in self.plan.inputs),
            tuple((tensors[n].shape, tensors[n].dtype) for n in self.plan.outputs),
        )

    def run_eager(
        self, inputs: Mapping[str, np.ndarray], graph: int = 0
    ) -> tuple[dict, tuple[Dispatch, ...]]:
        """A run on `graph`'s IO buffers (a decoder's generators keep their caches apart);
        inputs `inputs` leaves out keep what the buffers hold."""
        self._write(self._input_buffers(graph), inputs)
        commands, dispatches = [], []
        for step, pipeline in zip(self.plan.steps, self.pipelines, strict=True):
            uniform, tensors = self.device.uniform(step.uniform), self._bound(step, graph)
            bind_group = self.device.bind_group(pipeline, tensors, uniform)
            commands.append((pipeline.pipeline, bind_group, step.workgroups))
            dispatches.append(self._record(step, step.program, tensors, uniform))
        self._submit(commands)
        return self._read(self._outputs(graph)), tuple(dispatches)

    def capture(
        self, faults: Faults, graph: int = 0, inputs: Mapping[str, np.ndarray] | None = None
    ) -> tuple[Capture, bool]:
        """The capture of `graph` for this session's key, and whether this call recorded it;
        `inputs` are the recording run's (``input-snapshot-at-capture`` copies them)."""
        if (
            graph == 0
            and SHAPE_ONLY_CAPTURE_CACHE in faults
            and self.io_shapes() in self.device.captures_by_shape
        ):
            return self.device.captures_by_shape[self.io_shapes()], False
        key = self._capture_key(faults.in_recording, graph)
        if key in self.device.captures:
            return self.device.captures[key], False

        def bound(step: Step) -> list[Buffer]:
            return self._bound(step, graph)

        if STALE_INPUT_BINDING in faults:
            bound = self._rebound(bound, self._spare_inputs(graph))
        if faults.frozen_inputs:
            bound = self._rebound(bound, self._spare_inputs(graph, inputs, faults.frozen_inputs))
        if GRAPHS_SHARE_INPUTS in faults and graph:
            first = zip(self._input_buffers(graph), self._input_buffers(0), strict=True)
            bound = self._rebound(bound, {own.identity: other for own, other in first})
        programs = [step.program for step in self.plan.steps]
        recordings = [self._recording(programs, bound)]
        if RACY_REPLAY in faults:
            order = self.plan.uniform_order
            reversed_sums = [compose(REVERSED_SUM(p.kernel), order) for p in programs]
            recordings.append(self._recording(reversed_sums, bound))
        capture = Capture(
            key, tuple(recordings), tuple(self._input_buffers(graph)), self._outputs(graph)
        )
        self.device.captures[key] = capture
        if graph == 0 and faults.shares_captures_by_shape:
            self.device.captures_by_shape.setdefault(self.io_shapes(), capture)
        return capture, True

    def replay(
        self,
        capture: Capture,
        inputs: Mapping[str, np.ndarray],
        run: int = 0,
        buffers: BufferModes | None = None,
    ) -> tuple[dict, tuple[Dispatch, ...]]:
        """Run ``run`` of a capture case: no bind group created, no uniform written. A fresh
        buffer per run (`buffers`) is copied into, or out of, the buffers the capture binds.
        Inputs `inputs` leaves out keep what the buffers hold."""
        recording = capture.recordings[run % len(capture.recordings)]
        buffers = buffers or BufferModes()
        copies_in = copies_out = ()
        if buffers.inputs == "fresh":
            fresh = [
                self.device.buffer(b.gpu.size, f"s{self.number}/run-input") for b in capture.inputs
            ]
            self._write(fresh, inputs)
            pairs = zip(self.plan.inputs, fresh, capture.inputs, strict=True)
            copies_in = tuple((new, own) for name, new, own in pairs if name in inputs)
        else:
            self._write(capture.inputs, inputs)
        outputs = capture.outputs
        if buffers.outputs == "fresh":
            outputs = tuple(
                (self.device.buffer(b.gpu.size, f"s{self.number}/run-output"), tensor)
                for b, tensor in capture.outputs
            )
            copies_out = tuple(
                (b, f) for (b, _), (f, _) in zip(capture.outputs, outputs, strict=True)
            )
        self._submit(recording.commands, copies_in, copies_out)
        return self._read(outputs), recording.dispatches

    def carry(self, pairs: Mapping[str, str], graph: int = 0, source: Session | None = None):
        """Copy each output `pairs` names into its input's buffer (output -> input) on the
        device, for the next run to read: a decoder's present caches into its past ones, from
        `source`'s outputs (a prefill's session) or this session's own."""
        outputs = self._outputs(graph) if source is None else source._outputs()
        names = (source or self).plan.outputs
        sources = {name: buffer for name, (buffer, _) in zip(names, outputs, strict=True)}
        targets = dict(zip(self.plan.inputs, self._input_buffers(graph), strict=True))
        copies = [(sources[output], targets[input]) for output, input in pairs.items()]
        self._submit((), copies)

    def clear_from(self, names: Sequence[str], length: int, graph: int = 0) -> None:
        """Zero positions `length` on (axis 2) of the inputs `names` ([batch, heads, positions,
        head_size] caches) in `graph`'s buffers: a decoder's rewind."""
        targets = dict(zip(self.plan.inputs, self._input_buffers(graph), strict=True))
        for name in names:
            tensor = self.plan.tensors[self.plan.storage[name]]
            batch, heads, positions, width = tensor.shape
            row = 4 * width  # bytes of one position: the device holds 32-bit elements
            zeros = np.zeros((positions - length) * row, np.uint8)
            for block in range(batch * heads):
                offset = (block * positions + length) * row
                self.device.device.queue.write_buffer(targets[name].gpu, offset, zeros)

    def _recording(
        self, programs: Sequence[Program], bound: Callable[[Step], list[Buffer]]
    ) -> Recording:
        """Each step's dispatch of its program, bind groups and uniforms from the device cache."""
        commands, dispatches = [], []
        for step, program in zip(self.plan.steps, programs, strict=True):
            pipeline, tensors = self.device.pipeline(program), bound(step)
            signature = digest(program.key, step.uniform, [b.identity for b in tensors])

            def make(step=step, pipeline=pipeline, tensors=tensors):
                uniform = self.device.uniform(step.uniform)
                return self.device.bind_group(pipeline, tensors, uniform), uniform

            bind_group, uniform = self.device.cached_bind_group(signature, make)
            commands.append((pipeline.pipeline, bind_group, step.workgroups))
            dispatches.append(self._record(step, program, tensors, uniform))
        return Recording(tuple(commands), tuple(dispatches))

    def _spare_inputs(
        self,
        graph: int,
        inputs: Mapping[str, np.ndarray] | None = None,
        prefixes: tuple[str, ...] = ("",),
    ) -> dict[str, Buffer]:
        """A new buffer for each of the graph's inputs whose name starts with one of `prefixes`,
        holding `inputs` (else nothing written), by the identity of the buffer it stands in for."""
        own = self._input_buffers(graph)
        spare = [self.device.buffer(b.gpu.size, f"s{self.number}/capture-input") for b in own]
        if inputs is not None:
            self._write(spare, inputs)
        chosen = [name.startswith(prefixes) for name in self.plan.inputs]
        return {b.identity: s for b, s, c in zip(own, spare, chosen, strict=True) if c}

    @staticmethod
    def _rebound(
        bound: Callable[[Step], list[Buffer]], instead: Mapping[str, Buffer]
    ) -> Callable[[Step], list[Buffer]]:
        """`bound`, with the buffers `instead` names replaced."""
        return lambda step: [instead.get(b.identity, b) for b in bound(step)]

    def _capture_key(self, faults: tuple[str, ...], graph: int = 0) -> str:
        steps = [
            (s.program.key, s.uniform, [b.identity for b in self._bound(s, graph)], s.workgroups)
            for s in self.plan.steps
        ]
        io = [b.identity for b in self._input_buffers(graph)]
        io += [b.identity for b, _ in self._outputs(graph)]
        return digest(self.io_shapes(), self.plan.uniform_order, steps, io, faults)

    def _graph_buffers(self, graph: int) -> dict[str, Buffer]:
        """The buffers graph `graph` has of its own for graph inputs and outputs."""
        if graph and graph not in self.graph_io:
            names = {self.plan.storage[n] for n in (*self.plan.inputs, *self.plan.outputs)}
            self.graph_io[graph] = {
                name: self.device.buffer(
                    self.buffers[name].gpu.size, f"s{self.number}/g{graph}/{name}"
                )
                for name in sorted(names)
            }
        return self.graph_io.get(graph, {})

    def _buffer(self, name: str, graph: int = 0) -> Buffer:
        return self._graph_buffers(graph).get(name) or self.buffers[name]

    def _bound(self, step: Step, graph: int = 0) -> list[Buffer]:
        return [self._buffer(name, graph) for name in (*step.inputs, step.output)]

    def _record(
        self, step: Step, program: Program, bound: Sequence[Buffer], uniform: Buffer
    ) -> Dispatch:
        """The trace's view of one dispatch: what ``program`` ran with ``bound`` and ``uniform``."""
        names = (*step.inputs, step.output)
        tensors = [(self.plan.roles[n], b.identity) for n, b in zip(names, bound, strict=True)]
        return dispatch_record(
            step.node, program.key, tensors, uniform.identity, UNIFORM_SLOT, step.workgroups
        )

    def _input_buffers(self, graph: int = 0) -> list[Buffer]:
        return [self._buffer(self.plan.storage[name], graph) for name in self.plan.inputs]

    def _outputs(self, graph: int = 0) -> tuple[tuple[Buffer, Tensor], ...]:
        return tuple(
            (self._buffer(self.plan.storage[name], graph), self.plan.tensors[name])
            for name in self.plan.outputs
        )

    def _write(self, buffers: Sequence[Buffer], inputs: Mapping[str, np.ndarray]) -> None:
        for name, buffer in zip(self.plan.inputs, buffers, strict=True):
            if name not in inputs:
                continue
            data = to_device(inputs[name], name)
            if data.size:
                self.device.device.queue.write_buffer(buffer.gpu, 0, data)

    def _submit(
        self,
        commands: Sequence[Command],
        copies_in: Sequence[tuple[Buffer, Buffer]] = (),
        copies_out: Sequence[tuple[Buffer, Buffer]] = (),
    ) -> None:
        """One command buffer: `copies_in` (source, destination), the dispatches, `copies_out`."""
        encoder = self.device.device.create_command_encoder()
        for source, target in copies_in:
            encoder.copy_buffer_to_buffer(source.gpu, 0, target.gpu, 0, source.gpu.size)
        compute = encoder.begin_compute_pass()
        for pipeline, bind_group, groups in commands:
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, bind_group)
            compute.dispatch_workgroups(*groups)
        compute.end()
        for source, target in copies_out:
            encoder.copy_buffer_to_buffer(source.gpu, 0, target.gpu, 0, source.gpu.size)
        self.device.device.queue.submit([encoder.finish()])

    def _read(self, outputs: Sequence[tuple[Buffer, Tensor]]) -> dict[str, np.ndarray]:
        """The graph outputs, named by this session's plan, read from ``outputs`` in order: one
        copy each into the readback buffer, one submit, one map."""
        sizes = [tensor.nbytes for _, tensor in outputs]
        offsets = list(accumulate(sizes, initial=0))[:-1]
        encoder = self.device.device.create_command_encoder()
        for (buffer, _), offset, size in zip(outputs, offsets, sizes, strict=True):
            if size:
                encoder.copy_buffer_to_buffer(buffer.gpu, 0, self.readback.gpu, offset, size)
        self.device.device.queue.submit([encoder.finish()])
        self.readback.gpu.map_sync(wgpu.MapMode.READ)
        data = self.readback.gpu.read_mapped()
        self.readback.gpu.unmap()
        return {
            name: from_device(data[offset:], tensor)
            for name, (_, tensor), offset in zip(self.plan.outputs, outputs, offsets, strict=True)
        }
