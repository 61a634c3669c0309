"""The one protocol every backend implements, the values a backend returns, and the descriptor
that says everything else about a backend.

A backend is opened once per run (one device, one browser), runs cases in the order given, and
is closed at the end. It never judges: it reports what happened, the judge decides.

A ``BackendDescriptor`` holds what the rest of the runner needs to know about a backend before
it opens one: how a suite's ``backends:`` entry expands into targets, its element types and
platform for op-test skips, its faults, its ``doctor`` checks and where its implementation
lives. Each backend package declares one; ``runner.backends`` registers them. Descriptors are
plain data (implementations are named as ``"module:attribute"`` and imported on use), so
reading one imports neither wgpu nor Playwright.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from runner.errors import InvalidInput

if TYPE_CHECKING:  # annotations only: the matrix and workloads are built before any backend
    from runner.matrix import Case
    from runner.workload import Workload

# What a backend says about a run; the judge turns it into verdicts.
RUN_STATUSES = ("ok", "unsupported-op", "capture-unsupported", "error", "timeout", "skipped")


@dataclass(frozen=True)
class BackendTarget:
    """One column of the matrix: a backend, and which of its builds or adapters."""

    name: str  # a registered backend (runner.backends.REGISTRY)
    bundle: str | None = None  # the build, for backends that have several (ort-web's bundles)
    adapter: str | None = None  # wgpu: adapter name or backend type to prefer

    @property
    def id(self) -> str:
        return f"{self.name}:{self.bundle}" if self.bundle else self.name


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
    """What the backend asked of WebGPU. ``replay_*`` count only the runs that replay: under
    capture, every run but each graph's first, which records."""

    dispatches: tuple[Dispatch, ...] = ()  # of the last run
    bind_groups_created: int = 0
    uniform_writes: int = 0
    buffers_created: int = 0
    replay_bind_groups_created: int = 0
    replay_uniform_writes: int = 0
    errors: tuple[str, ...] = ()  # console errors, uncaptured WebGPU errors, device loss
    # Graphs (gpu_graph_id) whose first run created no bind group: nothing was recorded for
    # them, so their runs replayed another graph's capture (a build ignoring graph ids).
    unrecorded_graphs: tuple[int, ...] = ()

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
    # Rounds per case: the pipeline materializes an input sequence of this many (new inputs each
    # round, the last repeating the one before); the first records (under capture).
    runs: int = 3
    timeout_s: float | None = None  # per case; None: the suite's `timeout`
    inject: frozenset[str] = frozenset()  # run-wide faults; the pipeline adds them to Case.inject
    adapter: str | None = None  # wgpu: adapter name or backend type
    chromium: str | None = None  # ort-web: browser executable


@dataclass(frozen=True)
class Diagnosis:
    """One thing `doctor` checks (a descriptor's ``diagnose`` returns a list)."""

    check: str
    ok: bool
    detail: str  # what was found, or what is wrong
    fix: str = ""  # how to fix it, where it is not ok


def case_timeout(case: Case, options: BackendOptions) -> float:
    return options.timeout_s or case.suite.timeout_s


class Backend(Protocol):
    """What a descriptor's ``factory`` builds from ``BackendOptions``."""

    name: str

    def environment(self) -> dict[str, Any]:
        """Versions and adapter info for ``run.json``."""

    def run(self, case: Case, workload: Workload) -> BackendRun:
        """Run one case (``case.runs`` times); never raises for a case's own failure."""

    def close(self) -> None:
        """Release the device, browser and server."""


def resolve(reference: str) -> Any:
    """The object a ``"module:attribute"`` reference names, importing its module."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class BackendDescriptor:
    """Every fact about one backend that code outside its package needs.

    A suite entry (``wgpu``, or ``{name: ort-web, bundle: [jsep, webgpu]}``) expands into one
    ``BackendTarget`` per build; ``--backend NAME[:BUILD]`` names the same targets.
    """

    name: str
    summary: str  # what runs, in a line (doctor, --help)
    factory: str  # "module:attribute" of a callable taking BackendOptions, returning a Backend
    diagnose: str  # "module:attribute" of a callable returning list[Diagnosis] (doctor)
    # "module:attribute" of a callable returning {component: version} of what the backend would
    # run, read without opening it (run.json); it must not import wgpu or Playwright.
    versions: str
    # Builds a suite entry's `bundle:` may name; all of them when it names none.
    builds: tuple[str, ...] = ()
    # Element types the backend holds, as ORT-web spells them (float32, int64...); None: all.
    element_types: frozenset[str] | None = None
    # What ORT-web op tests' `platformCondition` regexes are matched against, before the OS:
    # the browser name platform.js would report, or the runtime standing in for one.
    runtime: str = ""
    faults: Mapping[str, str] = field(default_factory=dict)  # name -> what it does (--inject)
    # Run in a child process (runner.backends.isolated): a native crash fails one case only.
    isolated: bool = False

    def installed(self) -> dict[str, str | None]:
        """What the backend would run (``versions``), read without opening it."""
        return resolve(self.versions)()

    def checks(self) -> list[Diagnosis]:
        """What ``doctor`` says about this machine for this backend (``diagnose``)."""
        return resolve(self.diagnose)()

    def targets(self, entry: Mapping[str, Any]) -> tuple[BackendTarget, ...]:
        """The targets a suite's ``backends:`` entry (validated by the schema) expands into."""
        builds = entry.get("bundle", self.builds)
        builds = [builds] if isinstance(builds, str) else builds
        adapter = entry.get("adapter")
        return tuple(BackendTarget(self.name, build, adapter) for build in builds) or (
            BackendTarget(self.name, adapter=adapter),
        )

    def parse(self, text: str) -> tuple[BackendTarget, ...]:
        """The targets ``--backend NAME[:BUILD]`` names; InvalidInput for an unknown build."""
        _, _, build = text.partition(":")
        if build and build not in self.builds:
            expected = f"one of {', '.join(self.builds)}" if self.builds else "no build"
            raise InvalidInput(
                f"--backend {text!r}: {self.name} has no build {build!r}; expected {expected}"
            )
        return self.targets({"bundle": build} if build else {})
