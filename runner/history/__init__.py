"""Step 5: store results, per run on disk and in the history database."""

from runner.history.record import CaseResult, RunRecord, RunStatus
from runner.history.store import ResultStore, RunFolder, SqliteHistory

__all__ = ["CaseResult", "ResultStore", "RunFolder", "RunRecord", "RunStatus", "SqliteHistory"]
