"""Issue 7 on the ort-web backend, with real Chromium and onnxruntime-web: a renderer, the GPU
process (WebGPU device loss) or the whole browser killed mid-case fails that case alone, with
the reason, and the run goes on in a fresh page or browser; SIGTERM and Ctrl-C keep finished
results, mark the run incomplete and leave no browser or server behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import threading
from pathlib import Path

import pytest

from runner import pipeline
from runner.backends import REGISTRY
from runner.backends.base import BackendOptions
from runner.backends.ortweb.browser import descendant_pids
from runner.backends.ortweb.package import pinned_version
from runner.listeners import RunListener
from runner.matrix import expand_matrix
from runner.pipeline import execute
from runner.selection import RunPlan
from runner.suite.loader import load_suite

from .conftest import REPO, regress, run_until_results

pytestmark = pytest.mark.browser

# "slow" takes a few seconds on SwiftShader, time enough to kill something while it runs.
CRASH_SUITE = """
name: ortweb-crash
models:
  before: {builtin: encoder, layers: 1, hidden: 32, heads: 4, ffn: 64}
  slow: {builtin: encoder, layers: 4, hidden: 256, heads: 4, ffn: 1024}
  after: {builtin: encoder, layers: 1, hidden: 32, heads: 2, ffn: 64}
shapes:
  - {batch: 1, sequence: 64}
backends:
  - {name: ort-web, bundle: webgpu}
capture: [eager]
"""
KILL_AFTER_S = 1.0  # into the slow case: its session and first run take about 2 s here


def chromium_processes(root: int, kind: str) -> list[int]:
    """Live Chromium processes under ``root``: kind "browser" (the main one) or a --type."""
    found = []
    for pid in descendant_pids(root):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"chrom" not in cmdline or state == "Z":
            continue
        process_type = b"--type=" + kind.encode()
        if process_type in cmdline or (kind == "browser" and b"--type=" not in cmdline):
            found.append(pid)
    return found


def run_breaking(write_suite, out: Path, break_slow_case, suite: str = CRASH_SUITE) -> str:
    """Run ``suite``, calling ``break_slow_case()`` as the slow case starts; checks that only
    that case failed, in the results and the history; returns its message."""
    cases = expand_matrix([load_suite(write_suite(suite), REGISTRY)])
    assert [c.model.name for c in cases] == ["before", "slow", "after"]

    class BreakSlowCase(RunListener):
        def on_start(self, case) -> None:
            if case.model.name == "slow":
                break_slow_case()

    summary = execute(RunPlan(tuple(cases)), out, BackendOptions(runs=2), listener=BreakSlowCase())
    verdicts = {r.case_id.split("/")[0]: r for r in summary.results}
    assert summary.status == "complete"
    assert [verdicts[m].verdict for m in ("before", "slow", "after")] == ["pass", "error", "pass"]
    [run_dir] = (out / "runs").iterdir()
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["verdict"] for r in lines] == ["pass", "error", "pass"]
    assert history_rows(out) == [(r["case_id"], r["verdict"]) for r in lines]
    return verdicts["slow"].message


def run_killing(write_suite, out: Path, kind: str) -> str:
    """Run CRASH_SUITE, killing Chromium's ``kind`` process(es) while the slow case runs."""
    killed: list[int] = []

    def kill() -> None:
        for pid in chromium_processes(os.getpid(), kind):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    message = run_breaking(write_suite, out, threading.Timer(KILL_AFTER_S, kill).start)
    assert killed, f"no {kind} process to kill"
    return message


def history_rows(out: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(out / "history.sqlite") as db:
        return db.execute("SELECT case_id, verdict FROM results ORDER BY rowid").fetchall()


def test_a_renderer_killed_mid_case_fails_that_case_and_the_page_reloads(write_suite, tmp_path):
    message = run_killing(write_suite, tmp_path, "renderer")
    assert "crashed" in message, message


def test_the_gpu_process_killed_mid_case_is_a_device_loss_and_the_run_goes_on(
    write_suite, tmp_path
):
    message = run_killing(write_suite, tmp_path, "gpu-process")
    assert message.startswith("WebGPU device lost"), message


def test_the_browser_killed_mid_case_fails_that_case_and_a_new_browser_runs_on(
    write_suite, tmp_path
):
    message = run_killing(write_suite, tmp_path, "browser")
    assert "closed" in message, message
    assert not chromium_processes(os.getpid(), "browser")  # the relaunched one closed too


def test_onnxruntime_webs_device_destroyed_fails_that_case_and_the_page_reloads(
    write_suite, tmp_path, monkeypatch
):
    """Destroyed under JSEP between cases (JSEP keeps one device per page), the device fails
    the next case (capture reads its outputs back from it) and would fail every later one in
    that page: the page reloads. (The C++ EP builds make a new device for the next session.)"""
    opened, open_backend = [], pipeline.open_backend

    def open_and_keep(name, options):
        opened.append(open_backend(name, options))
        return opened[-1]

    def destroy() -> None:
        [backend] = opened
        page = backend._loaded_page(pinned_version(), "jsep")
        page._page.evaluate(
            "async url => (await import(url)).env.webgpu.device.destroy()",
            backend._server.url(page._module),
        )

    monkeypatch.setattr(pipeline, "open_backend", open_and_keep)
    captured = CRASH_SUITE.replace("capture: [eager]", "capture: [capture]").replace(
        "bundle: webgpu", "bundle: jsep"
    )
    message = run_breaking(write_suite, tmp_path, destroy, captured)
    assert message.startswith("WebGPU device lost (onnxruntime-web's device was destroyed)")


# 20 cases: 10 shapes, eager and capture.
INTERRUPT_SUITE = """
name: ortweb-interrupt
models:
  enc: {builtin: encoder, layers: 1, hidden: 32, heads: 4, ffn: 64}
backends:
  - {name: ort-web, bundle: webgpu}
shapes:
""" + "\n".join(f"  - {{batch: 1, sequence: {4 + i}}}" for i in range(10))


def listening_ports(pid: int) -> set[int]:
    """TCP ports that process ``pid`` listens on (its sockets matched in /proc/net/tcp)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
            ports.add(int(fields[1].split(":")[1], 16))
    return ports


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_an_interrupted_run_keeps_its_results_and_leaves_nothing_running(
    write_suite, tmp_path, how
):
    out = tmp_path / "out"
    # its own process group: Ctrl-C reaches the runner, Playwright's driver and Chromium at once
    proc = run_until_results(write_suite(INTERRUPT_SUITE), out)
    children = descendant_pids(proc.pid)
    ports = listening_ports(proc.pid)
    assert chromium_processes(proc.pid, "browser") and ports, "the run is not in the browser yet"
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)

    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    [run_dir] = (out / "runs").iterdir()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "incomplete" and run["ended"] and run["cases"] == 20
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert 3 <= len(lines) < 20
    assert history_rows(out) == [(r["case_id"], r["verdict"]) for r in lines]
    assert all(r["verdict"] == "pass" for r in lines), [r["message"] for r in lines]
    report = regress("report", "--out", out, timeout=120)
    assert report.returncode == 0, report.stderr
    assert (out / "index.html").is_file()

    alive = [pid for pid in children if _alive(pid)]
    assert not alive, f"left running: {[_cmdline(pid) for pid in alive]}"
    for port in ports:
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still open"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return "?"


def test_a_kernel_that_throws_leaves_the_next_case_a_new_instance(write_suite, tmp_path):
    """JSEP refuses every kernel after one that threw ("is not allowed to be called
    recursively"): after a case errors, or a kernel refuses its attributes as it runs (an
    op the build does not run: unsupported-op, not a crash), the next runs on a new
    onnxruntime-web instance."""
    suite = write_suite(
        """
name: errors-then-passes
models:
  ceil-pool: {path: averagepool-ceil-pad-opset18.onnx}
  after: {builtin: encoder, layers: 1, hidden: 32, heads: 2, ffn: 64}
shapes: [{batch: 1, sequence: 4}]
backends:
  - {name: ort-web, bundle: jsep}
capture: [eager]
"""
    )
    pool = REPO / "suites" / "bugs" / "upstream" / "models" / "averagepool-ceil-pad-opset18.onnx"
    shutil.copy(pool, suite.parent)
    cases = expand_matrix([load_suite(suite, REGISTRY)])
    summary = execute(RunPlan(tuple(cases)), tmp_path / "out", BackendOptions(runs=1))
    verdicts = {r.case_id.split("/")[0]: r for r in summary.results}
    assert verdicts["ceil-pool"].verdict == "unsupported-op"
    assert "not yet implemented" in verdicts["ceil-pool"].message  # JSEP pools without ceil_mode
    assert verdicts["after"].verdict == "pass", verdicts["after"].message
