"""Run a plan on a device: eager, or captured once and replayed.

Eager: every run writes the inputs, creates each dispatch's uniform buffer (written once) and
bind group afresh, encodes the dispatches, submits, and reads the outputs.

Capture: the first run of a capture case looks up the session's capture key in the device's
capture cache; on a miss it records the dispatch list (pipeline, bind group, workgroup counts
per step), each bind group with its uniform buffer taken from the device's bind-group cache
under a complete signature: program key (kernel, element types, rank, uniform field order),
uniform bytes, and the identities of the bound buffers. Every run then replays the capture:
it writes the inputs into the capture's input buffers, encodes the recorded list into one
command buffer, and reads the capture's output buffers. No bind group is created and no
uniform written after recording. The capture key is a digest of the IO shapes, the uniform
order and every step's signature, so any change of layout, constant or buffer records anew.

Faults (``faults.FAULTS``): ``shape-only-capture-cache`` (the seed's bug) looks captures up by
the IO shapes alone, finding the first clean capture recorded for those shapes; so a later
layout with the same shapes replays an earlier layout's capture, with that layout's bind groups
and uniforms, and silently returns the earlier layout's result. ``racy-replay`` records a second
command list whose MatMuls sum in the opposite order, and replays alternate between the two.
``stale-input-binding`` records against input buffers of the capture's own, which replays never
write. Both record under a capture key that includes them, so no clean case finds their capture.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import wgpu

from runner.backends.base import Dispatch
from runner.backends.wgpu.device import Buffer, Device, digest
from runner.backends.wgpu.faults import (
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

    def io_shapes(self) -> tuple:
        tensors = self.plan.tensors
        return (
            tuple((tensors[n].shape, tensors[n].dtype) for n in self.plan.inputs),
            tuple((tensors[n].shape, tensors[n].dtype) for n in self.plan.outputs),
        )

    def run_eager(self, inputs: Mapping[str, np.ndarray]) -> tuple[dict, tuple[Dispatch, ...]]:
        self._write(self._input_buffers(), inputs)
        commands, dispatches = [], []
        for step, pipeline in zip(self.plan.steps, self.pipelines, strict=True):
            uniform, tensors = self.device.uniform(step.uniform), self._bound(step)
            bind_group = self.device.bind_group(pipeline, tensors, uniform)
            commands.append((pipeline.pipeline, bind_group, step.workgroups))
            dispatches.append(self._record(step, step.program, tensors, uniform))
        self._submit(commands)
        return self._read(self._outputs()), tuple(dispatches)

    def capture(self, faults: Faults) -> tuple[Capture, bool]:
        """The capture for this session's key, and whether this call recorded it."""
        if SHAPE_ONLY_CAPTURE_CACHE in faults and self.io_shapes() in self.device.captures_by_shape:
            return self.device.captures_by_shape[self.io_shapes()], False
        key = self._capture_key(faults.in_recording)
        if key in self.device.captures:
            return self.device.captures[key], False
        bound = self._stale_inputs() if STALE_INPUT_BINDING in faults else self._bound
        programs = [step.program for step in self.plan.steps]
        recordings = [self._recording(programs, bound)]
        if RACY_REPLAY in faults:
            order = self.plan.uniform_order
            reversed_sums = [compose(REVERSED_SUM(p.kernel), order) for p in programs]
            recordings.append(self._recording(reversed_sums, bound))
        capture = Capture(key, tuple(recordings), tuple(self._input_buffers()), self._outputs())
        self.device.captures[key] = capture
        if faults.shares_captures_by_shape:
            self.device.captures_by_shape.setdefault(self.io_shapes(), capture)
        return capture, True

    def replay(
        self, capture: Capture, inputs: Mapping[str, np.ndarray], run: int = 0
    ) -> tuple[dict, tuple[Dispatch, ...]]:
        """Run ``run`` of a capture case: no bind group created, no uniform written."""
        recording = capture.recordings[run % len(capture.recordings)]
        self._write(capture.inputs, inputs)
        self._submit(recording.commands)
        return self._read(capture.outputs), recording.dispatches

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

    def _stale_inputs(self) -> Callable[[Step], list[Buffer]]:
        """Binds each graph input to a new buffer of the capture's own, which nothing writes."""
        stale = {
            b.identity: self.device.buffer(b.gpu.size, f"s{self.number}/capture-input")
            for b in self._input_buffers()
        }
        return lambda step: [stale.get(b.identity, b) for b in self._bound(step)]

    def _capture_key(self, faults: tuple[str, ...]) -> str:
        steps = [
            (s.program.key, s.uniform, [b.identity for b in self._bound(s)], s.workgroups)
            for s in self.plan.steps
        ]
        io = [b.identity for b in self._input_buffers()] + [b.identity for b, _ in self._outputs()]
        return digest(self.io_shapes(), self.plan.uniform_order, steps, io, faults)

    def _bound(self, step: Step) -> list[Buffer]:
        return [self.buffers[name] for name in (*step.inputs, step.output)]

    def _record(
        self, step: Step, program: Program, bound: Sequence[Buffer], uniform: Buffer
    ) -> Dispatch:
        """The trace's view of one dispatch: what ``program`` ran with ``bound`` and ``uniform``."""
        names = (*step.inputs, step.output)
        tensors = [(self.plan.roles[n], b.identity) for n, b in zip(names, bound, strict=True)]
        return dispatch_record(
            step.node, program.key, tensors, uniform.identity, UNIFORM_SLOT, step.workgroups
        )

    def _input_buffers(self) -> list[Buffer]:
        return [self.buffers[self.plan.storage[name]] for name in self.plan.inputs]

    def _outputs(self) -> tuple[tuple[Buffer, Tensor], ...]:
        return tuple(
            (self.buffers[self.plan.storage[name]], self.plan.tensors[name])
            for name in self.plan.outputs
        )

    def _write(self, buffers: Sequence[Buffer], inputs: Mapping[str, np.ndarray]) -> None:
        for name, buffer in zip(self.plan.inputs, buffers, strict=True):
            data = to_device(inputs[name], name)
            if data.size:
                self.device.device.queue.write_buffer(buffer.gpu, 0, data)

    def _submit(self, commands: Sequence[Command]) -> None:
        encoder = self.device.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        for pipeline, bind_group, groups in commands:
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, bind_group)
            compute.dispatch_workgroups(*groups)
        compute.end()
        self.device.device.queue.submit([encoder.finish()])

    def _read(self, outputs: Sequence[tuple[Buffer, Tensor]]) -> dict[str, np.ndarray]:
        """The graph outputs, named by this session's plan, read from ``outputs`` in order."""
        queue = self.device.device.queue
        return {
            name: from_device(queue.read_buffer(buffer.gpu, 0, tensor.nbytes), tensor)
            for name, (buffer, tensor) in zip(self.plan.outputs, outputs, strict=True)
        }
