"""A generation loop's steps on one device (``runner.workload.decoder.Generation`` drives them).

A decoder runs at two static shapes at least (the prefill's and a decode step's), so each input
shape gets a session of its own, kept for the loop's life. With ``capture`` a session's first
run records and every later run replays the recording with that step's inputs (new token, mask,
caches): the decode step captured once and replayed per token, as onnxruntime-genai does.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from runner.backends.wgpu.device import Device
from runner.backends.wgpu.executor import Session
from runner.backends.wgpu.faults import Faults
from runner.backends.wgpu.prepare import prepare


class DeviceSteps:
    """Callable on a step's inputs, returning its outputs. ``recorded``: per capture run,
    whether that run recorded (the others replayed)."""

    def __init__(self, device: Device, model: bytes, capture: bool):
        self.device, self.model, self.capture = device, model, capture
        self.sessions: dict[tuple, Session] = {}
        self.recorded: list[bool] = []

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        shapes = tuple((name, np.shape(value)) for name, value in inputs.items())
        if shapes not in self.sessions:
            plan = prepare(self.model, inputs)
            self.sessions[shapes] = Session(self.device, plan, len(self.device.sessions) + 1)
            self.device.sessions[(self.model, shapes)] = self.sessions[shapes]
        session = self.sessions[shapes]
        if not self.capture:
            return session.run_eager(inputs)[0]
        recording, recorded = session.capture(Faults())
        self.recorded.append(recorded)
        return session.replay(recording, inputs)[0]
