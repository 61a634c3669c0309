"""End to end through ``python -m runner`` on the reference backend: files, history, exit codes."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from runner import cli

from .conftest import REPO, RESULT_VALIDATOR, regress

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


def test_run_records_every_case(write_suite, tmp_path):
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
        RESULT_VALIDATOR.validate(record)
        assert record["verdict"] == "pass" and record["outcome"] == "expected"
        assert record["max_abs_error"] == 0.0 and record["timings"]["runs"] == 2
    assert records[0]["case_id"] == "enc/batch=1,sequence=8/layout=eps,heads/reference/eager"
    assert {(r["model"], r["suite_line"]) for r in records} == {("enc", 3), ("bert", 4)}
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


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_command_has_help(command):
    """Its usage, and every option of it with a help text of its own (argparse keeps a
    command's parser among its subparsers' choices, as noxfile.py reads `run`'s)."""
    proc = regress(command, "--help")
    assert proc.returncode == 0 and proc.stdout.startswith(f"usage: regress {command} ")
    [commands] = cli.build_parser()._subparsers._group_actions
    for action in commands.choices[command]._actions:
        assert action.help, f"{command} {action.option_strings or action.dest}: no help text"
        for option in action.option_strings:
            assert re.search(rf"(^|[\s,]){re.escape(option)}\b", proc.stdout), option


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


def test_selecting_no_case_exits_5_and_writes_nothing(write_suite, tmp_path):
    out = tmp_path / "reports"
    proc = regress("run", write_suite(SUITE), "--out", out, "--filter", "model=nope")
    assert proc.returncode == 5
    assert proc.stderr.strip() == "no cases selected"
    assert not out.exists()


EXPECT_CAPTURE_MISMATCH = """
cases:
  - match: {model: enc, layout: big-eps, capture: capture}
    expect: capture-mismatch
"""
ENC = "enc/batch=1,sequence=8/layout={}/reference/{}"
LOG_LINE = re.compile(r"(?P<verdict>[a-z-]+) +(?P<case>\S+) (?P<seconds>\d+\.\d\d) s(?P<note>.*)")


def _log_lines(stdout: str) -> list[tuple[str, str, str]]:
    """(verdict, case id, note) of each case line; every line must be one (or a backend's)."""
    lines = []
    for line in stdout.splitlines():
        if line.startswith("opened "):
            assert re.fullmatch(r"opened reference in \d+\.\d\d s", line), line
            continue
        match = LOG_LINE.fullmatch(line)
        assert match, line
        lines.append((match["verdict"], match["case"], match["note"]))
    return lines


def test_a_log_gets_a_line_per_backend_and_per_case(write_suite, tmp_path):
    """stdout is a pipe here, as in CI: each line is written as its case finishes."""
    suite = write_suite(SUITE + EXPECT_CAPTURE_MISMATCH)
    proc = regress("run", suite, "--out", tmp_path, "--runs", "1", "--filter", "model=enc")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0].startswith("opened reference in ")
    assert _log_lines(proc.stdout) == [
        ("pass", ENC.format("eps,heads", "eager"), ""),
        ("pass", ENC.format("eps,heads", "capture"), ""),
        ("pass", ENC.format("big-eps", "eager"), ""),
        ("pass", ENC.format("big-eps", "capture"), " UNEXPECTED PASS"),
        ("pass", ENC.format("eps,heads", "capture-revisit"), ""),
    ]
    assert "run " in proc.stderr and "unexpected-pass" in proc.stderr  # the summary

    verbose = regress("run", suite, "--out", tmp_path, "--runs", "1", "-v", "--filter", "model=enc")
    lines = verbose.stdout.splitlines()
    [failing] = [i for i, line in enumerate(lines) if line.endswith(" UNEXPECTED PASS")]
    assert ENC.format("big-eps", "capture") in lines[failing]
    assert lines[failing + 1] == "    expected capture-mismatch"
    assert _log_lines("\n".join(lines[: failing + 1] + lines[failing + 2 :]))

    quiet = regress("run", suite, "--out", tmp_path, "--runs", "1", "-q", "--filter", "model=enc")
    assert quiet.returncode == 1 and quiet.stdout == ""
    assert "unexpected-pass" in quiet.stderr


def test_maxfail_stops_the_run_and_keeps_what_finished(write_suite, tmp_path):
    suite = write_suite(SUITE + EXPECT_CAPTURE_MISMATCH)
    proc = regress("run", suite, "--out", tmp_path, "--runs", "1", "-x")
    assert proc.returncode == 1
    [run_dir] = (tmp_path / "runs").iterdir()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "incomplete"
    assert run["message"] == "maxfail 1 reached: stopped with 6 case(s) not run"
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["case_id"] for r in records] == [
        ENC.format("eps,heads", "eager"),
        ENC.format("eps,heads", "capture"),
        ENC.format("big-eps", "eager"),
        ENC.format("big-eps", "capture"),
    ]
    assert "incomplete: maxfail 1 reached" in proc.stderr
    assert regress("run", suite, "--out", tmp_path, "--maxfail", "0").returncode == 2


def test_last_failed_reruns_what_failed_last_with_its_sequence(write_suite, tmp_path):
    suite = write_suite(SUITE)
    nothing = regress("run", suite, "--out", tmp_path, "--lf")
    assert nothing.returncode == 5
    assert f"--last-failed: no unexpected results recorded in {tmp_path / 'history.sqlite'}" in (
        nothing.stderr
    )

    suite.write_text(suite.read_text() + EXPECT_CAPTURE_MISMATCH)
    assert regress("run", suite, "--out", tmp_path, "--runs", "1").returncode == 1
    rerun = regress("run", suite, "--out", tmp_path, "--runs", "1", "--last-failed")
    assert rerun.returncode == 1
    assert "--last-failed: 1 of 1 failed case(s) selected; 4 case(s) to run" in rerun.stderr
    # the failed case, after the cases before it in its layout-change sequence
    assert [case for _, case, _ in _log_lines(rerun.stdout)] == [
        ENC.format("eps,heads", "eager"),
        ENC.format("eps,heads", "capture"),
        ENC.format("big-eps", "eager"),
        ENC.format("big-eps", "capture"),
    ]

    suite.write_text(SUITE.lstrip())  # the expectation fixed: the rerun passes
    assert regress("run", suite, "--out", tmp_path, "--runs", "1", "--lf").returncode == 0
    after = regress("run", suite, "--out", tmp_path, "--lf")  # the latest result counts
    assert after.returncode == 5 and "no unexpected results recorded" in after.stderr


def test_a_terminal_keeps_the_progress_bar(write_suite, tmp_path):
    """stdout on a terminal: no log lines, the bar (on stderr) instead."""
    primary, secondary = os.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "runner", "run", write_suite(SUITE), "--out", tmp_path / "r"]
            + ["--runs", "1", "--filter", "model=enc"],
            cwd=REPO,
            stdout=secondary,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            env={**os.environ, "COLUMNS": "200"},  # room for the bar's columns
        )
        os.set_blocking(primary, False)
        try:
            written = os.read(primary, 65536)
        except BlockingIOError:
            written = b""
    finally:
        os.close(primary)
        os.close(secondary)
    assert proc.returncode == 0 and written == b""
    assert re.search(r"running .* 5/5", proc.stderr)


def _static_model(path) -> None:
    """y = relu(x) @ w on fixed shapes: nothing for `shapes:` to pin."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"])]
    graph = helper.make_graph(nodes, "static", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


STATIC_SUITE = """
name: static
models:
  relu-matmul:
    path: static.onnx
layouts:
  - [eps, heads]
  - [heads, eps]
backends: [reference]
"""


def test_a_static_model_needs_no_shapes(write_suite, suite_dir, tmp_path):
    _static_model(suite_dir / "static.onnx")
    suite = write_suite(STATIC_SUITE)
    validated = regress("validate", suite)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.strip() == "ok: 1 suite(s), 5 case(s)"
    assert regress("list", suite).stdout.split() == [
        "relu-matmul/layout=eps,heads/reference/eager",
        "relu-matmul/layout=eps,heads/reference/capture",
        "relu-matmul/layout=heads,eps/reference/eager",
        "relu-matmul/layout=heads,eps/reference/capture",
        "relu-matmul/layout=eps,heads/reference/capture-revisit",
    ]
    ran = regress("run", suite, "--out", tmp_path / "r", "--runs", "1", "--filter", "*/eager")
    assert ran.returncode == 0, ran.stderr
    assert [verdict for verdict, _, _ in _log_lines(ran.stdout)] == ["pass", "pass"]
