"""Shards run on separate machines: their runs fold into one run of the carried history, which
the report then compares with the run before."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.history import CaseResult, RunRecord, SqliteHistory
from runner.history.merge import merge_shards
from runner.history.record import result_id
from runner.report import analysis
from runner.report.history import load_history
from tests.test_report import CELLS, SUITE, make_result, run_record, write_history


def write_shard(folder: Path, run_id: str, started: str, status: str, numbers: list[int]) -> None:
    store = SqliteHistory(folder / "history.sqlite")
    try:
        run = run_record(run_id, started, status, len(numbers), SUITE)
        store.begin_run(RunRecord.from_dict(run))
        for number in numbers:
            store.record(CaseResult.from_dict(make_result(run_id, 4, CELLS[number])))
        store.end_run(RunRecord.from_dict(run))
    finally:
        store.close()


@pytest.fixture
def shards(tmp_path) -> tuple[Path, list[Path]]:
    carried = tmp_path / "reports"
    write_history(carried / "history.sqlite")
    first, second = tmp_path / "s1", tmp_path / "s2"
    write_shard(first, "S1", "2025-01-06T10:00:00+00:00", "complete", [1, 2, 3, 4, 5])
    write_shard(second, "S2", "2025-01-06T10:00:05+00:00", "incomplete", [6, 7, 9])
    return carried, [first, second]


def test_shard_runs_become_one_run_compared_with_the_run_before(shards, capsys):
    carried, paths = shards
    assert merge_shards(paths, carried, "ci-7-1").run_id == "ci-7-1"
    history = load_history(carried / "history.sqlite")
    merged = history.runs.iloc[-1]
    assert merged["run_id"] == "ci-7-1"
    assert merged["status"] == "incomplete"  # the worst shard's
    assert merged["cases"] == 8
    assert merged["started"] == "2025-01-06T10:00:00+00:00"
    assert merged["record"].shards == ["S1", "S2"]
    results = history.run_results("ci-7-1")
    assert sorted(results["case_id"]) == sorted(CELLS[n].case_id for n in (1, 2, 3, 4, 5, 6, 7, 9))
    assert set(results["result_id"]) == {result_id("ci-7-1", c) for c in results["case_id"]}
    assert analysis.previous_comparable(history, "ci-7-1") == "R5"


def test_merging_the_same_shards_again_changes_nothing(shards, capsys):
    carried, paths = shards
    assert merge_shards(paths, carried).run_id == "S1"  # the earliest shard names the run
    before = load_history(carried / "history.sqlite")
    assert merge_shards(paths, carried).run_id is None
    after = load_history(carried / "history.sqlite")
    assert after.runs["run_id"].tolist() == before.runs["run_id"].tolist()
    assert len(after.results) == len(before.results)
