"""End to end through ``python -m runner`` on the reference backend: files, history, exit codes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import jsonschema
import pytest

from .conftest import REPO, regress

SUITE = """
name: e2e
models:
  enc: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}
  bert: {builtin: encoder, style: exported, layers: 1, hidden: 16, heads: 2, ffn: 32}
shapes:
  - {batch: 1, sequence: 8}
layouts:
  - [eps, heads]
  - label: big-eps
    values: {eps: 0.01}
backends: [reference]
"""


def test_run_records_every_case(write_suite, tmp_path, result_schema):
    suite = write_suite(SUITE)
    out = tmp_path / "reports"
    proc = regress("run", suite, "--out", out, "--runs", "2")
    assert proc.returncode == 0, proc.stderr
    [run_dir] = (out / "runs").iterdir()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and run["cases"] == 10  # 2 x (2 layouts x 2 modes + 1)
    assert run["references_computed"] == 8  # 2 models x 2 layouts x 2 runs of new inputs
    assert run["environment"]["onnxruntime"] and run["environment"]["backends"]["reference"]
    assert run["environment"]["suites_git"]["commit"] is None  # the suite repo has no commits
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == 10
    for record in records:
        jsonschema.validate(record, result_schema)
        assert record["verdict"] == "pass" and record["outcome"] == "expected"
        assert record["max_abs_error"] == 0.0 and record["timings"]["runs"] == 2
    assert records[0]["case_id"] == "enc/batch=1,sequence=8/layout=eps,heads/reference/eager"
    with sqlite3.connect(out / "history.sqlite") as db:
        rows = db.execute("SELECT case_id, verdict, run_id FROM results ORDER BY rowid").fetchall()
        assert [r[0] for r in rows] == [r["case_id"] for r in records]
        assert {r[2] for r in rows} == {run["run_id"]}
        assert db.execute("SELECT status FROM runs").fetchall() == [("complete",)]

    again = regress("run", suite, "--out", out, "--runs", "1", "--filter", "model=enc")
    assert again.returncode == 0, again.stderr
    assert "references computed: 0" in again.stderr
    with sqlite3.connect(out / "history.sqlite") as db:
        assert db.execute("SELECT count(*) FROM results").fetchone() == (15,)
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (2,)


def test_unexpected_pass_fails_the_run(write_suite, tmp_path):
    suite = write_suite(
        SUITE
        + """
cases:
  - match: {layout: big-eps, capture: capture, model: enc}
    bug: https://github.com/microsoft/onnxruntime/issues/29594
    expect: capture-mismatch
"""
    )
    proc = regress("run", suite, "--out", tmp_path / "r", "--runs", "1")
    assert proc.returncode == 1
    assert "unexpected-pass enc/batch=1,sequence=8/layout=big-eps/reference/capture" in proc.stderr


def test_list_filter_and_shard(write_suite):
    suite = write_suite(SUITE)
    listed = regress("list", suite, "--filter", "capture=capture").stdout.split()
    assert listed == [
        "enc/batch=1,sequence=8/layout=eps,heads/reference/capture",
        "enc/batch=1,sequence=8/layout=big-eps/reference/capture",
        "enc/batch=1,sequence=8/layout=eps,heads/reference/capture-revisit",
        "bert/batch=1,sequence=8/layout=eps,heads/reference/capture",
        "bert/batch=1,sequence=8/layout=big-eps/reference/capture",
        "bert/batch=1,sequence=8/layout=eps,heads/reference/capture-revisit",
    ]
    one = regress("list", suite, "--shard", "1/2").stdout.split()
    two = regress("list", suite, "--shard", "2/2").stdout.split()
    assert len(one) == len(two) == 5 and not set(one) & set(two)
    retargeted = regress("list", suite, "--backend", "ort-web:jspi", "--backend", "wgpu")
    assert len(retargeted.stdout.split()) == 20
    assert "enc/batch=1,sequence=8/layout=eps,heads/ort-web:jspi/eager" in retargeted.stdout


@pytest.mark.parametrize("command", ["validate", "list", "run"])
def test_invalid_input_exits_2_without_traceback(write_suite, command):
    suite = write_suite("models:\n  enc: {builtin: encoder, layers: -1}\nbackends: [wgpu]\n")
    proc = regress(command, suite)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"{suite}:2:35: -1 is less than the minimum of 1; expected a number >= 1"
    )
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard", "3/2"], "--shard '3/2': i must be between 1 and n"),
        (["--backend", "webgl"], "--backend 'webgl' is unknown"),
        (["--inject", "nope"], "--inject nope: no such fault for these backends"),
    ],
)
def test_bad_arguments_exit_2(write_suite, tmp_path, args, message):
    proc = regress("run", write_suite(SUITE), "--out", tmp_path, *args)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "history.sqlite").exists(), "nothing is written for bad input"


def test_validate_reports_counts(write_suite):
    proc = regress("validate", write_suite(SUITE))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok: 1 suite(s), 10 case(s)"


@pytest.mark.parametrize("command", ["validate", "list", "run", "report", "doctor"])
def test_every_command_has_help(command):
    proc = regress(command, "--help")
    assert proc.returncode == 0 and "usage:" in proc.stdout


@pytest.mark.browser
@pytest.mark.gpu
def test_doctor_reports_adapters_and_browser():
    proc = regress("doctor")
    assert proc.returncode == 0, proc.stderr
    for line in (
        "wgpu: default adapter:",
        "ort-web: chromium:",
        "ort-web: webgpu adapter:",
        "ort-web: onnxruntime-web: 1.30.0",
        "shape-only-capture-cache",
    ):
        assert line in proc.stderr


def test_doctor_says_how_to_fix_a_missing_browser():
    proc = regress("doctor", env={"REGRESS_CHROMIUM": "/nonexistent/chromium"}, timeout=300)
    assert proc.returncode == 3
    assert "missing ort-web: chromium" in proc.stderr and "fix:" in proc.stderr


def test_the_run_process_names_the_wgpu_backend_without_importing_wgpu():
    """Only wgpu's child process loads its native library; the parent still knows name and
    faults."""
    script = (
        "from runner.backends import REGISTRY\n"
        "from runner.backends.wgpu.backend import WgpuBackend\n"
        "from runner.backends.wgpu.faults import FAULTS\n"
        "assert REGISTRY['wgpu'].name == WgpuBackend.name\n"
        "assert REGISTRY['wgpu'].faults is FAULTS\n"
    )
    lean = "import sys, runner.backends, runner.cli\nprint('wgpu' in sys.modules)\n"
    subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True)
    imported = subprocess.run(
        [sys.executable, "-c", lean], cwd=REPO, check=True, capture_output=True, text=True
    )
    assert imported.stdout.strip() == "False"
