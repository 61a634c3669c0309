"""Interruption, shards and concurrent writers, on the reference backend (no GPU needed)."""

from __future__ import annotations

import json
import multiprocessing
import signal
import sqlite3

from runner.history import RunRecord, SqliteHistory

from .conftest import case_result, regress, run_until_results
from .test_cli import SUITE


def _results(out):
    with sqlite3.connect(out / "history.sqlite") as db:
        return db.execute("SELECT case_id, run_id FROM results").fetchall()


def test_shards_merge_into_one_history_without_duplicates(write_suite, tmp_path):
    suite = write_suite(SUITE)
    for i in (1, 2):
        out = tmp_path / f"s{i}"
        proc = regress("run", suite, "--shard", f"{i}/2", "--runs", "1", "--out", out)
        assert proc.returncode == 0, proc.stderr
    merged = tmp_path / "merged"
    proc = regress("merge", tmp_path / "s1", tmp_path / "s2", "--out", merged)
    assert "merged 2 shard run(s), 10 result(s)" in proc.stdout, proc.stderr
    case_ids = sorted(case for case, _ in _results(merged))
    assert case_ids == sorted(regress("list", suite).stdout.split())
    [run_id] = {run for _, run in _results(merged)}
    lines = (merged / "runs" / run_id / "results.jsonl").read_text().splitlines()
    assert len(lines) == 10 and len(list((merged / "runs" / "shards").iterdir())) == 2
    assert (merged / "index.html").is_file()
    again = regress("merge", tmp_path / "s1", tmp_path / "s2", "--out", merged)
    assert "merged 0 shard run(s), 0 result(s)" in again.stdout and len(_results(merged)) == 10


def test_merge_refuses_shards_of_different_suites(write_suite, tmp_path):
    one = write_suite(SUITE, "one.yaml")
    other = write_suite(SUITE.replace("name: e2e", "name: other"), "other.yaml")
    regress("run", one, "--shard", "1/2", "--runs", "1", "--out", tmp_path / "a")
    regress("run", other, "--shard", "2/2", "--runs", "1", "--out", tmp_path / "b")
    proc = regress("merge", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "m")
    assert proc.returncode == 2 and "shards come from different suites" in proc.stderr
    assert not (tmp_path / "m" / "history.sqlite").exists()


def test_sigterm_keeps_finished_results_and_marks_the_run(write_suite, tmp_path):
    shapes = "\n".join(f"  - {{batch: 1, sequence: {8 + i}}}" for i in range(40))
    suite = write_suite(SUITE.replace("  - {batch: 1, sequence: 8}", shapes))
    out = tmp_path / "out"
    proc = run_until_results(suite, out)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    [run_dir] = (out / "runs").iterdir()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "incomplete" and run["ended"]
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    assert 3 <= len(lines) < run["cases"]
    assert len(_results(out)) == len(lines), "history and results.jsonl hold the same results"


def _write_many(path, writer: int, count: int) -> None:
    history = SqliteHistory(path)
    history.begin_run(
        RunRecord.from_dict({"run_id": f"run-{writer}", "started": "2026-01-01T00:00:00"})
    )
    for i in range(count):
        history.record(case_result(result_id=f"{writer}-{i}", run_id=f"run-{writer}"))
    history.close()


def test_concurrent_writers_do_not_corrupt_the_history(tmp_path):
    path = tmp_path / "history.sqlite"
    SqliteHistory(path).close()
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_write_many, args=(path, w, 150)) for w in range(3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
        assert writer.exitcode == 0
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM results").fetchone() == (450,)
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (3,)


def test_run_timeout_stops_starting_cases(write_suite, tmp_path):
    proc = regress(
        "run", write_suite(SUITE), "--out", tmp_path, "--runs", "1", "--run-timeout", "0.000001"
    )
    assert proc.returncode == 1
    [run_json] = tmp_path.glob("runs/*/run.json")
    run = json.loads(run_json.read_text())
    assert run["status"] == "incomplete"
    assert run["message"] == "run timeout: 1e-06 s passed with 10 case(s) not run"
    assert "run timeout" in proc.stderr


def test_wgpu_validation_error_is_this_cases_error_and_the_run_goes_on(
    suite_dir, write_suite, tmp_path
):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        suite_dir / "relu.onnx",
    )
    # 160 MB in one binding: past WebGPU's default 128 MiB storage-binding limit
    suite = write_suite("""
        models:
          relu: {path: relu.onnx}
        shapes:
          - {n: 40000000}
          - {n: 1000}
        backends: [wgpu]
        capture: [eager]
        """)
    proc = regress("run", suite, "--out", tmp_path, "--runs", "1")
    assert proc.returncode == 1
    [jsonl] = tmp_path.glob("runs/*/results.jsonl")
    results = {
        json.loads(line)["shape"]["n"]: json.loads(line) for line in jsonl.read_text().splitlines()
    }
    big, small = results[40000000], results[1000]
    assert big["verdict"] == "error" and "max_" in big["message"] and "limit" in big["message"]
    assert small["verdict"] == "pass"
