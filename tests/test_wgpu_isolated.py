"""The wgpu backend runs in a child process: a native crash or a hang fails one case, the
backend restarts on a fresh device, and the run goes on."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from runner.backends import REGISTRY, open_backend
from runner.backends.base import BackendOptions, CaseWork
from runner.matrix import expand_matrix
from runner.suite import load_suite
from runner.workload import materialize

from .conftest import run_until_results

pytestmark = pytest.mark.gpu

SUITE = """
models:
  enc: {builtin: encoder, layers: 1, hidden: 32, heads: 4, ffn: 64}
  big: {builtin: encoder, layers: 6, hidden: 256, heads: 4, ffn: 1024}
shapes:
  - {batch: 1, sequence: 256}
backends: [wgpu]
capture: [capture]
"""


@pytest.fixture
def cases(write_suite):
    return {
        case.model.name: case for case in expand_matrix([load_suite(write_suite(SUITE), REGISTRY)])
    }


def test_a_child_killed_mid_case_fails_that_case_and_restarts(cases):
    backend = open_backend("wgpu", BackendOptions(runs=3))
    try:
        assert backend.run(CaseWork(cases["enc"], materialize(cases["enc"]))).status == "ok"
        first_child = backend._child.pid
        killer = threading.Timer(0.5, os.kill, (first_child, signal.SIGKILL))
        killer.start()
        began = time.monotonic()
        crashed = backend.run(CaseWork(cases["big"], materialize(cases["big"])))
        killer.join()
        assert crashed.status == "error", crashed.message
        assert f"process died (exit status -{int(signal.SIGKILL)})" in crashed.message
        assert time.monotonic() - began < 60
        assert backend._child.pid != first_child
        after = backend.run(CaseWork(cases["enc"], materialize(cases["enc"])))
        assert after.status == "ok" and after.timings.runs == 3
        assert backend.environment()["isolated"] is True
    finally:
        backend.close()
    assert backend._child is None


def test_a_hung_child_is_a_timeout_and_is_replaced(cases, monkeypatch):
    monkeypatch.setattr("runner.backends.isolated.GRACE_S", 1.0)
    backend = open_backend("wgpu", BackendOptions(runs=3, timeout_s=2.0))
    try:
        backend.environment()  # booted: the hang comes mid-case
        stuck = backend._child.pid
        os.kill(stuck, signal.SIGSTOP)  # a native call that never returns looks like this
        hung = backend.run(CaseWork(cases["enc"], materialize(cases["enc"])))
        assert hung.status == "timeout" and "did not answer within 3 s" in hung.message
        assert backend.run(CaseWork(cases["enc"], materialize(cases["enc"]))).status == "ok"
    finally:
        backend.close()


def test_ctrl_c_stops_the_run_without_a_traceback_from_the_child(write_suite, tmp_path):
    """A terminal's Ctrl-C reaches the whole process group, the wgpu process too."""
    shapes = "\n".join(f"  - {{batch: 1, sequence: {8 + i}}}" for i in range(40))
    suite = write_suite(
        "models:\n  enc: {builtin: encoder, layers: 1, hidden: 32, heads: 4, ffn: 64}\n"
        f"backends: [wgpu]\nshapes:\n{shapes}\n"
    )
    out = tmp_path / "out"
    proc = run_until_results(suite, out)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    [run_dir] = (out / "runs").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "incomplete"
