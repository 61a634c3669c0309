"""Run a backend in a child process, so that a native crash fails one case, not the run.

wgpu-native aborts the whole process on a Rust panic; inside a child process that is a dead
child: the case is recorded as `error` with the exit status, a fresh child (a fresh device)
takes the next case, and every earlier result stays. A child that does not answer within the
case's timeout is killed the same way. Within one child, the cases of a layout-change sequence
share one device (wgpu's backend opens one per sequence), so stale bindings between its layouts
stay observable. The child boots in the background:
opening the backend returns at once, and its first call waits for the boot.

Children are forked from a server process that has imported what every backend needs (numpy,
onnx, this module): a wgpu child then boots in about 0.6 s instead of 1.7 s, which a run or
an explore that renews its child per sequence pays each time. They are not forked from the
parent itself, which may run threads (Playwright's, a server's). A child starts from the
parent's environment, working folder and import path as they are when it starts, as a spawned
one would.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from runner.backends.base import BackendOptions, BackendRun, Work, resolve
from runner.errors import EnvironmentUnusable
from runner.scenario.values import ScenarioRun

GRACE_S = 10.0  # beyond the case timeout, which the backend enforces itself between runs
BOOT_TIMEOUT_S = 120.0


PRELOADED = ("runner.backends.isolated", "onnx")  # imported once, in the fork server


@functools.cache
def _context() -> multiprocessing.context.BaseContext:
    """Fork from the fork server where the platform has one, else spawn (set up once)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOADED))
    return context


@dataclass(frozen=True)
class _Surroundings:
    """What a child runs in: the parent's at the child's start, with its own additions."""

    path: tuple[str, ...]  # sys.path, a version's packages first
    environ: Mapping[str, str]  # os.environ, a Vulkan driver for this process alone added
    cwd: str

    def enter(self) -> None:
        sys.path[:] = self.path
        os.environ.clear()
        os.environ.update(self.environ)
        os.chdir(self.cwd)


def _serve(factory: str, options: BackendOptions, conn: Connection, around: _Surroundings) -> None:
    """The child: create the backend, then answer (method, args) requests until told to stop;
    the factory is imported once the child is in its surroundings."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it closes us
    around.enter()
    try:
        backend = resolve(factory)(options)
    except EnvironmentUnusable as unusable:
        conn.send(("unusable", str(unusable)))
        return
    conn.send(("ready", None))
    while True:
        method, args = conn.recv()
        if method == "close":
            backend.close()
            conn.send(("closed", None))
            return
        conn.send(("ok", getattr(backend, method)(*args)))


class IsolatedBackend:
    """A Backend whose work happens in a child process running `factory` ("module:attribute",
    called with the options); the parent never imports the factory's module."""

    def __init__(
        self,
        name: str,
        factory: str,
        options: BackendOptions,
        path: tuple[str, ...] = (),
        environ: Mapping[str, str] | None = None,
    ):
        self.name, self.factory, self.options, self.path = name, factory, options, path
        self.environ = dict(environ or {})
        self._context = _context()
        self._child: multiprocessing.Process | None = None
        self._conn: Connection | None = None
        self._start()

    def _start(self) -> None:
        """Start the child; it boots (imports, adapter, device) while the parent goes on."""
        self._conn, child_end = self._context.Pipe()
        around = _Surroundings((*self.path, *sys.path), {**os.environ, **self.environ}, os.getcwd())
        self._child = self._context.Process(
            target=_serve, args=(self.factory, self.options, child_end, around), daemon=True
        )
        self._child.start()
        child_end.close()
        self._booted = False

    def _ready(self) -> None:
        """Wait for the child's boot; raises EnvironmentUnusable if it cannot run here."""
        if self._booted:
            return
        status, detail = self._receive(timeout_s=BOOT_TIMEOUT_S)
        if status == "unusable":
            self._child.join()
            raise EnvironmentUnusable(detail)
        self._booted = True

    def _receive(self, timeout_s: float) -> tuple[str, Any]:
        if not self._conn.poll(timeout_s):
            raise TimeoutError(f"the {self.name} process did not answer within {timeout_s:g} s")
        return self._conn.recv()

    def _call(self, method: str, *args: Any, timeout_s: float = 120.0) -> Any:
        self._ready()
        self._conn.send((method, args))
        return self._receive(timeout_s)[1]

    def renew(self) -> None:
        """A new child: nothing the old one's device compiled or cached is left."""
        self._child.kill()
        self._child.join()
        self._conn.close()
        self._start()

    def environment(self) -> dict[str, Any]:
        return {**self._call("environment"), "isolated": True}

    def run(self, work: Work) -> BackendRun | ScenarioRun:
        try:
            return self._call("run", work, timeout_s=work.timeout_s(self.options) + GRACE_S)
        except TimeoutError as hung:
            self.renew()
            return work.unrun("timeout", f"{hung}; it was restarted")
        except (EOFError, OSError):  # the child died mid-run, e.g. a native panic
            self._child.join()
            code = self._child.exitcode
            self.renew()
            return work.unrun(
                "error", f"the {self.name} process died (exit status {code}); it was restarted"
            )

    def close(self) -> None:
        if self._child is None:
            return
        if not self._booted:  # never used: nothing to release in it
            self._child.kill()
        else:
            try:
                self._call("close", timeout_s=30.0)
            except (EOFError, OSError, TimeoutError):
                self._child.kill()
        self._child.join()
        self._conn.close()
        self._child = None
