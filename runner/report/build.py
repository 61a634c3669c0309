"""Building the report model (``model.py``) from the history: every analysis call of the
report happens here, once; the page, summary.md and junit.xml only lay out what this returns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd
from markupsafe import Markup

from runner.history import CaseResult
from runner.newcase import case_snippet, node_text
from runner.report import analysis
from runner.report.analysis import KIND_LABELS, KIND_RANK, outcome_kind
from runner.report.history import History
from runner.report.model import (
    FILTERS,
    GRID_RUNS,
    NO_BUNDLE,
    Attrs,
    Badge,
    CaseRow,
    Cell,
    Change,
    ChangesSection,
    ErrorRow,
    ErrorsSection,
    Failure,
    FailuresSection,
    Filter,
    FlakyRow,
    FlakySection,
    GridSection,
    LatestRun,
    LatestSection,
    Link,
    Listing,
    Mark,
    NoRunsSection,
    PivotSection,
    Report,
    Row,
    RunsSection,
    SpeedupRow,
    SpeedupSection,
    Table,
    VersionChange,
    VersionsSection,
    case_anchor,
    missing,
    num,
    result_anchor,
    run_label,
    text,
)
from runner.report.svg import line_chart, sparkline, stacked_bars
from runner.repro.command import repro_command
from runner.verdicts import FAILING_OUTCOMES, VERDICT_CODES, VERDICTS


def facet_attrs(row: Mapping[str, Any], keys: tuple[str, ...] = tuple(FILTERS)) -> Attrs:
    """The filter attributes of a row; a row without a key ignores that filter."""
    values = {k: row.get(k) for k in keys}
    if "bundle" in values:
        values["bundle"] = NO_BUNDLE if missing(values["bundle"]) else values["bundle"]
    return tuple((k, text(v)) for k, v in values.items())


def any_attrs(suite: str, values: Mapping[str, list[str]]) -> Attrs:
    """Filter attributes of a row that spans several backends and verdicts: it matches a
    filter when one of its columns does (``data-any-KEY``, space-separated: backend ids,
    builds and verdicts hold no spaces)."""
    lists = tuple((f"any-{k}", " ".join(dict.fromkeys(v))) for k, v in values.items())
    return (("suite", text(suite)), *lists)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict) and value:
        return [
            pair
            for k, v in value.items()
            for pair in _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        ]
    return [(prefix, value if isinstance(value, str) else json.dumps(value))]


def _filters(results: pd.DataFrame) -> tuple[Filter, ...]:
    filters = []
    for key, label in FILTERS.items():
        column = results[key] if key in results else pd.Series(dtype=object)
        values = sorted({NO_BUNDLE if missing(v) else str(v) for v in column})
        filters.append(Filter(key, label, tuple(values)))
    return tuple(filters)


def _latest_run(
    history: History, latest: pd.Series, results: pd.DataFrame, detailed: set[str]
) -> LatestRun:
    """`detailed`: the result ids with a failure block, where a change links to."""
    previous_id = analysis.previous_comparable(history, latest["run_id"])
    changed = analysis.changes(history, latest["run_id"], previous_id)
    changes = tuple(
        Change(
            row["change"],
            row["case_id"],
            row["result_id"],
            result_anchor(row["result_id"])
            if row["result_id"] in detailed
            else case_anchor(row["case_id"]),
            row["before_verdict"],
            row["before_outcome"],
            row["verdict"],
            row["outcome"],
            Link.bug(row["bug"]),
            facet_attrs(row),
        )
        for row in changed.to_dict("records")
    )
    kinds = [
        outcome_kind(o, v) for o, v in zip(results["outcome"], results["verdict"], strict=True)
    ]
    counts = pd.crosstab(results["backend"], pd.Series(kinds, index=results.index, name="kind"))
    by_backend = tuple(
        (backend, {k: int(counts.at[backend, k]) if k in counts else 0 for k in KIND_LABELS})
        for backend in counts.index
    )
    records = tuple(results["record"])
    return LatestRun(
        run=latest["record"],
        status=str(latest["status"]),
        results=records,
        outcomes={k: int(v) for k, v in results["outcome"].value_counts().items()},
        kinds_by_backend=by_backend,
        previous_id=previous_id,
        changes=changes,
        unexpected=tuple(r for r in records if r.outcome in FAILING_OUTCOMES),
    )


def _latest_section(latest: pd.Series, results: pd.DataFrame) -> LatestSection:
    run = latest["record"]
    status = str(latest["status"])
    why = run.message or (
        "the run never recorded its end: it is still running or was killed"
        if status == "running"
        else ""
    )
    by_verdict = by_outcome = None
    if not results.empty:
        crosstab = pd.crosstab(
            results["verdict"], results["backend"], margins=True, margins_name="all"
        )
        by_verdict = Table(
            "verdict",
            tuple(crosstab.columns),
            tuple((v, tuple(int(n) for n in row)) for v, row in crosstab.iterrows()),
        )
        outcomes = results["outcome"].value_counts()
        by_outcome = Table(
            "outcome", ("results",), tuple((k, (int(n),)) for k, n in outcomes.items())
        )
    return LatestSection(
        run_id=latest["run_id"],
        status=status,
        why=why.rstrip("."),
        results=len(results),
        planned=text(run.cases or "?"),
        injected=tuple(run.options.get("inject") or ()),
        started=text(latest["started"]),
        ended=text(latest["ended"]),
        suites=tuple(run.suites),
        options=json.dumps(run.options, sort_keys=True),
        by_verdict=by_verdict,
        by_outcome=by_outcome,
        environment=tuple(_flatten(run.environment)),
    )


def _runs_section(history: History) -> RunsSection:
    counts = analysis.kind_counts(history)
    started = history.runs.set_index("run_id")["started"]
    bars = []
    for run_id, row in counts.iterrows():
        when = pd.to_datetime(started[run_id], errors="coerce", utc=True)
        label = ("?",) if pd.isna(when) else (f"{when:%Y-%m-%d}", f"{when:%H:%M}")
        bars.append((label, f"{run_id}, started {started[run_id]}", row.to_dict()))
    kinds = {kind: KIND_LABELS[kind] for kind in sorted(KIND_LABELS, key=KIND_RANK.get)}
    chart = stacked_bars(bars, kinds, "results per run", "results", analysis.FAILING_KINDS)
    return RunsSection(len(counts), Markup(chart))


def _changes_section(history: History, latest: LatestRun) -> ChangesSection:
    if latest.previous_id is None:
        return ChangesSection(None, "", None)
    previous = history.runs[history.runs["run_id"] == latest.previous_id].iloc[0]
    rows = list(latest.changes)
    listing = Listing.of("changes", rows, [True] * len(rows), "changes") if rows else None
    return ChangesSection(latest.previous_id, text(previous["started"]), listing)


def _pivot_section(latest: pd.DataFrame, detailed: set[str]) -> PivotSection:
    if latest.empty:
        return PivotSection(0, 0, (), (), None)
    pivot = analysis.latest_pivot(latest)
    columns = pivot["kind"].columns
    fields = ("verdict", "outcome", "kind", "result_id", "suite", "bundle")
    arrays = {f: pivot[f].to_numpy() for f in fields}
    backends = columns.get_level_values(0)
    rows: list[Row] = []
    for n, key in enumerate(pivot.index):
        values = {f: array[n] for f, array in arrays.items()}
        ran = [i for i, kind in enumerate(values["kind"]) if not missing(kind)]
        cells = tuple(
            Cell.of(
                *(values[f][i] for f in ("verdict", "outcome", "kind")),
                target=result_anchor(values["result_id"][i])
                if values["result_id"][i] in detailed
                else "",
            )
            for i in range(len(columns))
        )
        lists = {
            "backend": [backends[i] for i in ran],
            "bundle": [
                NO_BUNDLE if missing(values["bundle"][i]) else values["bundle"][i] for i in ran
            ],
            "verdict": sorted({values["verdict"][i] for i in ran}),
        }
        rows.append(CaseRow(key, cells, attrs=any_attrs(values["suite"][ran[0]], lists)))
    failing = (~analysis.quiet(pivot["kind"])).tolist()
    # Its folded rows stay in the page: a few hundred at most, readable without scripts.
    listing = Listing.of(
        "pivot",
        rows,
        failing,
        "failing cases",
        "cases that passed or were skipped",
        into_data=False,
    )
    spans = tuple((b, int((backends == b).sum())) for b in dict.fromkeys(backends))
    return PivotSection(len(latest), len(pivot), spans, tuple(m for _, m in columns), listing)


def _versions_section(latest: pd.DataFrame, detailed: set[str]) -> VersionsSection | None:
    """The latest run's cases by version, and what changed from one version to the next;
    None when the run had one version."""
    grid = analysis.version_grid(latest)
    if grid.empty:
        return None
    versions = list(grid["verdict"].columns)
    labels = grid["label"].apply(
        lambda column: column.dropna().iloc[0] if column.notna().any() else ""
    )
    rows = tuple(
        CaseRow(
            key,
            tuple(
                Cell.of(
                    grid.at[key, ("verdict", v)],
                    grid.at[key, ("outcome", v)],
                    grid.at[key, ("kind", v)],
                    target=result_anchor(grid.at[key, ("result_id", v)])
                    if grid.at[key, ("result_id", v)] in detailed
                    else "",
                )
                for v in versions
            ),
        )
        for key in grid.index
    )
    changes = tuple(
        VersionChange(c["case"], c["from"], c["to"], c["before"], c["after"])
        for c in analysis.version_changes(grid).to_dict("records")
    )
    return VersionsSection(tuple((text(labels[v]), v) for v in versions), rows, changes)


def _grid_section(window: pd.DataFrame, run_ids: list[str], runs: pd.DataFrame) -> GridSection:
    title = f"Case by run (last {len(run_ids)} runs)"
    if window.empty:
        return GridSection((), None, title=title)
    position = {r: i for i, r in enumerate(runs["run_id"])}
    record = runs.set_index("run_id")
    grid = analysis.status_grid(window, run_ids)
    facets = analysis.case_facets(window)
    heads = tuple(
        (
            run_label(position[r]),
            f"{r} · {text(record.at[r, 'started'])} · {text(record.at[r, 'status'])}",
        )
        for r in run_ids
    )
    fields = [grid[f].to_numpy() for f in ("verdict", "outcome", "kind")]
    rows: list[Row] = [
        CaseRow(
            case_id,
            tuple(
                Cell.of(*(f[n, i] for f in fields), title=f"{run_label(position[r])} {r}: ")
                for i, r in enumerate(run_ids)
            ),
            anchor=case_anchor(case_id),
            attrs=facet_attrs(facets.loc[case_id]),
        )
        for n, case_id in enumerate(grid.index)
    ]
    failing = (~analysis.quiet(grid["kind"])).tolist()
    listing = Listing.of(
        "grid", rows, failing, "failing cases", "cases that passed or were skipped"
    )
    return GridSection(heads, listing, title=title)


def _flaky_section(flaky: pd.DataFrame) -> FlakySection:
    rows: list[Row] = [
        FlakyRow(
            row["case_id"],
            int(row["flips"]),
            int(row["runs"]),
            tuple(
                Mark(outcome_kind(o, v), VERDICT_CODES.get(v, "?"), f"{v} ({o})")
                for v, o in zip(row["verdicts"], row["outcomes"], strict=True)
            ),
            facet_attrs(row),
        )
        for row in flaky.to_dict("records")
    ]
    listing = Listing.of("flaky", rows, [True] * len(rows), "cases") if rows else None
    return FlakySection(analysis.FLAKY_MIN_FLIPS, listing)


def _errors_section(trends: pd.DataFrame, x_range: tuple[int, int]) -> ErrorsSection:
    if trends.empty:
        return ErrorsSection(None)
    rows: list[Row] = []
    for row in trends.to_dict("records"):
        tolerance = None if missing(row["tolerance"]) else row["tolerance"]
        spark = sparkline(
            row["points"], x_range, tolerance, label=f"max abs error of {row['case_id']}"
        )
        rows.append(
            ErrorRow(
                row["case_id"],
                Markup(spark),
                num(row["latest"]),
                tolerance is not None and row["latest"] > tolerance,
                num(row["worst"]),
                num(row["tolerance"]),
                facet_attrs(row),
            )
        )
    listing = Listing.of(
        "errors",
        rows,
        trends["over"].tolist(),
        "cases over tolerance",
        "cases within tolerance in every run",
    )
    return ErrorsSection(listing)


def _speedup_section(pairs: pd.DataFrame) -> SpeedupSection:
    if pairs.empty:
        return SpeedupSection(None, ())
    trend = analysis.speedup_trend(pairs)
    series = {
        backend: [(int(i), float(v)) for i, v in trend[backend].dropna().items()]
        for backend in trend.columns
    }
    chart = line_chart(
        series,
        {int(i): run_label(int(i)) for i in trend.index},
        "median speedup per run",
        "speedup (x)",
        baseline=1.0,
    )
    latest_index = pairs.groupby("backend")["run_index"].max()
    latest = pairs[pairs["run_index"] == pairs["backend"].map(latest_index)]
    rows = tuple(
        SpeedupRow(
            backend,
            run_label(int(latest_index[backend])),
            len(now),
            f"{now['speedup'].median():.2f}x",
            f"{now['speedup'].min():.2f}x",
            f"{now['speedup'].max():.2f}x",
            facet_attrs(
                {"backend": backend, "bundle": now["bundle"].iloc[0]}, ("backend", "bundle")
            ),
        )
        for backend, now in sorted(
            latest.groupby("backend"), key=lambda group: group[1]["speedup"].median()
        )
    )
    return SpeedupSection(Markup(chart), rows)


def _failure(record: CaseResult) -> Failure:
    layout = text(record.layout)
    if record.layout_order:
        layout += f" · order {', '.join(record.layout_order)}"
    if record.layout_values:
        layout += f" · values {json.dumps(record.layout_values, sort_keys=True)}"
    tolerance = record.tolerance
    trace = record.trace
    return Failure(
        anchor=result_anchor(record.result_id),
        attrs=facet_attrs(record.to_dict()),
        open=record.outcome in FAILING_OUTCOMES,
        badge=Badge.of(record.outcome, record.verdict),
        case_id=record.case_id,
        verdict=record.verdict,
        meaning=VERDICTS.get(record.verdict, ""),
        result_id=record.result_id,
        run_id=record.run_id,
        suite=text(record.suite),
        suite_path=text(record.suite_path),
        model_shape=f"{record.model} · {', '.join(f'{k}={v}' for k, v in record.shape.items())}",
        layout=layout,
        backend=f"{record.backend} · {record.capture}"
        + (" (revisit: first layout captured again)" if record.revisit else ""),
        injected=", ".join(record.injected),
        verdicts=", ".join(record.verdicts),
        expected=", ".join(record.expected),
        bug=Link.bug(record.bug),
        reason=text(record.reason),
        attribution=text(record.attribution),
        stale_from=text(record.stale_from),
        divergent_node=node_text(record.divergent_node) if record.divergent_node else "",
        error=f"max abs {num(record.max_abs_error)}, max rel {num(record.max_rel_error)} "
        f"(tolerance abs {num(tolerance.get('abs'))}, rel {num(tolerance.get('rel'))})",
        trace=", ".join(f"{k} {v}" for k, v in trace.items() if k != "errors"),
        trace_errors=tuple(str(e) for e in trace.get("errors") or ()),
        message=text(record.message),
        snippet=case_snippet(record),
        repro=repro_command(record) or "",
    )


def _failures_section(failures: pd.DataFrame) -> FailuresSection:
    if failures.empty:
        return FailuresSection(None)
    blocks: list[Row] = [_failure(r) for r in failures["record"]]
    return FailuresSection(Listing.of("failures", blocks, [True] * len(blocks), "failures"))


def build_report(history: History, built_at: str, grid_runs: int = GRID_RUNS) -> Report:
    """The whole report of `history`; the grid and trends cover the last `grid_runs` runs."""
    latest_row = analysis.latest_run(history)
    if latest_row is None:
        return Report(built_at, 0, None, _filters(history.results), (NoRunsSection(),))
    results = history.run_results(latest_row["run_id"])
    failures = analysis.report_failures(results)
    detailed = set(failures["result_id"])
    latest = _latest_run(history, latest_row, results, detailed)
    run_ids = analysis.recent_runs(history, grid_runs)
    window = analysis.in_runs(history, run_ids)
    positions = history.runs.index[history.runs["run_id"].isin(run_ids)]
    x_range = (int(positions.min()), int(positions.max())) if len(positions) else (0, 0)
    sections = (
        _latest_section(latest_row, results),
        _runs_section(history),
        _changes_section(history, latest),
        _pivot_section(results, detailed),
        _versions_section(results, detailed),
        _grid_section(window, run_ids, history.runs),
        _flaky_section(analysis.flaky_cases(window)),
        _errors_section(analysis.error_trends(window), x_range),
        _speedup_section(analysis.speedups(window)),
        _failures_section(failures),
    )
    return Report(
        built_at,
        len(history.runs),
        latest,
        _filters(pd.concat([window, results])),
        tuple(section for section in sections if section is not None),
    )
