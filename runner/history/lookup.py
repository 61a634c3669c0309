"""Finding a stored result by the id the report shows (or a prefix of it), as ``new-case`` and
``repro`` take it."""

from __future__ import annotations

import re
from pathlib import Path

from runner.errors import InvalidInput
from runner.history.record import CaseResult
from runner.history.store import SqliteHistory

# Result ids are hex digests; a prefix of a few digits is enough to find one.
RESULT_ID = re.compile(r"[0-9a-f]{4,40}")


def find_result(history: Path, result_id: str) -> CaseResult:
    """The stored result with this id (or unique-enough prefix); InvalidInput if none."""
    wanted = result_id.strip().lower()
    if not RESULT_ID.fullmatch(wanted):
        raise InvalidInput(
            f"result id {result_id!r}: expected at least 4 hex digits, as shown in the report"
        )
    if not history.exists():
        raise InvalidInput(f"{history}: no history yet; run `python -m runner run` first")
    with SqliteHistory(history) as store:
        result = store.result(wanted)
    if result is None:
        raise InvalidInput(f"no result {result_id!r} in {history}")
    return result
