"""Step 6: reports built from the history database (``reports/history.sqlite``).

``index.html`` shows the latest run and the trends over runs, with its folded rows in
``data.js`` beside it; ``junit.xml`` and ``summary.md`` describe the latest run for CI. Each is
written whole to a temporary file and renamed, so a reader never sees half; data.js before the
page that loads it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from runner.files import write_atomic
from runner.report.history import load_history
from runner.report.junit import junit_xml
from runner.report.page import DATA_FILE, GRID_RUNS, render_page
from runner.report.summary import render_summary

HISTORY = "history.sqlite"


def build_reports(out: Path, grid_runs: int = GRID_RUNS) -> list[Path]:
    """Write out/data.js, out/index.html, out/junit.xml and out/summary.md from
    out/history.sqlite; the page's grid and trends cover the last `grid_runs` runs."""
    out.mkdir(parents=True, exist_ok=True)
    history = load_history(out / HISTORY)
    built_at = datetime.now(UTC).isoformat(timespec="seconds")
    latest = None if history.empty else history.runs.iloc[-1]
    latest_results = [] if latest is None else list(history.run_results(latest["run_id"])["record"])
    page, data = render_page(history, built_at, grid_runs)
    return [
        write_atomic(out / DATA_FILE, data.encode("utf-8")),
        write_atomic(out / "index.html", page.encode("utf-8")),
        write_atomic(
            out / "junit.xml",
            junit_xml(None if latest is None else latest["record"], latest_results),
        ),
        write_atomic(out / "summary.md", render_summary(history).encode("utf-8")),
    ]
