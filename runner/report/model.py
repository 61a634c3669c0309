"""The report as data: every number, row and fold of ``index.html``, ``summary.md`` and
``junit.xml`` as frozen values, computed once from the history by ``build.build_report``.

The renderers (``render.py`` with its Jinja2 templates, ``summary.py``, ``junit.py``) only lay
the model out; none of them calls the analysis. Values are plain text: escaping is the
templates' job (autoescape), never the model's. The only markup the model carries is the SVG
charts of ``svg.py``, which escape their own labels.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from runner.history import CaseResult, RunRecord
from runner.report.analysis import KIND_LABELS, outcome_kind
from runner.report.links import bug_url
from runner.verdicts import VERDICT_CODES

TITLE = "WebGPU capture regression report"

GRID_RUNS = 20  # runs shown in the status grid and used for flakiness and trends

# Failing rows a list shows before it folds the rest away with the passing ones: bounds the page
# however much fails.
SHOWN_ROWS = 100

DATA_FILE = "data.js"  # the folded rows, beside index.html

FILTERS = {"backend": "backend", "bundle": "build", "verdict": "verdict", "suite": "suite"}

NO_BUNDLE = "none"  # the build filter's value for backends without builds (wgpu, reference)


# Section ids in page order, with their name in the navigation.
SECTIONS = {
    "latest": "latest run",
    "runs": "runs",
    "changes": "changes",
    "pivot": "case × backend",
    "versions": "case × version",
    "grid": "case × run",
    "flaky": "flaky",
    "errors": "errors",
    "speedup": "speedup",
    "failures": "failures",
}

# data-* attributes a row carries for the filter script: (name after "data-", value). Empty:
# the row is not filtered.
Attrs = tuple[tuple[str, str], ...]


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def num(value: Any) -> str:
    return "—" if missing(value) else f"{value:.3g}"


def text(value: Any) -> str:
    return "" if missing(value) else str(value)


def case_anchor(case_id: str) -> str:
    return "case-" + hashlib.sha1(case_id.encode()).hexdigest()[:12]


def result_anchor(result_id: str) -> str:
    return "result-" + result_id


def run_label(position: int) -> str:
    return f"#{position + 1}"


# --- values -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A bug reference: ``url`` only for http(s) URLs and owner/repo#N ids, else plain text."""

    text: str
    url: str | None

    @classmethod
    def bug(cls, bug: Any) -> Link | None:
        return None if missing(bug) or not bug else cls(str(bug), bug_url(bug))


@dataclass(frozen=True)
class Badge:
    kind: str  # a key of KIND_LABELS: the colour
    text: str

    @classmethod
    def of(cls, outcome: str, verdict: str, text: str | None = None) -> Badge:
        kind = outcome_kind(outcome, verdict)
        return cls(kind, text or KIND_LABELS[kind])


@dataclass(frozen=True)
class Cell:
    """One verdict in a grid: a coloured code, a link to its failure block when it has one. A
    pass says so by its colour alone (thousands of them: no tooltip)."""

    kind: str | None  # None: the case did not run there
    code: str = ""
    title: str = ""
    target: str = ""

    @classmethod
    def of(cls, verdict: Any, outcome: Any, kind: Any, title: str = "", target: str = "") -> Cell:
        if missing(verdict):
            return cls(None)
        if kind == "pass":
            return cls("pass", VERDICT_CODES["pass"])
        code = VERDICT_CODES.get(verdict, "?")
        return cls(kind, code, f"{title}{verdict} ({outcome})", target)


@dataclass(frozen=True)
class CaseRow:
    """A row of verdict cells: the case × run grid, the pivot, the version grid."""

    case_id: str
    cells: tuple[Cell, ...]
    anchor: str = ""
    attrs: Attrs = ()


@dataclass(frozen=True)
class Change:
    change: str  # one of analysis.CHANGE_ORDER
    case_id: str
    result_id: str
    target: str  # the anchor the case links to: its failure block, else its grid row
    before_verdict: str | None
    before_outcome: str | None
    verdict: str
    outcome: str
    bug: Link | None
    attrs: Attrs


@dataclass(frozen=True)
class Mark:
    """One verdict of a flaky case's strip."""

    kind: str
    code: str
    title: str


@dataclass(frozen=True)
class FlakyRow:
    case_id: str
    flips: int
    runs: int
    marks: tuple[Mark, ...]
    attrs: Attrs


@dataclass(frozen=True)
class ErrorRow:
    case_id: str
    spark: Markup
    latest: str
    over: bool
    worst: str
    tolerance: str
    attrs: Attrs


@dataclass(frozen=True)
class SpeedupRow:
    backend: str
    latest_run: str
    cases: int
    median: str
    least: str
    most: str
    attrs: Attrs


@dataclass(frozen=True)
class Failure:
    """A failing result's details block."""

    anchor: str
    attrs: Attrs
    open: bool
    badge: Badge
    case_id: str
    verdict: str
    meaning: str
    result_id: str
    run_id: str
    suite: str
    suite_path: str
    model_shape: str
    layout: str
    backend: str
    injected: str
    verdicts: str
    expected: str
    bug: Link | None
    reason: str
    attribution: str
    stale_from: str
    divergent_node: str
    error: str
    trace: str
    trace_errors: tuple[str, ...]
    message: str
    snippet: str
    repro: str


Row = CaseRow | Change | FlakyRow | ErrorRow | Failure


@dataclass(frozen=True)
class Listing:
    """A list's failing rows (the first ``SHOWN_ROWS``) and the rest, folded under `label`;
    the folded rows go to data.js when `into_data`, else stay in the page."""

    name: str
    shown: tuple[Row, ...]
    folded: tuple[Row, ...]
    label: str
    into_data: bool = True

    @classmethod
    def of(
        cls,
        name: str,
        rows: list[Row],
        failing: list[bool],
        noun: str,
        quiet_text: str = "",
        into_data: bool = True,
    ) -> Listing:
        shown = set([i for i, fails in enumerate(failing) if fails][:SHOWN_ROWS])
        folded = tuple(row for i, row in enumerate(rows) if i not in shown)
        more = sum(failing) - len(shown)
        quiet = len(folded) - more
        parts = [f"{more:,} more {noun} (past the first {SHOWN_ROWS})"] if more else []
        label = " and ".join(parts + ([f"{quiet:,} {quiet_text}"] if quiet else []))
        return cls(name, tuple(rows[i] for i in sorted(shown)), folded, label, into_data)

    def anchors(self) -> list[str]:
        """The ids of the folded rows: where a link into the fold leads."""
        return [a for row in self.folded if (a := getattr(row, "anchor", ""))]


@dataclass(frozen=True)
class Table:
    """A count table: a corner label, column names, and rows of (label, counts)."""

    corner: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Filter:
    key: str  # the data-* attribute it matches
    label: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Glance:
    run_id: str
    results: int
    unexpected: int
    unexpected_pass: int
    previous_id: str | None
    new_failures: int
    fixed: int
    status: str


# --- sections -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NoRunsSection:
    """What an empty history's page says instead of a latest run."""

    id: str = "latest"
    title: str = "No runs yet"


@dataclass(frozen=True)
class LatestSection:
    run_id: str
    status: str
    why: str  # why a run that is not complete is so ("" when unknown)
    results: int
    planned: str
    injected: tuple[str, ...]
    started: str
    ended: str
    suites: tuple[str, ...]
    options: str
    by_verdict: Table | None
    by_outcome: Table | None
    environment: tuple[tuple[str, str], ...]
    id: str = "latest"
    title: str = "Latest run"


@dataclass(frozen=True)
class RunsSection:
    runs: int
    chart: Markup
    id: str = "runs"
    title: str = "Results per run"


@dataclass(frozen=True)
class ChangesSection:
    previous_id: str | None
    previous_started: str
    listing: Listing | None
    id: str = "changes"
    title: str = "Changes since the previous comparable run"


@dataclass(frozen=True)
class PivotSection:
    results: int
    cases: int
    backends: tuple[tuple[str, int], ...]  # (backend id, columns it spans)
    modes: tuple[str, ...]
    listing: Listing | None
    id: str = "pivot"
    title: str = "Latest run: case by backend and mode"


@dataclass(frozen=True)
class VersionChange:
    case: str
    before_version: str
    after_version: str
    before: str
    after: str


@dataclass(frozen=True)
class VersionsSection:
    versions: tuple[tuple[str, str], ...]  # (label, version) in the order the run ran them
    rows: tuple[CaseRow, ...]
    changes: tuple[VersionChange, ...]
    id: str = "versions"
    title: str = "Latest run: case by version"


@dataclass(frozen=True)
class GridSection:
    runs: tuple[tuple[str, str], ...]  # (label, tooltip) per run
    listing: Listing | None
    id: str = "grid"
    title: str = ""


@dataclass(frozen=True)
class FlakySection:
    min_flips: int
    listing: Listing | None
    id: str = "flaky"
    title: str = "Flaky cases"


@dataclass(frozen=True)
class ErrorsSection:
    listing: Listing | None
    id: str = "errors"
    title: str = "Error trends (max abs error against the CPU reference)"


@dataclass(frozen=True)
class SpeedupSection:
    chart: Markup | None
    rows: tuple[SpeedupRow, ...]
    id: str = "speedup"
    title: str = "Capture speedup (eager median run time / replay median run time)"


@dataclass(frozen=True)
class FailuresSection:
    listing: Listing | None
    id: str = "failures"
    title: str = "Failures in the latest run"


Section = (
    NoRunsSection
    | LatestSection
    | RunsSection
    | ChangesSection
    | PivotSection
    | VersionsSection
    | GridSection
    | FlakySection
    | ErrorsSection
    | SpeedupSection
    | FailuresSection
)


@dataclass(frozen=True)
class LatestRun:
    """What CI reads of the latest run (summary.md, junit.xml) and the page's glance."""

    run: RunRecord
    status: str
    results: tuple[CaseResult, ...]
    outcomes: Mapping[str, int]
    kinds_by_backend: tuple[tuple[str, Mapping[str, int]], ...]
    previous_id: str | None
    changes: tuple[Change, ...]
    unexpected: tuple[CaseResult, ...]  # outcomes that fail the run, in stored order


@dataclass(frozen=True)
class Report:
    built_at: str
    runs: int
    latest: LatestRun | None
    filters: tuple[Filter, ...]
    sections: tuple[Section, ...]
    title: str = TITLE

    @property
    def navigation(self) -> tuple[tuple[str, str], ...]:
        """(section id, name) of the sections this report has."""
        present = {section.id for section in self.sections}
        return tuple((key, name) for key, name in SECTIONS.items() if key in present)

    @property
    def glance(self) -> Glance | None:
        """The latest run in one line: what fails it, and what changed since the previous one."""
        latest = self.latest
        if latest is None:
            return None
        changes = [c.change for c in latest.changes]
        return Glance(
            latest.run.run_id,
            len(latest.results),
            latest.outcomes.get("unexpected", 0),
            latest.outcomes.get("unexpected-pass", 0),
            latest.previous_id,
            changes.count("new failure"),
            changes.count("fixed"),
            latest.status,
        )

    @property
    def listings(self) -> tuple[Listing, ...]:
        found = (getattr(section, "listing", None) for section in self.sections)
        return tuple(listing for listing in found if listing is not None)
