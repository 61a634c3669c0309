"""The report page: one self-contained HTML file (inline CSS, inline SVG, a small filter script).

Every value that comes from a suite or a run (case ids, messages, bug links, suite names,
reasons, environment) passes through ``esc``; pandas tables use ``to_html(escape=True)``. A
Content-Security-Policy forbids every request, so the page reads the same offline.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from html import escape
from typing import Any

import pandas as pd

from runner.report import analysis
from runner.report.analysis import KIND_LABELS, outcome_kind
from runner.report.history import History
from runner.report.links import bug_url
from runner.report.newcase import case_snippet, node_text
from runner.report.svg import line_chart, sparkline
from runner.verdicts import VERDICTS

GRID_RUNS = 20  # runs shown in the status grid and used for flakiness and trends

FILTERS = {"backend": "backend", "bundle": "build", "verdict": "verdict", "suite": "suite"}

NO_BUNDLE = "none"  # the build filter's value for backends without builds (wgpu, reference)

VERDICT_CODES = {  # one per runner.verdicts.VERDICTS; the legend lists them in that order
    "pass": "✓",
    "skipped": "–",
    "stale-layout": "SL",
    "wrong-graph": "WG",
    "stale-input": "SI",
    "capture-not-engaged": "NE",
    "capture-mismatch": "CM",
    "nondeterministic": "ND",
    "reference-mismatch": "RM",
    "capture-unsupported": "CU",
    "unsupported-op": "UO",
    "timeout": "TO",
    "error": "ER",
    "expected-mismatch": "EM",
}

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)

STYLE = """
:root { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1f24; }
body { margin: 0; background: #f6f7f9; }
header { background: #fff; border-bottom: 1px solid #d8dee4; padding: 12px 24px;
  position: sticky; top: 0; z-index: 2; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 0 0 10px; }
main { padding: 16px 24px 48px; max-width: 1400px; }
section { background: #fff; border: 1px solid #d8dee4; border-radius: 6px; padding: 14px 18px;
  margin: 0 0 16px; overflow-x: auto; }
nav a { margin-right: 14px; }
a { color: #0b5cad; }
code, pre, .case { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre { background: #f3f4f6; padding: 8px 10px; border-radius: 4px; white-space: pre-wrap;
  word-break: break-word; margin: 4px 0; }
table { border-collapse: collapse; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eaecef; text-align: left;
  vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.glance { margin: 4px 0 8px; font-size: 15px; }
.badge { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px;
  font-weight: 600; white-space: nowrap; }
.o-pass { background: #e6f4ea; color: #1e6b34; }
.o-known { background: #fff4d6; color: #7a5200; }
.o-unexpected { background: #fde7e9; color: #a8071a; }
.o-xpass { background: #e3eefc; color: #0b4aa2; }
.o-skipped { background: #eeeff1; color: #59636e; }
.banner { padding: 8px 12px; border-radius: 4px; margin: 0 0 10px; font-weight: 600; }
.warn { background: #fff4d6; border: 1px solid #e8c35a; }
.counts-row { display: flex; gap: 28px; flex-wrap: wrap; align-items: flex-start; }
#filters { display: flex; gap: 14px; flex-wrap: wrap; align-items: center; margin-top: 8px; }
#filters label { font-weight: 600; }
#filters select { margin-left: 4px; }
#shown { color: #59636e; }
.grid td.v { text-align: center; min-width: 24px; font-size: 11px; font-weight: 700;
  padding: 2px 3px; border: 1px solid #fff; }
.grid th.run { font-size: 11px; text-align: center; padding: 2px 3px; }
.strip span { display: inline-block; min-width: 22px; text-align: center; font-size: 11px;
  font-weight: 700; margin-right: 1px; border-radius: 2px; }
details.failure { border: 1px solid #d8dee4; border-radius: 4px; margin: 0 0 8px;
  padding: 6px 10px; }
details.failure > summary { cursor: pointer; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 8px 0; }
dt { font-weight: 600; color: #424a53; }
dd { margin: 0; }
svg text { font: 11px system-ui, sans-serif; fill: #424a53; }
svg .title { font-size: 13px; font-weight: 600; fill: #1b1f24; }
svg .ytick { text-anchor: end; } svg .xtick { text-anchor: middle; }
svg .ylabel { text-anchor: middle; }
svg .grid { stroke: #eaecef; } svg .baseline { stroke: #8c959f; stroke-dasharray: 4 3; }
svg.spark .line { fill: none; stroke: #0b5cad; stroke-width: 1.5; }
svg.spark .dot { fill: #0b5cad; } svg.spark .over { fill: #c62828; }
svg.spark .tol { stroke: #c62828; stroke-dasharray: 3 3; stroke-width: 1; }
.muted { color: #59636e; }
[hidden] { display: none !important; }
section, details, tr { scroll-margin-top: 150px; }  /* anchors clear the sticky header */
"""

SCRIPT = """
(() => {
  const form = document.getElementById("filters");
  const keys = Array.from(form.querySelectorAll("select"), (select) => select.name);
  const rows = document.querySelectorAll("[data-filter]");
  function apply() {
    let shown = 0;
    for (const row of rows) {
      const keep = keys.every((key) => {
        const wanted = form.elements[key].value;
        return !wanted || row.dataset[key] === undefined || row.dataset[key] === wanted;
      });
      row.hidden = !keep;
      shown += keep ? 1 : 0;
    }
    document.getElementById("shown").textContent = `${shown} of ${rows.length} rows shown`;
  }
  form.addEventListener("change", apply);
  document.getElementById("clear").addEventListener("click", () => {
    for (const key of keys) form.elements[key].value = "";
    apply();
  });
  apply();
})();
"""


def esc(value: Any) -> str:
    return "" if _missing(value) else escape(str(value), quote=True)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def num(value: Any) -> str:
    return "—" if _missing(value) else f"{value:.3g}"


def case_anchor(case_id: str) -> str:
    return "case-" + hashlib.sha1(case_id.encode()).hexdigest()[:12]


def result_anchor(result_id: str) -> str:
    return "result-" + result_id


def bug_html(bug: str | None) -> str:
    """A bug reference: a link only for http(s) URLs and owner/repo#N ids, else plain text."""
    if _missing(bug) or not bug:
        return ""
    url = bug_url(bug)
    return f'<a href="{esc(url)}" rel="noreferrer">{esc(bug)}</a>' if url else esc(bug)


def badge(outcome: str, verdict: str, text: str | None = None) -> str:
    kind = outcome_kind(outcome, verdict)
    return f'<span class="badge o-{kind}">{esc(text or KIND_LABELS[kind])}</span>'


def facet_attrs(row: Mapping[str, Any], keys: tuple[str, ...] = tuple(FILTERS)) -> str:
    """data-* attributes the filter script matches; a row without a key ignores that filter."""
    values = {k: row.get(k) for k in keys}
    if "bundle" in values:
        values["bundle"] = NO_BUNDLE if _missing(values["bundle"]) else values["bundle"]
    return "data-filter " + " ".join(f'data-{k}="{esc(v)}"' for k, v in values.items())


def case_link(case_id: str, target: str | None = None) -> str:
    return f'<a class="case" href="#{esc(target or case_anchor(case_id))}">{esc(case_id)}</a>'


def _run_label(position: int) -> str:
    return f"#{position + 1}"


def _section(section_id: str, title: str, body: str) -> str:
    return f'<section id="{section_id}"><h2>{esc(title)}</h2>{body}</section>'


def _table(headers: list[str], rows: list[str], numeric: set[str] = frozenset()) -> str:
    head = "".join(
        f'<th class="num">{esc(h)}</th>' if h in numeric else f"<th>{esc(h)}</th>" for h in headers
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict) and value:
        return [
            pair
            for k, v in value.items()
            for pair in _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        ]
    return [(prefix, value if isinstance(value, str) else json.dumps(value))]


# --- header and filters -------------------------------------------------------------------


def _filters(results: pd.DataFrame) -> str:
    selects = []
    for key, label in FILTERS.items():
        column = results[key] if key in results else pd.Series(dtype=object)
        values = sorted({NO_BUNDLE if _missing(v) else str(v) for v in column})
        options = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
        selects.append(
            f'<label>{esc(label)}<select name="{key}"><option value="">all</option>'
            f"{options}</select></label>"
        )
    return (
        f'<form id="filters" onsubmit="return false">{"".join(selects)}'
        '<button type="button" id="clear">clear filters</button><span id="shown"></span>'
        "</form>"
    )


def _glance(
    latest_results: pd.DataFrame, changed: pd.DataFrame, latest: pd.Series, previous: str | None
) -> str:
    outcomes = latest_results["outcome"].value_counts()
    kinds = changed["change"].value_counts()
    unexpected = outcomes.get("unexpected", 0)
    unexpected_pass = outcomes.get("unexpected-pass", 0)
    parts = [
        f"Latest run <code>{esc(latest['run_id'])}</code>: {len(latest_results)} results",
        badge("unexpected", "error", f"{unexpected} unexpected"),
        badge("unexpected-pass", "pass", f"{unexpected_pass} unexpected pass"),
    ]
    if previous:
        parts.append(
            f"since <code>{esc(previous)}</code>: "
            f"{kinds.get('new failure', 0)} new failures, {kinds.get('fixed', 0)} fixed"
        )
    status = latest["status"]
    if status != "complete":
        parts.append(f'<span class="badge o-known">run {esc(status)}</span>')
    return f'<p class="glance">{" · ".join(parts)}</p>'


# --- sections -----------------------------------------------------------------------------


def _latest_section(latest: pd.Series, results: pd.DataFrame) -> str:
    run = latest["record"]
    status = latest["status"]
    body = []
    if status != "complete":
        why = run.get("message") or (
            "the run never recorded its end: it is still running or was killed"
            if status == "running"
            else ""
        )
        said = f" — {esc(why.rstrip('.'))}" if why else ""
        body.append(
            f'<p class="banner warn">Run status: {esc(status)}{said}. '
            f"{len(results)} of {esc(run.get('cases', '?'))} planned cases have results; "
            "everything below covers those only.</p>"
        )
    injected = (run.get("options") or {}).get("inject")
    if injected:
        body.append(
            f'<p class="banner warn">Faults injected on purpose: {esc(", ".join(injected))}</p>'
        )
    facts = [
        ("run", f"<code>{esc(latest['run_id'])}</code>"),
        ("status", esc(status)),
        ("started", esc(latest["started"])),
        ("ended", esc(latest["ended"]) or "—"),
        ("suites", "<br>".join(esc(s) for s in run.get("suites") or []) or "—"),
        ("options", esc(json.dumps(run.get("options") or {}, sort_keys=True))),
    ]
    body.append("<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>")
    if results.empty:
        body.append('<p class="muted">No results recorded in this run.</p>')
    else:
        by_verdict = pd.crosstab(
            results["verdict"], results["backend"], margins=True, margins_name="all"
        ).rename_axis(index=None, columns="verdict")
        by_outcome = results["outcome"].value_counts().rename("results").to_frame()
        by_outcome = by_outcome.rename_axis(index=None, columns="outcome")
        body.append(
            '<div class="counts-row"><div><h3>Results by verdict and backend</h3>'
            f"{by_verdict.to_html(escape=True, border=0)}</div>"
            f"<div><h3>By outcome</h3>{by_outcome.to_html(escape=True, border=0)}</div></div>"
        )
    environment = pd.DataFrame(_flatten(run.get("environment") or {}), columns=["key", "value"])
    body.append(
        "<details><summary>Environment</summary>"
        f"{environment.to_html(escape=True, index=False, border=0)}</details>"
    )
    return _section("latest", "Latest run", "".join(body))


def _changes_section(changed: pd.DataFrame, previous: pd.Series | None, detailed: set[str]) -> str:
    if previous is None:
        return _section(
            "changes",
            "Changes since the previous comparable run",
            '<p class="muted">No earlier run shares a case with the latest one.</p>',
        )
    intro = (
        f"<p>Compared with run <code>{esc(previous['run_id'])}</code> "
        f"(started {esc(previous['started'])}), case by case.</p>"
    )
    if changed.empty:
        return _section(
            "changes",
            "Changes since the previous comparable run",
            intro + '<p class="muted">No verdict changed.</p>',
        )
    rows = []
    for row in changed.to_dict("records"):
        target = result_anchor(row["result_id"]) if row["result_id"] in detailed else None
        before = (
            badge(row["before_outcome"], row["before_verdict"], row["before_verdict"])
            if row["before_verdict"]
            else '<span class="muted">not run</span>'
        )
        rows.append(
            f"<tr {facet_attrs(row)}><td>{esc(row['change'])}</td>"
            f"<td>{case_link(row['case_id'], target)}</td><td>{before}</td>"
            f"<td>{badge(row['outcome'], row['verdict'], row['verdict'])}</td>"
            f"<td>{bug_html(row['bug'])}</td></tr>"
        )
    table = _table(["change", "case", "before", "now", "bug"], rows)
    return _section("changes", "Changes since the previous comparable run", intro + table)


def _legend() -> str:
    kinds = "".join(f'<span class="badge o-{k}">{esc(v)}</span> ' for k, v in KIND_LABELS.items())
    codes = ", ".join(f"{esc(VERDICT_CODES[name])} {esc(name)}" for name in VERDICTS)
    return f'<p>{kinds}<br><span class="muted">{codes}</span></p>'


def _grid_section(window: pd.DataFrame, run_ids: list[str], runs: pd.DataFrame) -> str:
    title = f"Case by run (last {len(run_ids)} runs)"
    if window.empty:
        return _section("grid", title, '<p class="muted">No results yet.</p>')
    position = {r: i for i, r in enumerate(runs["run_id"])}
    record = runs.set_index("run_id")
    grid = analysis.status_grid(window, run_ids)
    facets = analysis.case_facets(window)
    head = "".join(
        f'<th class="run" title="{esc(r)} · {esc(record.at[r, "started"])} · '
        f'{esc(record.at[r, "status"])}">{_run_label(position[r])}</th>'
        for r in run_ids
    )
    rows = []
    for case_id in grid.index:
        cells = []
        for r in run_ids:
            verdict, outcome = grid.at[case_id, ("verdict", r)], grid.at[case_id, ("outcome", r)]
            if _missing(verdict):
                cells.append('<td class="v" title="not run"></td>')
                continue
            kind = outcome_kind(outcome, verdict)
            cells.append(
                f'<td class="v o-{kind}" title="{esc(r)}: {esc(verdict)} '
                f'({esc(outcome)})">{esc(VERDICT_CODES.get(verdict, "?"))}</td>'
            )
        rows.append(
            f'<tr id="{case_anchor(case_id)}" {facet_attrs(facets.loc[case_id])}>'
            f'<td class="case">{esc(case_id)}</td>{"".join(cells)}</tr>'
        )
    table = (
        f'<table class="grid"><thead><tr><th>case</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return _section("grid", title, _legend() + table)


def _strip(verdicts: list[str], outcomes: list[str]) -> str:
    return (
        '<span class="strip">'
        + "".join(
            f'<span class="o-{outcome_kind(o, v)}" title="{esc(v)} ({esc(o)})">'
            f"{esc(VERDICT_CODES.get(v, '?'))}</span>"
            for v, o in zip(verdicts, outcomes, strict=True)
        )
        + "</span>"
    )


def _flaky_section(flaky: pd.DataFrame) -> str:
    title = "Flaky cases"
    intro = (
        f"<p>Cases whose verdict flipped {analysis.FLAKY_MIN_FLIPS} or more times in the "
        "runs above (oldest first).</p>"
    )
    if flaky.empty:
        return _section("flaky", title, intro + '<p class="muted">None.</p>')
    rows = [
        f"<tr {facet_attrs(row)}><td>{case_link(row['case_id'])}</td>"
        f'<td class="num">{row["flips"]}</td><td class="num">{row["runs"]}</td>'
        f"<td>{_strip(row['verdicts'], row['outcomes'])}</td></tr>"
        for row in flaky.to_dict("records")
    ]
    return _section(
        "flaky",
        title,
        intro + _table(["case", "flips", "runs", "verdicts"], rows, {"flips", "runs"}),
    )


def _errors_section(trends: pd.DataFrame, x_range: tuple[int, int]) -> str:
    title = "Error trends (max abs error against the CPU reference)"
    if trends.empty:
        return _section("errors", title, '<p class="muted">No finite errors recorded.</p>')
    rows = []
    for row in trends.to_dict("records"):
        over = not _missing(row["tolerance"]) and row["latest"] > row["tolerance"]
        latest = (
            f'<span class="badge o-unexpected">{num(row["latest"])}</span>'
            if over
            else num(row["latest"])
        )
        spark = sparkline(
            row["points"],
            x_range,
            None if _missing(row["tolerance"]) else row["tolerance"],
            label=f"max abs error of {row['case_id']}",
        )
        rows.append(
            f"<tr {facet_attrs(row)}><td>{case_link(row['case_id'])}</td><td>{spark}</td>"
            f'<td class="num">{latest}</td><td class="num">{num(row["worst"])}</td>'
            f'<td class="num">{num(row["tolerance"])}</td></tr>'
        )
    intro = (
        "<p>Log scale; the dashed red line is the case's tolerance, red dots exceed it. "
        "Worst relative to tolerance first.</p>"
    )
    return _section(
        "errors",
        title,
        intro
        + _table(
            ["case", "over runs", "latest", "worst", "tolerance"],
            rows,
            {"latest", "worst", "tolerance"},
        ),
    )


def _speedup_section(pairs: pd.DataFrame) -> str:
    title = "Capture speedup (eager median run time / replay median run time)"
    if pairs.empty:
        return _section(
            "speedup",
            title,
            '<p class="muted">No capture case with an eager twin and timings yet.</p>',
        )
    trend = analysis.speedup_trend(pairs)
    series = {
        backend: [(int(i), float(v)) for i, v in trend[backend].dropna().items()]
        for backend in trend.columns
    }
    chart = line_chart(
        series,
        {int(i): _run_label(int(i)) for i in trend.index},
        "median speedup per run",
        "speedup (x)",
        baseline=1.0,
    )
    latest_index = pairs.groupby("backend")["run_index"].max()
    rows = []
    for backend, group in pairs.groupby("backend"):
        now = group[group["run_index"] == latest_index[backend]]["speedup"]
        bundle = group["bundle"].iloc[0]
        rows.append(
            f"<tr {facet_attrs({'backend': backend, 'bundle': bundle}, ('backend', 'bundle'))}>"
            f"<td>{esc(backend)}</td><td>{_run_label(int(latest_index[backend]))}</td>"
            f'<td class="num">{len(now)}</td><td class="num">{now.median():.2f}x</td>'
            f'<td class="num">{now.min():.2f}x</td><td class="num">{now.max():.2f}x</td></tr>'
        )
    table = _table(
        ["backend", "latest run", "cases", "median", "min", "max"],
        rows,
        {"cases", "median", "min", "max"},
    )
    intro = (
        "<p>Per backend and build, the median over capture cases whose eager twin ran in "
        "the same run; the dashed line is 1x (replay no faster than eager).</p>"
    )
    return _section("speedup", title, intro + chart + table)


def _failure(record: dict[str, Any]) -> str:
    outcome, verdict = record["outcome"], record["verdict"]
    node = record.get("divergent_node")
    trace = record.get("trace") or {}
    layout = esc(record["layout"])
    if record.get("layout_order"):
        layout += f" · order {esc(', '.join(record['layout_order']))}"
    if record.get("layout_values"):
        layout += f" · values {esc(json.dumps(record['layout_values'], sort_keys=True))}"
    tolerance = record.get("tolerance") or {}
    facts = [
        (
            "result",
            f"<code>{esc(record['result_id'])}</code> in run <code>{esc(record['run_id'])}</code>",
        ),
        ("suite", f"{esc(record['suite'])} <span class='muted'>{esc(record['suite_path'])}</span>"),
        (
            "model · shape",
            f"{esc(record['model'])} · "
            f"{esc(', '.join(f'{k}={v}' for k, v in record['shape'].items()))}",
        ),
        ("layout", layout),
        (
            "backend",
            f"{esc(record['backend'])} · {esc(record['capture'])}"
            + (" (revisit: first layout captured again)" if record.get("revisit") else ""),
        ),
        ("injected faults", esc(", ".join(record.get("injected") or [])) or "—"),
        (
            "verdicts",
            esc(", ".join(record["verdicts"]))
            + f" <span class='muted'>(expected {esc(', '.join(record['expected']))})</span>",
        ),
        ("bug", bug_html(record.get("bug")) or "—"),
        ("reason", esc(record.get("reason")) or "—"),
        ("attribution", esc(record.get("attribution")) or "—"),
        ("stale from", esc(record.get("stale_from")) or "—"),
        ("divergent node", esc(node_text(node)) if node else "—"),
        (
            "error",
            f"max abs {num(record.get('max_abs_error'))}, max rel "
            f"{num(record.get('max_rel_error'))} (tolerance abs {num(tolerance.get('abs'))}, "
            f"rel {num(tolerance.get('rel'))})",
        ),
        (
            "trace",
            esc(", ".join(f"{k} {v}" for k, v in trace.items() if k != "errors"))
            + "".join(f"<pre>{esc(e)}</pre>" for e in trace.get("errors") or []),
        ),
        ("message", f"<pre>{esc(record['message'])}</pre>"),
    ]
    details = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    is_open = " open" if outcome in analysis.FAILING else ""
    return (
        f'<details class="failure" id="{esc(result_anchor(record["result_id"]))}" '
        f"{facet_attrs(record)}{is_open}><summary>{badge(outcome, verdict)} "
        f'<span class="case">{esc(record["case_id"])}</span> — {esc(verdict)}: '
        f"{esc(VERDICTS.get(verdict, ''))}</summary><dl>{details}</dl>"
        f"<p>A case for <code>suites/</code> (also <code>python -m runner new-case "
        f'{esc(record["result_id"])}</code>):</p><pre class="yaml">'
        f"{esc(case_snippet(record))}</pre></details>"
    )


def _failures_section(failures: pd.DataFrame) -> str:
    title = "Failures in the latest run"
    if failures.empty:
        return _section("failures", title, '<p class="muted">No failing verdicts.</p>')
    intro = "<p>Unexpected results first (open); known bugs follow, collapsed.</p>"
    return _section("failures", title, intro + "".join(_failure(r) for r in failures["record"]))


# --- the page -----------------------------------------------------------------------------

SECTIONS = (
    ("latest", "latest run"),
    ("changes", "changes"),
    ("grid", "case × run"),
    ("flaky", "flaky"),
    ("errors", "errors"),
    ("speedup", "speedup"),
    ("failures", "failures"),
)


def _page(title: str, header: str, body: str) -> str:
    nav = "".join(f'<a href="#{k}">{esc(v)}</a>' for k, v in SECTIONS)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>{esc(title)}</h1>{header}<nav>{nav}</nav></header>"
        f"<main>{body}</main><script>{SCRIPT}</script></body></html>\n"
    )


def render_page(history: History, built_at: str, grid_runs: int = GRID_RUNS) -> str:
    """The whole report as one HTML document."""
    title = "WebGPU capture regression report"
    latest = analysis.latest_run(history)
    if latest is None:
        header = f'<p class="muted">Built {esc(built_at)}.</p>' + _filters(history.results)
        body = _section(
            "latest",
            "No runs yet",
            "<p>The history is empty: run "
            "<code>python -m runner run</code> (or <code>nox -s regress</code>), "
            "then <code>python -m runner report</code>.</p>",
        )
        return _page(title, header, body)
    latest_results = history.run_results(latest["run_id"])
    previous_id = analysis.previous_comparable(history, latest["run_id"])
    previous = history.runs[history.runs["run_id"] == previous_id].iloc[0] if previous_id else None
    changed = analysis.changes(history, latest["run_id"], previous_id)
    run_ids = analysis.recent_runs(history, grid_runs)
    window = analysis.in_runs(history, run_ids)
    failures = analysis.report_failures(latest_results)
    positions = history.runs.index[history.runs["run_id"].isin(run_ids)]
    x_range = (int(positions.min()), int(positions.max())) if len(positions) else (0, 0)
    header = (
        f'<p class="muted">Built {esc(built_at)} from {len(history.runs)} runs.</p>'
        + _glance(latest_results, changed, latest, previous_id)
        + _filters(pd.concat([window, latest_results]))
    )
    body = "".join(
        [
            _latest_section(latest, latest_results),
            _changes_section(changed, previous, set(failures["result_id"])),
            _grid_section(window, run_ids, history.runs),
            _flaky_section(analysis.flaky_cases(window)),
            _errors_section(analysis.error_trends(window), x_range),
            _speedup_section(analysis.speedups(window)),
            _failures_section(failures),
        ]
    )
    return _page(title, header, body)
