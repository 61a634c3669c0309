"""Step 6: reports built from the history database (``reports/history.sqlite``).

The history is read into one report model (``model.build_report``) that every output lays out:
``index.html`` (templates) with its folded rows in ``data.js`` beside it, and ``junit.xml`` and
``summary.md`` for CI. Each is written whole to a temporary file and renamed, so a reader never
sees half; data.js before the page that loads it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from runner.files import write_atomic
from runner.report.build import build_report
from runner.report.history import load_history
from runner.report.junit import junit_xml
from runner.report.model import DATA_FILE, GRID_RUNS
from runner.report.render import render_page
from runner.report.summary import render_summary

HISTORY = "history.sqlite"


def build_reports(out: Path, grid_runs: int = GRID_RUNS) -> list[Path]:
    """Write out/data.js, out/index.html, out/junit.xml and out/summary.md from
    out/history.sqlite; the page's grid and trends cover the last `grid_runs` runs."""
    out.mkdir(parents=True, exist_ok=True)
    built_at = datetime.now(UTC).isoformat(timespec="seconds")
    report = build_report(load_history(out / HISTORY), built_at, grid_runs)
    page, data = render_page(report)
    latest = report.latest
    return [
        write_atomic(out / DATA_FILE, data.encode("utf-8")),
        write_atomic(out / "index.html", page.encode("utf-8")),
        write_atomic(
            out / "junit.xml",
            junit_xml(latest and latest.run, latest.results if latest else ()),
        ),
        write_atomic(out / "summary.md", render_summary(report).encode("utf-8")),
    ]
