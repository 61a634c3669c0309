"""Stores carry the format they are written in: older ones read, newer ones refused by name."""

from __future__ import annotations

import json
import sqlite3

import pytest

from runner.history import CaseResult, RunFolder, RunRecord, SqliteHistory
from runner.history.record import FORMAT, NewerFormat, UnknownField
from runner.report import build_reports

from .conftest import case_result, regress

RUN = RunRecord("R1", "2026-11-30T10:00:00+00:00", cases=1)

# The tables as the runner created them before stores had a format (user_version 0), and a row
# as it wrote them: no `format` field in either record.
UNVERSIONED = """
CREATE TABLE runs (run_id TEXT PRIMARY KEY, started TEXT, ended TEXT, status TEXT, record TEXT);
CREATE TABLE results (
    result_id TEXT PRIMARY KEY, run_id TEXT, case_id TEXT, suite TEXT, model TEXT,
    layout TEXT, backend TEXT, bundle TEXT, capture TEXT, verdict TEXT,
    outcome TEXT, bug TEXT, max_abs_error REAL, max_rel_error REAL,
    finished_at TEXT, record TEXT
);
"""


def _unformatted(record) -> dict:
    data = record.to_dict()
    del data["format"]
    return data


def _write_unversioned(path, result: CaseResult) -> None:
    with sqlite3.connect(path) as db:
        db.executescript(UNVERSIONED)
        db.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
            (RUN.run_id, RUN.started, None, "complete", json.dumps(_unformatted(RUN))),
        )
        db.execute(
            "INSERT INTO results (result_id, run_id, case_id, record) VALUES (?, ?, ?, ?)",
            (result.result_id, result.run_id, result.case_id, json.dumps(_unformatted(result))),
        )
    db.close()


def _user_version(path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


def test_every_store_writes_the_current_format(tmp_path):
    result = case_result(run_id=RUN.run_id)
    folder, history = RunFolder(tmp_path / "runs" / "R1"), SqliteHistory(tmp_path / "h.sqlite")
    for store in (folder, history):
        store.begin_run(RUN)
        store.record(result)
    assert json.loads((tmp_path / "runs/R1/run.json").read_text())["format"] == FORMAT == 2
    (line,) = (tmp_path / "runs/R1/results.jsonl").read_text().splitlines()
    assert json.loads(line)["format"] == FORMAT
    assert history.results() == [result] and history.runs() == [RUN]
    history.close()
    assert _user_version(tmp_path / "h.sqlite") == FORMAT


def test_either_store_reads_back_what_it_holds(tmp_path):
    """One interface: a run folder and the history give the same runs and results, by run."""
    first = case_result(run_id=RUN.run_id, result_id="r1", case_id="c1")
    second = case_result(run_id=RUN.run_id, result_id="r2", case_id="c2")
    other = case_result(run_id="R2", result_id="r3")
    with RunFolder(tmp_path / "runs/R1") as folder, SqliteHistory(tmp_path / "h.sqlite") as db:
        for store in (folder, db):
            assert store.runs() == [] and store.results() == []
            store.begin_run(RUN)
            store.record(first)
            store.record(second)
            store.end_run(RUN)
        db.record(other)
        assert folder.runs() == db.runs() == [RUN]
        assert folder.results() == folder.results("R1") == db.results("R1") == [first, second]
        assert db.results() == [first, second, other] and folder.results("R2") == []
    with pytest.raises(sqlite3.ProgrammingError):  # closed on leaving the block
        db.runs()


def test_an_unknown_field_is_refused_by_name_not_dropped(tmp_path):
    with_extra = {**case_result().to_dict(), "added_without_a_format": 1}
    with pytest.raises(UnknownField) as refused:
        CaseResult.from_dict(with_extra, "reports/runs/R/results.jsonl:3")
    assert str(refused.value) == (
        "reports/runs/R/results.jsonl:3: unknown field(s) added_without_a_format in a format "
        f"{FORMAT} record: a runner that added them without taking a new format wrote it; this "
        "one would drop them"
    )
    with pytest.raises(UnknownField, match="run.json: unknown field"):
        RunRecord.from_dict({**RUN.to_dict(), "added": True}, "run.json")
    folder = tmp_path / "runs/R1"
    with RunFolder(folder) as store:
        store.begin_run(RUN)
    (folder / "results.jsonl").write_text(json.dumps(with_extra) + "\n")
    with pytest.raises(UnknownField, match=f"{folder / 'results.jsonl'}:1: unknown field"):
        RunFolder(folder).results()


def test_a_history_from_before_formats_reads_as_format_1(tmp_path):
    path = tmp_path / "history.sqlite"
    result = case_result(run_id=RUN.run_id, verdict="capture-mismatch")
    _write_unversioned(path, result)
    assert _user_version(path) == 0
    history = SqliteHistory(path)
    assert history.results() == [result] and history.runs() == [RUN]
    assert history.result(result.result_id[:6]) == result
    history.close()
    assert _user_version(path) == 1  # stamped: its records are format 1's
    build_reports(tmp_path)
    assert "capture-mismatch" in (tmp_path / "summary.md").read_text()
    with SqliteHistory(path) as history:  # a result of this runner's format: so is the file
        history.record(case_result(run_id=RUN.run_id, result_id="r2", adapter="lavapipe"))
        assert history.results()[0].adapter is None  # format 1 had none
    assert _user_version(path) == FORMAT


def test_a_record_of_a_newer_format_is_refused_by_name():
    newer = {**case_result().to_dict(), "format": FORMAT + 1, "field_from_the_future": 1}
    with pytest.raises(NewerFormat) as refused:
        CaseResult.from_dict(newer, "reports/runs/R/results.jsonl:3")
    assert str(refused.value) == (
        f"reports/runs/R/results.jsonl:3: stored in format {FORMAT + 1}; this runner reads "
        f"formats 1 to {FORMAT}: read it with the newer webgpu-capture-regress that wrote it"
    )
    for bad in ("2", None, 0, True):
        with pytest.raises(NewerFormat):
            RunRecord.from_dict({**RUN.to_dict(), "format": bad}, "run.json")


def test_the_cli_refuses_a_newer_history_with_exit_2_and_keeps_it(tmp_path):
    path = tmp_path / "history.sqlite"
    store = SqliteHistory(path)
    store.begin_run(RUN)
    store.record(case_result(run_id=RUN.run_id, result_id="abcd1234"))
    store.close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {FORMAT + 1}")
    db.close()
    before = path.read_bytes()
    for args in (("report",), ("new-case", "abcd1234")):
        proc = regress(*args, "--out", tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert f"{path}: stored in format {FORMAT + 1}; this runner reads formats 1 to" in (
            proc.stderr
        )
        assert "Traceback" not in proc.stderr
    assert path.read_bytes() == before and not (tmp_path / "index.html").exists()


def test_the_cli_refuses_a_newer_result_in_a_current_history(tmp_path):
    path = tmp_path / "history.sqlite"
    store = SqliteHistory(path)
    store.begin_run(RUN)
    store.close()
    newer = {**case_result(run_id=RUN.run_id).to_dict(), "format": FORMAT + 1}
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO results (result_id, run_id, case_id, record) VALUES (?, ?, ?, ?)",
            ("r0", RUN.run_id, newer["case_id"], json.dumps(newer)),
        )
    db.close()
    proc = regress("report", "--out", tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{path} (result r0): stored in format {FORMAT + 1}" in proc.stderr
