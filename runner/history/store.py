"""Where runs and results go and are read back from: one small interface (``ResultStore``),
interchangeable implementations, as hypothesis's ExampleDatabase.

``RunFolder`` writes ``runs/<run_id>/run.json`` and ``results.jsonl``; ``SqliteHistory`` keeps
every run in one database file, the embedded default. A result is written to every store as soon
as its case finishes, so a killed run keeps all that finished. Either reads back what it holds
(``runs``, ``results``), and closes as a context manager.
"""

from __future__ import annotations

import json
import os
import sqlite3
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Self

from runner.files import write_atomic
from runner.history.record import FORMAT, CaseResult, NewerFormat, RunRecord

# Columns the report and merge query directly; the whole record is kept as JSON beside them.
RESULT_COLUMNS = (
    "result_id",
    "run_id",
    "case_id",
    "suite",
    "model",
    "layout",
    "backend",
    "bundle",
    "capture",
    "verdict",
    "outcome",
    "bug",
    "max_abs_error",
    "max_rel_error",
    "finished_at",
)


class ResultStore(ABC):
    @abstractmethod
    def begin_run(self, run: RunRecord) -> None:
        """Record a run's start: its id, environment and suites."""

    @abstractmethod
    def record(self, result: CaseResult) -> None:
        """Record one finished case; durable on return."""

    @abstractmethod
    def end_run(self, run: RunRecord) -> None:
        """Record a run's end (its status says how it ended)."""

    @abstractmethod
    def runs(self) -> list[RunRecord]:
        """Every run it holds, oldest first."""

    @abstractmethod
    def results(self, run_id: str | None = None) -> list[CaseResult]:
        """Its results (of one run, given its id), each run's in the order recorded."""

    @abstractmethod
    def close(self) -> None:
        """Release what it holds open; it is not used afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RunFolder(ResultStore):
    """One run's folder: ``run.json`` and a line of ``results.jsonl`` per result."""

    def __init__(self, folder: Path):
        self.folder = folder

    def begin_run(self, run: RunRecord) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write_run(run)
        (self.folder / "results.jsonl").touch()

    def record(self, result: CaseResult) -> None:
        with open(self.folder / "results.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(result.to_dict(), sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def end_run(self, run: RunRecord) -> None:
        self._write_run(run)

    def _write_run(self, run: RunRecord) -> None:
        text = json.dumps(run.to_dict(), indent=2, sort_keys=True) + "\n"
        write_atomic(self.folder / "run.json", text.encode("utf-8"))

    def runs(self) -> list[RunRecord]:
        path = self.folder / "run.json"
        if not path.is_file():  # a run folder whose run.json is gone: its results remain
            return []
        return [RunRecord.from_dict(json.loads(path.read_text(encoding="utf-8")), str(path))]

    def results(self, run_id: str | None = None) -> list[CaseResult]:
        path = self.folder / "results.jsonl"
        if not path.is_file():
            return []
        lines = path.read_text(encoding="utf-8").splitlines()
        found = [
            CaseResult.from_dict(json.loads(line), f"{path}:{number}")
            for number, line in enumerate(lines, 1)
            if line
        ]
        return [r for r in found if run_id is None or r.run_id == run_id]

    def close(self) -> None:
        """Nothing to release: every write closes its file before it returns."""


class SqliteHistory(ResultStore):
    """Every run's results in one SQLite file; safe for concurrent writers (WAL, busy timeout).

    ``PRAGMA user_version`` holds the newest format of the records in the file (0, as a
    database before formats were numbered says, is format 1): a file of a newer format is
    refused before anything is read or written, an older one is read as it is and takes this
    runner's format with the first record it is written.
    """

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        (found,) = self._db.execute("PRAGMA user_version").fetchone()
        if found > FORMAT:
            self._db.close()
            raise NewerFormat(str(path), found)
        self._format = found or 1
        if found == 0:
            self._db.execute("PRAGMA user_version = 1")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.executescript(
            """
            CREATE TABLE IF NOT EXISTS runs (
                run_id TEXT PRIMARY KEY, started TEXT, ended TEXT, status TEXT, record TEXT
            );
            CREATE TABLE IF NOT EXISTS results (
                result_id TEXT PRIMARY KEY, run_id TEXT, case_id TEXT, suite TEXT, model TEXT,
                layout TEXT, backend TEXT, bundle TEXT, capture TEXT, verdict TEXT,
                outcome TEXT, bug TEXT, max_abs_error REAL, max_rel_error REAL,
                finished_at TEXT, record TEXT
            );
            CREATE INDEX IF NOT EXISTS results_by_run ON results (run_id);
            CREATE INDEX IF NOT EXISTS results_by_case ON results (case_id);
            """
        )

    def close(self) -> None:
        self._db.close()

    def begin_run(self, run: RunRecord) -> None:
        self._put_run(run)

    def end_run(self, run: RunRecord) -> None:
        self._put_run(run)

    def _writing(self) -> None:
        """A record of this runner's format goes in: the file says it holds one."""
        if self._format < FORMAT:
            self._db.execute(f"PRAGMA user_version = {FORMAT}")
            self._format = FORMAT

    def _put_run(self, run: RunRecord) -> None:
        self._writing()
        self._db.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?)",
            (
                run.run_id,
                run.started,
                run.ended,
                run.status,
                json.dumps(run.to_dict(), sort_keys=True),
            ),
        )

    def record(self, result: CaseResult) -> None:
        """Insert once: recording the same result again (a re-merged shard) changes nothing."""
        self._writing()
        values = [getattr(result, column) for column in RESULT_COLUMNS]
        self._db.execute(
            f"INSERT OR IGNORE INTO results ({', '.join(RESULT_COLUMNS)}, record) "
            f"VALUES ({', '.join('?' * (len(RESULT_COLUMNS) + 1))})",
            (*values, json.dumps(result.to_dict(), sort_keys=True)),
        )

    def runs(self) -> list[RunRecord]:
        """Every run, oldest first."""
        rows = self._db.execute("SELECT run_id, record FROM runs ORDER BY started, run_id")
        return [
            RunRecord.from_dict(json.loads(record), f"{self.path} (run {run_id})")
            for run_id, record in rows
        ]

    def results(self, run_id: str | None = None) -> list[CaseResult]:
        query, args = "SELECT result_id, record FROM results", ()
        if run_id is not None:
            query, args = query + " WHERE run_id = ?", (run_id,)
        rows = self._db.execute(query + " ORDER BY run_id, rowid", args)
        return [self._result(result_id, record) for result_id, record in rows]

    def _result(self, result_id: str, record: str) -> CaseResult:
        return CaseResult.from_dict(json.loads(record), f"{self.path} (result {result_id})")

    def latest_outcomes(self) -> dict[str, str]:
        """Each case id's outcome in the latest run that recorded it (runs in start order)."""
        rows = self._db.execute(
            "SELECT results.case_id, results.outcome FROM results "
            "LEFT JOIN runs ON runs.run_id = results.run_id "
            "ORDER BY runs.started, runs.ended, results.rowid"
        )
        return dict(rows.fetchall())  # a later row replaces an earlier one of the same case

    def result(self, result_id: str) -> CaseResult | None:
        row = self._db.execute(
            "SELECT result_id, record FROM results WHERE result_id = ? OR result_id LIKE ?",
            (result_id, f"{result_id}%"),
        ).fetchone()
        return self._result(*row) if row else None
