"""The one protocol every backend implements, and the values a backend returns.

A backend is opened once per run (one device, one browser), runs cases in the order given, and
is closed at the end. It never judges: it reports what happened, the judge decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from runner.matrix import Case
from runner.workload import Workload

# What a backend says about a run; the judge turns it into verdicts.
RUN_STATUSES = ("ok", "unsupported-op", "capture-unsupported", "error", "timeout", "skipped")


@dataclass(frozen=True)
class Timings:
    session_ms: float | None = None  # creating the session / preparing the executor
    first_run_ms: float | None = None  # the first run (records, under capture), outputs read back
    median_run_ms: float | None = None  # median of the later runs (replays, under capture)
    runs: int = 0


@dataclass(frozen=True)
class SlotBinding:
    slot: int
    role: str  # input | output | weight | intermediate | uniform
    buffer: str  # a stable identity for the buffer within the run


@dataclass(frozen=True)
class Dispatch:
    node: str  # graph node name ("" where the backend cannot tell)
    pipeline: str  # pipeline / program key
    bindings: tuple[SlotBinding, ...] = ()
    workgroups: tuple[int, int, int] = (1, 1, 1)


@dataclass(frozen=True)
class Trace:
    """What the backend asked of WebGPU. ``replay_*`` count only runs after the first."""

    dispatches: tuple[Dispatch, ...] = ()  # of the last run
    bind_groups_created: int = 0
    uniform_writes: int = 0
    buffers_created: int = 0
    replay_bind_groups_created: int = 0
    replay_uniform_writes: int = 0
    errors: tuple[str, ...] = ()  # console errors, uncaptured WebGPU errors, device loss

    def summary(self) -> dict[str, Any]:
        return {
            "dispatches": len(self.dispatches),
            "bind_groups_created": self.bind_groups_created,
            "uniform_writes": self.uniform_writes,
            "buffers_created": self.buffers_created,
            "replay_bind_groups_created": self.replay_bind_groups_created,
            "replay_uniform_writes": self.replay_uniform_writes,
            "errors": list(self.errors),
        }


@dataclass(frozen=True)
class BackendRun:
    """The outcome of one case on a backend: every run's outputs, timings and the trace."""

    status: str = "ok"  # one of RUN_STATUSES
    runs: tuple[Mapping[str, np.ndarray], ...] = ()  # outputs of each run, first run first
    message: str = ""
    timings: Timings = Timings()
    trace: Trace = Trace()
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def outputs(self) -> Mapping[str, np.ndarray]:
        """The last run's outputs: under capture, a replay, which is what is under test."""
        return self.runs[-1] if self.runs else {}


@dataclass(frozen=True)
class BackendOptions:
    runs: int = 3  # per case: the first records (under capture), the rest are timed
    timeout_s: float | None = None  # per case; None: the suite's `timeout`
    inject: frozenset[str] = frozenset()  # run-wide faults; the pipeline adds them to Case.inject
    adapter: str | None = None  # wgpu: adapter name or backend type
    chromium: str | None = None  # ort-web: browser executable


class Diagnosis(NamedTuple):
    """One thing `doctor` checks for a backend (its module's `diagnose()` returns a list)."""

    check: str
    ok: bool
    detail: str  # what was found, or what is wrong
    fix: str = ""  # how to fix it, where it is not ok


def case_timeout(case: Case, options: BackendOptions) -> float:
    return options.timeout_s or case.suite.timeout_s


class Backend(Protocol):
    """One per backend name, registered in ``runner.backends``."""

    name: str
    FAULTS: Mapping[str, str]  # injectable fault name -> what it does

    def environment(self) -> dict[str, Any]:
        """Versions and adapter info for ``run.json``."""

    def run(self, case: Case, workload: Workload) -> BackendRun:
        """Run one case (``case.runs`` times); never raises for a case's own failure."""

    def close(self) -> None:
        """Release the device, browser and server."""
