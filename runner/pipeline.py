"""The run: each case and scenario stepped (``runner.step``) and stored, as the listeners are
told.

Cases arrive in matrix order and run as their layout-change sequences (``LayoutSequence``), each
stepped as a whole (``Step.sequence``: a capture case after its eager twin, later layouts after
earlier ones). Backends are opened once per run, results go to every store as each case
finishes, a run timeout stops the run between sequences, and the run ends with its record,
however it ends.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import secrets
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.backends import REGISTRY, open_backend
from runner.backends.base import Backend, BackendOptions
from runner.environment import base_environment
from runner.errors import EnvironmentUnusable, ExitCode, InvalidInput, Problem
from runner.history import CaseResult, RunFolder, RunRecord, RunStatus, SqliteHistory
from runner.listeners import RunListener, as_listener
from runner.matrix import Case, LayoutSequence, ScenarioTarget, layout_sequences
from runner.oracle import ReferenceCache
from runner.packages import ExportFailed, PackageMismatch, PackageUnavailable, materialize
from runner.selection import RunPlan
from runner.step import Step
from runner.verdicts import FAILING_OUTCOMES


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    status: RunStatus
    results: tuple[CaseResult, ...]
    references_computed: int
    message: str = ""
    interrupted: bool = False  # Ctrl-C / SIGTERM, as opposed to the run timeout

    @property
    def exit_code(self) -> ExitCode:
        if self.status == RunStatus.ENVIRONMENT_UNUSABLE:
            return ExitCode.ENVIRONMENT
        if self.interrupted:
            return ExitCode.INTERRUPTED
        if self.status == RunStatus.INCOMPLETE:  # the run timeout or --maxfail left cases unrun
            return ExitCode.UNEXPECTED
        if any(r.outcome in FAILING_OUTCOMES for r in self.results):
            return ExitCode.UNEXPECTED
        return ExitCode.OK


class _Interrupts:
    """Ctrl-C and SIGTERM stop a run as KeyboardInterrupt, but never between the stores: a
    result being recorded goes into every store first, so the run folder and the history agree.
    """

    def __init__(self) -> None:
        self._storing = False
        self._pending = False

    def _handler(self, signum, frame) -> None:
        if self._storing:
            self._pending = True
        else:
            raise KeyboardInterrupt

    @contextmanager
    def installed(self):
        signals = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self._handler) for sig in signals}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @contextmanager
    def deferred(self):
        self._storing = True
        try:
            yield
        finally:
            self._storing = False
            if self._pending:
                raise KeyboardInterrupt


def suites_digest(paths: Iterable[str]) -> str:
    """A fingerprint of the suites' contents, the same on every machine (paths left out)."""
    digests = sorted(hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths)
    return hashlib.sha256("".join(digests).encode()).hexdigest()[:16]


def fetch_packages(cases: Iterable[Case], say: Callable[[str], None]) -> bool:
    """Every model the cases take from a package, in the cache before the run starts (the
    first run downloads, later ones find it there); whether any was new. One that cannot be
    downloaded leaves its cases to skip, saying why here; one that is not what its suite states
    stops the run before it records anything (InvalidInput at the model's line)."""
    sources = {case.model.package: case for case in cases if case.model.package is not None}
    problems, fetched = [], False
    for source, case in sources.items():
        try:
            fetched |= not source.cached.is_file()
            materialize(source, say)
        except PackageUnavailable as exc:
            say(f"{exc}; the cases of model {case.model.name!r} are skipped")
        except PackageMismatch as exc:
            line = case.model.line or 1
            problems.append(
                Problem(
                    case.suite.path,
                    line,
                    1,
                    f"model {case.model.name!r}: {exc}",
                    f"a file that `export: {source.export}` converts"
                    if isinstance(exc, ExportFailed)
                    else "`package:` naming a file its wheel holds, with that file's sha256",
                )
            )
    if problems:
        raise InvalidInput(problems)
    return fetched


class _Stopped(Exception):
    """The run stops before its end (its timeout, its maxfail); the message says why."""


@dataclass(frozen=True)
class RunSettings:
    """How a run steps its plan, past what each backend is told (``BackendOptions``)."""

    localize: bool = True  # a failing case's first divergent node found (a rerun of it)
    run_timeout_s: float | None = None  # past it, no further sequence or scenario starts
    maxfail: int | None = None  # once this many results were unexpected, no further case does


def execute(
    plan: RunPlan,
    out: Path,
    options: BackendOptions,
    settings: RunSettings = RunSettings(),
    listener: RunListener | Iterable[RunListener] | None = None,
) -> RunSummary:
    """Run `plan`, storing each result as it finishes under `out` (see reports/README.md), the
    plan's selection recorded with the run. A run stopped by `settings` is marked incomplete.
    `listener` (one, several or none; ``runner.listeners``) hears of each case started and
    stored, each backend opened, and the notes of each backend preparing what its cases need
    (installing versions). Scenarios run after the cases, on the same backends, and are stored,
    timed out and counted against ``maxfail`` as cases are.
    """
    listener = as_listener(listener)
    cases, scenarios = plan.cases, plan.scenarios
    run_timeout_s, maxfail = settings.run_timeout_s, settings.maxfail
    run_id = new_run_id()
    suites = sorted(
        {str(case.suite.path) for case in cases} | {str(s.suite.path) for s in scenarios}
    )
    targets_of_run = [case.backend for case in cases] + [s.target for s in scenarios]
    names = list(dict.fromkeys(target.name for target in targets_of_run))
    environment = base_environment([Path(s) for s in suites])
    run = RunRecord(
        run_id=run_id,
        started=_now(),
        cases=len(cases) + len(scenarios),
        suites=suites,
        suites_digest=suites_digest(suites),
        selection=dict(plan.selection),
        options={"runs": options.runs, "inject": sorted(options.inject)},
        environment=environment,
    )
    history = SqliteHistory(out / "history.sqlite")
    stores = (RunFolder(out / "runs" / run_id), history)
    oracle = ReferenceCache(out / ".oracle")
    backends: dict[str, Backend] = {}
    environments: dict[str, dict[str, Any]] = {}
    results: list[CaseResult] = []
    failed = 0  # unexpected results so far, against `maxfail`
    status, message, interrupted = RunStatus.COMPLETE, "", False
    for store in stores:
        store.begin_run(run)
    step = Step(oracle.references, options, settings.localize)
    deadline = time.monotonic() + run_timeout_s if run_timeout_s else None
    try:
        with _Interrupts().installed() as interrupts, ExitStack() as closing:
            for name in names:
                targets = list(dict.fromkeys(t for t in targets_of_run if t.name == name))
                environment.update(REGISTRY[name].prepared(targets, listener.on_note))
            # All opened first, so that one booting in the background (wgpu's process) does so
            # while another runs cases; each one's environment is recorded once it has run one.
            for name in names:
                began = time.perf_counter()
                backends[name] = open_backend(name, options)
                closing.callback(backends[name].close)
                listener.on_backend(name, time.perf_counter() - began)

            def used(name: str) -> Backend:
                """The open backend `name`; its environment is recorded once it has run a case
                or a scenario."""
                if name not in environments:
                    environments[name] = {}
                    # callbacks run last-in first-out: read the environment before closing
                    closing.callback(_record_environment, environments, name, backends[name])
                return backends[name]

            def run_sequence(sequence: LayoutSequence) -> Iterator[CaseResult]:
                backend = used(sequence.cases[0].backend.name)
                for stepped in step.sequence(sequence, backend, started=listener.on_start):
                    yield stepped.result(run_id)

            def run_scenario(item: ScenarioTarget) -> Iterator[CaseResult]:
                yield step.run(item, used(item.target.name)).result(run_id)

            injected = [dataclasses.replace(c, inject=c.inject | options.inject) for c in cases]
            units = [functools.partial(run_sequence, s) for s in layout_sequences(injected)]
            units += [functools.partial(run_scenario, item) for item in scenarios]
            total = len(cases) + len(scenarios)
            for unit in units:
                if deadline is not None and time.monotonic() > deadline:
                    left = total - len(results)
                    raise _Stopped(
                        f"run timeout: {run_timeout_s:g} s passed with {left} case(s) not run"
                    )
                for result in unit():
                    with interrupts.deferred():
                        for store in stores:
                            store.record(result)
                    results.append(result)
                    listener.on_result(result)
                    failed += result.outcome in FAILING_OUTCOMES
                    left = total - len(results)
                    if maxfail and failed >= maxfail and left:
                        raise _Stopped(
                            f"maxfail {maxfail} reached: stopped with {left} case(s) not run"
                        )
    except _Stopped as stopped:
        status, message = RunStatus.INCOMPLETE, str(stopped)
    except KeyboardInterrupt:
        status, message = RunStatus.INCOMPLETE, "interrupted; finished results are kept"
        interrupted = True
    except EnvironmentUnusable as exc:
        status, message = RunStatus.ENVIRONMENT_UNUSABLE, str(exc)
    finally:
        environment["backends"] = environments
        run = dataclasses.replace(
            run, ended=_now(), status=status, message=message, references_computed=oracle.computed
        )
        for store in stores:
            store.end_run(run)
        history.close()
    return RunSummary(run_id, status, tuple(results), oracle.computed, message, interrupted)


def _record_environment(into: dict[str, Any], name: str, backend: Backend) -> None:
    try:
        into[name] = backend.environment()
    except Exception as exc:  # a dead browser must not cost the run its record
        into[name] = {"error": f"{type(exc).__name__}: {exc}"}
