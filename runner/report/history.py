"""The history database as two pandas tables: one row per run, one row per case result.

Everything the report shows is computed from these frames; the stored records stay reachable
(column ``record``) for the parts that need a whole result (failure details, JUnit, new cases).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from runner.history import CaseResult, RunRecord, RunStatus, SqliteHistory
from runner.suite.spec import shape_label

RUN_COLUMNS = ("run_id", "started", "ended", "status", "cases", "message", "record")

RESULT_COLUMNS = (
    "result_id",
    "run_id",
    "case_id",
    "cell",
    "suite",
    "suite_path",
    "model",
    "shape",
    "layout",
    "backend",
    "bundle",
    "version",
    "capture",
    "verdict",
    "outcome",
    "bug",
    "reason",
    "max_abs_error",
    "max_rel_error",
    "tolerance_abs",
    "median_run_ms",
    "attribution",
    "message",
    "finished_at",
    "record",
    "run_index",
)

NUMERIC_COLUMNS = ("max_abs_error", "max_rel_error", "tolerance_abs", "median_run_ms")


def cell_of(case_id: str) -> str:
    """The case id without its mode: an eager case and its capture twin share it."""
    return case_id.rsplit("/", 1)[0]


@dataclass(frozen=True)
class History:
    runs: pd.DataFrame  # RUN_COLUMNS, oldest first; index 0..n-1 is the run's position
    results: pd.DataFrame  # RESULT_COLUMNS; run_index is the position of the result's run

    @property
    def empty(self) -> bool:
        return self.runs.empty

    @classmethod
    def of(cls, runs: list[RunRecord], results: list[CaseResult]) -> History:
        runs = runs + _orphan_runs(runs, results)
        run_frame = pd.DataFrame(
            [{**{c: getattr(run, c) for c in RUN_COLUMNS[:-1]}, "record": run} for run in runs],
            columns=list(RUN_COLUMNS),
        )
        # Times have whole seconds: of two runs started in the same second, the one that
        # ended first (or has not ended) comes first.
        run_frame = run_frame.sort_values(["started", "ended"], kind="stable", na_position="first")
        run_frame = run_frame.reset_index(drop=True)
        position = {run_id: i for i, run_id in enumerate(run_frame["run_id"])}
        rows = [_result_row(r, position[r.run_id]) for r in results]
        result_frame = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
        for column in NUMERIC_COLUMNS:
            result_frame[column] = pd.to_numeric(result_frame[column], errors="coerce")
        return cls(run_frame, result_frame)

    def run_results(self, run_id: str) -> pd.DataFrame:
        return self.results[self.results["run_id"] == run_id]


def _orphan_runs(runs: list[RunRecord], results: list[CaseResult]) -> list[RunRecord]:
    """Runs known only from their results (a history merged without its run rows)."""
    known = {run.run_id for run in runs}
    first_seen: dict[str, str] = {}
    for result in results:
        if result.run_id not in known:
            seen = first_seen.get(result.run_id, result.finished_at)
            first_seen[result.run_id] = min(seen, result.finished_at)
    return [
        RunRecord(
            run_id, started, RunStatus.UNKNOWN, message="no run record; known from its results"
        )
        for run_id, started in first_seen.items()
    ]


def _result_row(result: CaseResult, run_index: int) -> dict[str, Any]:
    return {
        **{c: getattr(result, c, None) for c in RESULT_COLUMNS},
        "cell": cell_of(result.case_id),
        "shape": shape_label(result.shape),
        "tolerance_abs": result.tolerance.get("abs"),
        "median_run_ms": result.timings.get("median_run_ms"),
        "record": result,
        "run_index": run_index,
    }


def load_history(path: Path) -> History:
    """The history at `path`; an empty one when the file does not exist (nothing is created)."""
    if not path.exists():
        return History.of([], [])
    with SqliteHistory(path) as store:
        return History.of(store.runs(), store.results())
