"""The one protocol every backend implements, the values a backend returns, and the descriptor
that says everything else about a backend.

A backend is opened once per run (one device, one browser), runs the work it is given in order
through its one entry point, ``run(work)``: a matrix case (``CaseWork``) or a scenario's steps
(``ScenarioWork``), and is closed at the end. It never judges: it reports what happened, the
judge decides.

A ``BackendDescriptor`` holds what the rest of the runner needs to know about a backend before
it opens one: how a suite's ``backends:`` entry expands into targets, its element types and
platform for op-test skips, its faults, its ``doctor`` checks and where its implementation
lives. Each backend package declares one; ``runner.backends`` registers them. Descriptors are
plain data (implementations are named as ``"module:attribute"`` and imported on use), so
reading one imports neither wgpu nor Playwright.
"""

from __future__ import annotations

import dataclasses
import importlib
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from runner.errors import InvalidInput, Problem
from runner.scenario.values import ScenarioRun
from runner.schedule import Feed
from runner.suite.scenarios import Scenario
from runner.suite.spec import BackendTarget, TargetProblem

if TYPE_CHECKING:  # annotations only: the matrix and workloads are built before any backend
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

    @classmethod
    def of_runs(cls, session_ms: float, times: Sequence[float]) -> Timings:
        """From each run's milliseconds, first run first."""
        later = statistics.median(times[1:]) if len(times) > 1 else None
        return cls(session_ms, times[0] if times else None, later, len(times))


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
    # Replays that executed the model again, where the backend can tell a replay from a run
    # without counting WebGPU calls (ort-native: onnxruntime logged no replay of the graph).
    replay_reruns: int = 0
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
            "replay_reruns": self.replay_reruns,
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
    # The WebGPU adapter that ran it, as the backend's own process found it (not as asked for);
    # None where none did (a skip, the CPU)
    adapter: str | None = None

    @property
    def outputs(self) -> Mapping[str, np.ndarray]:
        """The last run's outputs: under capture, a replay, which is what is under test."""
        return self.runs[-1] if self.runs else {}


def ran_on(run: BackendRun | ScenarioRun, adapter: str | None) -> BackendRun | ScenarioRun:
    """`run` naming the adapter it ran on; a skip ran on none."""
    return run if run.status == "skipped" else dataclasses.replace(run, adapter=adapter)


@dataclass(frozen=True)
class BackendOptions:
    # Rounds per case: the pipeline materializes an input sequence of this many (new inputs each
    # round, the last repeating the one before); the first records (under capture).
    runs: int = 3
    timeout_s: float | None = None  # per case; None: the suite's `timeout`
    inject: frozenset[str] = frozenset()  # run-wide faults; the pipeline adds them to Case.inject
    adapter: str | None = None  # wgpu: adapter name or backend type
    chromium: str | None = None  # ort-web: browser executable
    # Each layout-change sequence on a new onnxruntime-web instance in its page (ort-web:
    # sharing only what devicepool.js compiled; wgpu gives every sequence a device of its own
    # anyway), so that what it gives depends on its own cases only: explore's examples. A run
    # keeps one page per build and one instance across sequences, which makes many suites fast.
    fresh_sequences: bool = False

    @property
    def on_cpu(self) -> bool:
        """``--adapter cpu``: the backends driving onnxruntime run its CPU EP (no capture)."""
        return (self.adapter or "").lower() == "cpu"


@dataclass(frozen=True)
class Diagnosis:
    """One thing `doctor` checks (a descriptor's ``diagnose`` returns a list)."""

    check: str
    ok: bool
    detail: str  # what was found, or what is wrong
    fix: str = ""  # how to fix it, where it is not ok
    skips: bool = False  # not ok only skips the backend's cases: the machine is still usable


@dataclass(frozen=True)
class ReproRequest:
    """What a backend's ``repro`` writer gets: the bundle folder, holding the models and
    tensors; ``repro.json`` there (written last) says which sessions to create, in which order,
    with which models, inputs and expected outputs."""

    folder: Path
    target: BackendTarget  # backend, build and exact version the result ran
    faults: frozenset[str]  # injected faults the bundle carries (``--with-fault``), else none
    local: bool  # copy the backend's runtime into the folder, so that it runs offline
    environment: Mapping[str, Any]  # what the run recorded about this backend (run.json)


@dataclass(frozen=True)
class ReproRunner:
    """What a ``repro`` writer added to the bundle, and how ISSUE.md tells a reader to run it."""

    product: str  # what it runs, for the title ("onnxruntime-web 1.30.0, ort.mjs")
    files: tuple[str, ...]  # written, relative to the folder
    steps: tuple[str, ...]  # how to run it, one Markdown list item each
    versions: tuple[tuple[str, str], ...]  # (component, version) as ISSUE.md lists them
    uses_project: bool = False  # running it imports this repository (wgpu's executor)


def case_timeout(case: Case, options: BackendOptions) -> float:
    return options.timeout_s or case.suite.timeout_s


@dataclass(frozen=True)
class CaseWork:
    """A matrix case to run: a session of its own (or the one its revisit comes back to), run
    once per input of the workload's schedule; reported as a ``BackendRun``.

    Its place in its layout-change sequence: the first case opens it (nothing an earlier
    sequence left may serve it: its sessions are released, its device or instance replaced
    where the backend keeps one a sequence), the last closes it (what the sequence made can
    go). A case run on its own is a sequence of its own; a sequence whose last case never
    reaches the backend (a skip) ends where the next one opens."""

    case: Case
    workload: Workload  # the model variant and every run's inputs
    opens_sequence: bool = True
    closes_sequence: bool = True

    @property
    def target(self) -> BackendTarget:
        return self.case.backend

    def timeout_s(self, options: BackendOptions) -> float:
        return case_timeout(self.case, options)

    def unrun(self, status: str, message: str) -> BackendRun:
        """What the work reports when the backend could not finish it."""
        return BackendRun(status=status, message=message)


@dataclass(frozen=True)
class ScenarioWork:
    """A scenario's steps to run on one device: sessions created, run, released in the order
    the steps say; reported as a ``ScenarioRun``. A backend that cannot do a step reports
    ``skipped`` with the reason, before running anything."""

    scenario: Scenario
    target: BackendTarget
    workload: Workload  # the model at the scenario's shape, every run's inputs (its variants)
    feeds: tuple[Feed | None, ...]  # per step: a run's graph and inputs; None for other steps
    inject: frozenset[str] = frozenset()
    timeout: float = 120.0

    def timeout_s(self, options: BackendOptions) -> float:
        return self.timeout

    def unrun(self, status: str, message: str) -> ScenarioRun:
        return ScenarioRun(status, message)


Work = CaseWork | ScenarioWork


class Backend(Protocol):
    """What a descriptor's ``factory`` builds from ``BackendOptions``."""

    name: str

    def environment(self) -> dict[str, Any]:
        """Versions and adapter info for ``run.json``."""

    def run(self, work: Work) -> BackendRun | ScenarioRun:
        """Run one case (a ``BackendRun``) or scenario (a ``ScenarioRun``, for a backend whose
        descriptor lists ``scenario_actions``); never raises for the work's own failure."""

    def close(self) -> None:
        """Release the device, browser and server."""


class ProcessDeviceBackend(Backend, Protocol):
    """A backend whose device, and every program compiled on it, lives as long as a process
    (its descriptor's ``programs_per_process``): what earlier work compiled may serve later
    work, so a failure is confirmed on a renewed one before it counts (``explore``)."""

    def renew(self) -> None:
        """A new process: nothing earlier work compiled or cached is left."""


def resolve(reference: str) -> Any:
    """The object a ``"module:attribute"`` reference names, importing its module."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class ResolvedVersion:
    """What a declared version (``1.29.0``, ``dev``, a folder) names now."""

    exact: str  # what runs and what results record
    label: str  # how case ids name it when several versions are in play: the declared text
    note: str = ""  # how it was resolved, when that is not obvious ("dev is 1.31.0-dev...")


class VersionProblem(ValueError):
    """A declared version that names nothing; the message says what exists instead."""

    def __init__(self, message: str, expected: str):
        super().__init__(message)
        self.expected = expected


class VersionHistory(Protocol):
    """A backend's published versions, as ``bisect`` needs them."""

    def between(self, older: str, newer: str) -> list[str]:
        """Every published version from `older` to `newer`, both included, oldest first."""

    def commit(self, version: str) -> str | None:
        """The upstream commit a version was built from, where it says."""

    def compare_url(self, older: str, newer: str) -> str:
        """Where to read what changed upstream between two versions."""


@dataclass(frozen=True)
class BackendDescriptor:
    """Every fact about one backend that code outside its package needs.

    A suite entry (``wgpu``, or ``{name: ort-web, version: [1.24.3, dev], bundle: jsep}``)
    expands into one ``BackendTarget`` per version and build; ``--backend NAME[:BUILD]`` names
    the same targets, and ``--NAME-version`` replaces the versions.
    """

    name: str
    summary: str  # what runs, in a line (doctor, --help)
    factory: str  # "module:attribute" of a callable taking BackendOptions, returning a Backend
    diagnose: str  # "module:attribute" of a callable returning list[Diagnosis] (doctor)
    # "module:attribute" of a callable taking the run's targets of this backend and a callable
    # for progress lines, called once per run before the backend opens: it installs what the
    # targets need and returns what they will run ({component: version}, for run.json). It
    # must not import wgpu or Playwright.
    prepare: str
    # Builds a suite entry's `bundle:` may name; all of them when it names none.
    builds: tuple[str, ...] = ()
    # "module:attribute" of a callable (text, folder of the suite) -> ResolvedVersion, raising
    # VersionProblem for a version that names nothing; it may ask a registry (EnvironmentUnusable
    # when it cannot). None: no versions.
    versions: str | None = None
    # "module:attribute" of a callable (text, folder of the suite) -> the ResolvedVersion where
    # files alone say (the default, a build folder, an installed version), else None; raising
    # VersionProblem for text that cannot name a version. What loading a suite uses: it never
    # asks a registry.
    offline_versions: str | None = None
    # "module:attribute" of a callable returning the VersionHistory that `bisect` walks.
    version_history: str | None = None
    # Element types the backend holds, as ORT-web spells them (float32, int64...); None: all.
    element_types: frozenset[str] | None = None
    # What ORT-web op tests' `platformCondition` regexes are matched against, before the OS:
    # the browser name platform.js would report, or the runtime standing in for one.
    runtime: str = ""
    faults: Mapping[str, str] = field(default_factory=dict)  # name -> what it does (--inject)
    # Run in a child process (runner.backends.isolated): a native crash fails one case only.
    isolated: bool = False
    # "module:attribute" of a callable taking a ReproRequest and returning the ReproRunner it
    # wrote into the bundle (``python -m runner repro``); None: no repro bundles.
    repro: str | None = None
    # The scenario steps it runs (of runner.scenario.values.ACTIONS); (): no scenarios. The step
    # skips a scenario with any other step, saying so (runner.skips); `explore` draws only these.
    scenario_actions: tuple[str, ...] = ()
    # Its device and program cache live as long as its process (a ``ProcessDeviceBackend``):
    # explore reruns a failing example on a renewed one, and counts it only if it fails there.
    programs_per_process: bool = False
    # Its sessions take the EP option preferredLayout (a layout's `preferred_layout`): the
    # others skip such a case (runner.skips), and explore draws that layout only here.
    preferred_layouts: bool = False

    def checks(self) -> list[Diagnosis]:
        """What ``doctor`` says about this machine for this backend (``diagnose``)."""
        return resolve(self.diagnose)()

    def prepared(self, targets: Sequence[BackendTarget], say: Callable[[str], None]) -> dict:
        """Install what `targets` need; what they will run (``prepare``)."""
        return resolve(self.prepare)(targets, say)

    def history(self) -> VersionHistory:
        """Published versions in order, for ``bisect``; InvalidInput if there are none."""
        if self.version_history is None:
            raise InvalidInput(f"{self.name} has no versions to bisect")
        return resolve(self.version_history)()

    def resolve_version(self, text: str | None, base: Path) -> ResolvedVersion | None:
        """What a declared version names (None: the default one; None without versions).
        Raises VersionProblem saying what exists, or EnvironmentUnusable."""
        if self.versions is None:
            if text is not None:
                raise VersionProblem(f"{self.name} has no versions", "no `version:`")
            return None
        return resolve(self.versions)(text, base)

    def targets(self, entry: Mapping[str, Any], base: Path) -> tuple[BackendTarget, ...]:
        """The targets a suite's ``backends:`` entry (validated by the schema) expands into,
        from files alone: a version only a registry can resolve is left unresolved (see
        ``resolved``); folders are relative to `base`, the suite's folder. Raises
        TargetProblem."""
        declared = entry.get("version")
        declared = [declared] if isinstance(declared, str) or declared is None else declared
        versions: list[tuple[str | None, ResolvedVersion | None]] = []
        problems = []
        for i, text in enumerate(declared):
            where = ("version",) if isinstance(entry.get("version"), str) else ("version", i)
            try:
                found = self._offline_version(text, base)
            except VersionProblem as problem:
                problems.append((where, str(problem), problem.expected))
                continue
            exact = {v.exact for _, v in versions if v}
            if text in {t for t, _ in versions} or (found and found.exact in exact):
                message = f"{text} names a version the list names already"
                problems.append((where, message, "distinct versions"))
                continue
            versions.append((text, found))
        if problems:
            raise TargetProblem(problems)
        builds = entry.get("bundle", self.builds)
        builds = [builds] if isinstance(builds, str) else list(builds) or [None]
        return tuple(
            BackendTarget(
                self.name,
                build,
                entry.get("adapter"),
                found.exact if found else None,
                declared=None if text is None else found.label if found else text,
            )
            for text, found in versions
            for build in builds
        )

    def _offline_version(self, text: str | None, base: Path) -> ResolvedVersion | None:
        if self.offline_versions is None:
            return self.resolve_version(text, base)
        return resolve(self.offline_versions)(text, base)

    def unresolved(self, target: BackendTarget) -> bool:
        """Whether `target`'s exact version is still to be asked of the registry."""
        return self.versions is not None and target.version is None

    def resolved(self, target: BackendTarget) -> BackendTarget:
        """`target` with its exact version, asking the registry where it must. Raises
        InvalidInput (at the suite's line) for a version that names nothing, or
        EnvironmentUnusable when the registry cannot be asked."""
        if not self.unresolved(target):
            return target
        try:
            found = self.resolve_version(target.declared, Path.cwd())
        except VersionProblem as problem:
            if target.source is None:
                raise InvalidInput(
                    f"--{self.name}-version {target.declared}: {problem}; "
                    f"expected {problem.expected}"
                ) from None
            where = target.source
            raise InvalidInput(
                Problem(where.file, where.line, where.column, str(problem), problem.expected)
            ) from None
        return dataclasses.replace(target, version=found.exact)

    def parse(self, text: str) -> tuple[BackendTarget, ...]:
        """The targets ``--backend NAME[:BUILD]`` names; InvalidInput for an unknown build."""
        _, _, build = text.partition(":")
        if build and build not in self.builds:
            expected = f"one of {', '.join(self.builds)}" if self.builds else "no build"
            raise InvalidInput(
                f"--backend {text!r}: {self.name} has no build {build!r}; expected {expected}"
            )
        return self.targets({"bundle": build} if build else {}, Path.cwd())

    def with_versions(
        self, targets: Sequence[BackendTarget], texts: Sequence[str]
    ) -> tuple[BackendTarget, ...]:
        """`targets` of this backend on each of the versions `texts` names instead of their own
        (``--NAME-version``); others as they are. Raises InvalidInput."""
        try:  # one target per version, the build left out: each target keeps its own
            swapped = self.targets({"version": list(texts), "bundle": []}, Path.cwd())
        except TargetProblem as problem:
            raise InvalidInput(f"--{self.name}-version: {problem}") from None
        replaced = []
        for target in targets:
            if target.name != self.name:
                replaced.append(target)
                continue
            replaced += [
                dataclasses.replace(target, version=v.version, declared=v.declared, source=None)
                for v in swapped
            ]
        return tuple(dict.fromkeys(replaced))
