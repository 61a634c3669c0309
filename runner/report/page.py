"""The report page: one HTML file (inline CSS, inline SVG, a small script) and ``data.js``
beside it.

Failures come first everywhere. What passed (and failing rows past the first ``SHOWN_ROWS`` of a
list) is folded: the pivot's passing rows inline, the long lists' rows in ``data.js``, loaded
when a fold is first opened, so a run of 2,000 results stays a page well under 1 MB that opens
at once. Every value that comes from a suite or a run (case ids, messages, bug links, suite
names, reasons, environment) passes through ``esc``, in the page and in ``data.js`` alike (it
holds rows rendered by the same code); pandas tables use ``to_html(escape=True)``. A
Content-Security-Policy forbids every request but that one script beside the page, so it
reads the same offline, from disk.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from html import escape
from typing import Any

import pandas as pd

from runner.history import CaseResult
from runner.report import analysis
from runner.report.analysis import KIND_LABELS, KIND_RANK, outcome_kind
from runner.report.history import History
from runner.report.links import bug_url
from runner.report.newcase import case_snippet, node_text
from runner.report.svg import line_chart, sparkline, stacked_bars
from runner.repro.command import repro_command
from runner.verdicts import FAILING_OUTCOMES, VERDICTS

GRID_RUNS = 20  # runs shown in the status grid and used for flakiness and trends

# Failing rows a list shows before it folds the rest away with the passing ones: bounds the page
# however much fails.
SHOWN_ROWS = 100

DATA_FILE = "data.js"  # the folded rows, beside index.html

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
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'self' 'unsafe-inline'; "
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
svg .flag { text-anchor: middle; fill: #d1242f; font-weight: 700; }
svg.spark .tol { stroke: #c62828; stroke-dasharray: 3 3; stroke-width: 1; }
.muted { color: #59636e; }
details.fold { margin: 8px 0 0; }
details.fold > summary { cursor: pointer; color: #0b5cad; }
.pivot th.mode { font-size: 11px; font-weight: 500; text-align: center; }
.pivot td.v a { color: inherit; text-decoration: none; }
svg .k-pass { fill: #4ac26b; } svg .k-known { fill: #e3b341; }
svg .k-unexpected { fill: #d1242f; } svg .k-xpass { fill: #388bfd; }
svg .k-skipped { fill: #afb8c1; }
[hidden] { display: none !important; }
section, details, tr { scroll-margin-top: 150px; }  /* anchors clear the sticky header */
"""

SCRIPT = """
(() => {
  const form = document.getElementById("filters");
  const keys = Array.from(form.querySelectorAll("select"), (select) => select.name);
  // A row matches a filter on its own value (data-KEY), or on one of the values of its
  // columns (data-any-KEY, space-separated: the pivot's rows span backends and verdicts).
  function matches(row, key) {
    const wanted = form.elements[key].value;
    if (!wanted) return true;
    if (row.dataset[key] !== undefined) return row.dataset[key] === wanted;
    const any = row.dataset[`any${key[0].toUpperCase()}${key.slice(1)}`];
    return any === undefined || any.split(" ").includes(wanted);
  }
  function apply() {
    const rows = document.querySelectorAll("[data-filter]");
    let shown = 0;
    for (const row of rows) {
      const keep = keys.every((key) => matches(row, key));
      row.hidden = !keep;
      shown += keep ? 1 : 0;
    }
    const folded = document.querySelectorAll("[data-fold]:not([data-filled])").length;
    document.getElementById("shown").textContent =
      `${shown} of ${rows.length} rows shown` + (folded ? "; folded rows load when opened" : "");
  }
  form.addEventListener("change", apply);
  document.getElementById("clear").addEventListener("click", () => {
    for (const key of keys) form.elements[key].value = "";
    apply();
  });

  // Folded rows live in data.js beside the page: loaded once, when a fold is first opened,
  // and each fold's rows inserted when that fold is.
  const bodies = document.querySelectorAll("[data-fold]");
  let loading = null;
  function load() {
    loading ??= new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = "__DATA_FILE__";
      script.onload = () => {
        const data = window.REPORT_DATA;
        if (data?.build === document.body.dataset.build) resolve(data.folds);
        else reject(new Error("__DATA_FILE__ beside this page belongs to another build of it"));
      };
      script.onerror = () => reject(new Error("__DATA_FILE__ beside this page did not load"));
      document.head.append(script);
    }).catch((error) => {
      for (const body of bodies) {
        body.closest("details").querySelector("summary").append(` (${error.message})`);
      }
      return null;
    });
    return loading;
  }
  function fill(body, folds) {
    if (!folds || body.dataset.filled !== undefined) return;
    body.innerHTML = folds[body.dataset.fold];  // markup the report rendered and escaped
    body.dataset.filled = "";
    apply();
  }
  for (const body of bodies) {
    const fold = body.closest("details");
    fold.addEventListener("toggle", () => fold.open && load().then((folds) => fill(body, folds)));
  }
  // A link to a row that is still folded away: load the folds, open its fold, go there.
  function reveal(id) {
    const target = document.getElementById(id);
    if (!target) return;
    for (let fold = target.closest("details"); fold; fold = fold.parentElement.closest("details")) {
      fold.open = true;
    }
    target.scrollIntoView();
  }
  document.addEventListener("click", (event) => {
    const link = event.target.closest('a[href^="#"]');
    const id = link && decodeURIComponent(link.hash.slice(1));
    if (!id || document.getElementById(id)) return;
    event.preventDefault();
    history.pushState(null, "", link.hash);
    find(id);
  });
  function find(id) {
    load().then((folds) => {
      for (const body of bodies) {
        if (folds?.[body.dataset.fold].includes(`id="${id}"`)) fill(body, folds);
      }
      reveal(id);
    });
  }
  const wanted = decodeURIComponent(location.hash.slice(1));
  if (wanted && !document.getElementById(wanted)) find(wanted);
  apply();
})();
""".replace("__DATA_FILE__", DATA_FILE)


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


def _head(headers: list[str], numeric: set[str] = frozenset()) -> str:
    cells = "".join(
        f'<th class="num">{esc(h)}</th>' if h in numeric else f"<th>{esc(h)}</th>" for h in headers
    )
    return f"<table><thead><tr>{cells}</tr></thead>"


def _table(head: str, rows: list[str]) -> str:
    return f"{head}<tbody>{''.join(rows)}</tbody></table>" if rows else ""


def _split(rows: list[str], failing: list[bool]) -> tuple[list[str], list[str], int]:
    """The failing rows a list shows (the first ``SHOWN_ROWS``), the rows it folds (the rest,
    in order), and how many of those fail."""
    shown = set([i for i, fails in enumerate(failing) if fails][:SHOWN_ROWS])
    folded = [row for i, row in enumerate(rows) if i not in shown]
    return [rows[i] for i in sorted(shown)], folded, sum(failing) - len(shown)


def _fold_label(quiet: int, quiet_text: str, more: int, noun: str) -> str:
    """What a fold holds, e.g. '12 more failing cases (past the first 100) and 1,800 cases that
    passed or were skipped'."""
    parts = [f"{more:,} more {noun} (past the first {SHOWN_ROWS})"] if more else []
    return " and ".join(parts + ([f"{quiet:,} {quiet_text}"] if quiet else []))


def _fold(
    folds: dict[str, str] | None, name: str, label: str, items: list[str], head: str | None
) -> str:
    """`items` (table rows under `head`, else blocks) in a closed <details> under `label`:
    inline when `folds` is None, else kept in `folds` for data.js and inserted when the fold is
    first opened."""
    if not items:
        return ""
    body, attrs, note = "".join(items), "", ""
    if folds is not None:
        folds[name] = body
        body, attrs = "", f' data-fold="{esc(name)}"'
        note = (
            f'<noscript><p class="muted">These rows are in {DATA_FILE} beside this page and '
            "need scripts to show.</p></noscript>"
        )
    inner = f"{head}<tbody{attrs}>{body}</tbody></table>" if head else f"<div{attrs}>{body}</div>"
    return f'<details class="fold"><summary>{esc(label)}</summary>{inner}{note}</details>'


def any_attrs(suite: str, values: Mapping[str, list[str]]) -> str:
    """Filter attributes of a row that spans several backends and verdicts: it matches a
    filter when one of its columns does (``data-any-KEY``, space-separated: backend ids,
    builds and verdicts hold no spaces)."""
    lists = " ".join(f'data-any-{k}="{esc(" ".join(dict.fromkeys(v)))}"' for k, v in values.items())
    return f'data-filter data-suite="{esc(suite)}" {lists}'


def _listing(
    folds: dict[str, str] | None,
    name: str,
    head: str | None,
    rows: list[str],
    failing: list[bool],
    noun: str,
    quiet_text: str = "",
) -> str:
    """A list's failing rows (sorted first), up to ``SHOWN_ROWS``; the rest folded (into
    data.js unless `folds` is None). Without `head` the rows are blocks, not table rows."""
    shown, folded, more = _split(rows, failing)
    label = _fold_label(len(folded) - more, quiet_text, more, noun)
    listed = _table(head, shown) if head else "".join(shown)
    return listed + _fold(folds, name, label, folded, head)


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
        why = run.message or (
            "the run never recorded its end: it is still running or was killed"
            if status == "running"
            else ""
        )
        said = f" — {esc(why.rstrip('.'))}" if why else ""
        body.append(
            f'<p class="banner warn">Run status: {esc(status)}{said}. '
            f"{len(results)} of {esc(run.cases or '?')} planned cases have results; "
            "everything below covers those only.</p>"
        )
    injected = run.options.get("inject")
    if injected:
        body.append(
            f'<p class="banner warn">Faults injected on purpose: {esc(", ".join(injected))}</p>'
        )
    facts = [
        ("run", f"<code>{esc(latest['run_id'])}</code>"),
        ("status", esc(status)),
        ("started", esc(latest["started"])),
        ("ended", esc(latest["ended"]) or "—"),
        ("suites", "<br>".join(esc(s) for s in run.suites) or "—"),
        ("options", esc(json.dumps(run.options, sort_keys=True))),
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
    environment = pd.DataFrame(_flatten(run.environment), columns=["key", "value"])
    body.append(
        "<details><summary>Environment</summary>"
        f"{environment.to_html(escape=True, index=False, border=0)}</details>"
    )
    return _section("latest", "Latest run", "".join(body))


def _changes_section(
    changed: pd.DataFrame, previous: pd.Series | None, detailed: set[str], folds: dict[str, str]
) -> str:
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
    head = _head(["change", "case", "before", "now", "bug"])
    table = _listing(folds, "changes", head, rows, [True] * len(rows), "changes")
    return _section("changes", "Changes since the previous comparable run", intro + table)


def _legend() -> str:
    kinds = "".join(f'<span class="badge o-{k}">{esc(v)}</span> ' for k, v in KIND_LABELS.items())
    codes = ", ".join(f"{esc(VERDICT_CODES[name])} {esc(name)}" for name in VERDICTS)
    codes += ", blank: not run"
    return f'<p>{kinds}<br><span class="muted">{codes}</span></p>'


def _cell(verdict: Any, outcome: Any, kind: Any, title: str = "", target: str = "") -> str:
    """One verdict as a coloured code; a link to its failure block when it has one. A pass
    says so by its colour alone (thousands of them: no tooltip)."""
    if _missing(verdict):
        return '<td class="v"></td>'
    if kind == "pass":
        return f'<td class="v o-pass">{VERDICT_CODES["pass"]}</td>'
    code = esc(VERDICT_CODES.get(verdict, "?"))
    if target:
        code = f'<a href="#{esc(target)}">{code}</a>'
    return f'<td class="v o-{kind}" title="{esc(title)}{esc(verdict)} ({esc(outcome)})">{code}</td>'


def _runs_section(history: History) -> str:
    counts = analysis.kind_counts(history)
    started = history.runs.set_index("run_id")["started"]
    bars = []
    for run_id, row in counts.iterrows():
        when = pd.to_datetime(started[run_id], errors="coerce", utc=True)
        label = ("?",) if pd.isna(when) else (f"{when:%Y-%m-%d}", f"{when:%H:%M}")
        bars.append((label, f"{run_id}, started {started[run_id]}", row.to_dict()))
    kinds = {kind: KIND_LABELS[kind] for kind in sorted(KIND_LABELS, key=KIND_RANK.get)}
    chart = stacked_bars(bars, kinds, "results per run", "results", analysis.FAILING_KINDS)
    intro = (
        f"<p>Every run in the history ({len(counts)}), by start time (UTC): its results stacked "
        "by how they read against the suite's expectations, failures at the bottom; the red "
        "number above a bar counts the results that fail the run.</p>"
    )
    return _section("runs", "Results per run", intro + chart)


def _pivot_section(latest: pd.DataFrame, detailed: set[str]) -> str:
    title = "Latest run: case by backend and mode"
    if latest.empty:
        return _section("pivot", title, '<p class="muted">No results in the latest run.</p>')
    pivot = analysis.latest_pivot(latest)
    columns = pivot["kind"].columns
    fields = ("verdict", "outcome", "kind", "result_id", "suite", "bundle")
    arrays = {f: pivot[f].to_numpy() for f in fields}
    backends = columns.get_level_values(0)
    top = "".join(
        f'<th colspan="{(backends == b).sum()}">{esc(b)}</th>' for b in dict.fromkeys(backends)
    )
    modes = "".join(f'<th class="mode">{esc(mode)}</th>' for _, mode in columns)
    head = (
        f'<table class="grid pivot"><thead><tr><th rowspan="2">case</th>{top}</tr>'
        f"<tr>{modes}</tr></thead>"
    )
    rows = []
    for n, key in enumerate(pivot.index):
        values = {f: array[n] for f, array in arrays.items()}
        ran = [i for i, kind in enumerate(values["kind"]) if not _missing(kind)]
        cells = "".join(
            _cell(
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
                NO_BUNDLE if _missing(values["bundle"][i]) else values["bundle"][i] for i in ran
            ],
            "verdict": sorted({values["verdict"][i] for i in ran}),
        }
        rows.append(
            f"<tr {any_attrs(values['suite'][ran[0]], lists)}>"
            f'<td class="case">{esc(key)}</td>{cells}</tr>'
        )
    failing = (~analysis.quiet(pivot["kind"])).tolist()
    intro = (
        f"<p>{len(latest)} results as {len(pivot)} cases (one per model, shape and layout, "
        "or op test case) by backend, build and mode. Failures first; a failing verdict links "
        "to its details.</p>"
    )
    # Its folded rows stay inline (folds=None): a few hundred at most, readable without scripts.
    body = _listing(
        None, "pivot", head, rows, failing, "failing cases", "cases that passed or were skipped"
    )
    return _section("pivot", title, intro + _legend() + body)


def _versions_section(latest: pd.DataFrame, detailed: set[str]) -> str:
    """The latest run's cases by version, and what changed from one version to the next;
    nothing when the run had one version."""
    grid = analysis.version_grid(latest)
    if grid.empty:
        return ""
    versions = list(grid["verdict"].columns)
    labels = grid["label"].apply(
        lambda column: column.dropna().iloc[0] if column.notna().any() else ""
    )
    head = (
        "<tr><th>case</th>"
        + "".join(
            f'<th title="{esc(v)}">{esc(labels[v])}<br><span class="muted">{esc(v)}</span></th>'
            for v in versions
        )
        + "</tr>"
    )
    rows = []
    for key in grid.index:
        cells = "".join(
            _cell(
                grid.at[key, ("verdict", v)],
                grid.at[key, ("outcome", v)],
                grid.at[key, ("kind", v)],
                target=result_anchor(grid.at[key, ("result_id", v)])
                if grid.at[key, ("result_id", v)] in detailed
                else "",
            )
            for v in versions
        )
        rows.append(f'<tr><td class="case">{esc(key)}</td>{cells}</tr>')
    changes = analysis.version_changes(grid)
    listed = "".join(
        f'<tr><td class="case">{esc(c["case"])}</td><td>{esc(c["from"])}</td>'
        f"<td>{esc(c['to'])}</td><td>{esc(c['before'])}</td><td>{esc(c['after'])}</td></tr>"
        for c in changes.to_dict("records")
    )
    changed = "<h3>Changed between versions</h3>" + (
        _table(_head(["case", "from version", "to version", "before", "after"]), [listed])
        if listed
        else '<p class="muted">No verdict differs between consecutive versions.</p>'
    )
    intro = (
        f"<p>{len(grid)} cases on {len(versions)} versions, in the order the run ran them; "
        "a failing verdict links to its details.</p>"
    )
    table = f'<table class="grid"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
    return _section("versions", "Latest run: case by version", intro + _legend() + table + changed)


def _grid_section(
    window: pd.DataFrame, run_ids: list[str], runs: pd.DataFrame, folds: dict[str, str]
) -> str:
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
    head = f'<table class="grid"><thead><tr><th>case</th>{head}</tr></thead>'
    fields = [grid[f].to_numpy() for f in ("verdict", "outcome", "kind")]
    rows = [
        f'<tr id="{case_anchor(case_id)}" {facet_attrs(facets.loc[case_id])}>'
        f'<td class="case">{esc(case_id)}</td>'
        + "".join(
            _cell(*(f[n, i] for f in fields), title=f"{_run_label(position[r])} {r}: ")
            for i, r in enumerate(run_ids)
        )
        + "</tr>"
        for n, case_id in enumerate(grid.index)
    ]
    failing = (~analysis.quiet(grid["kind"])).tolist()
    intro = (
        "<p>Cases failing in their latest run first, then those that failed in an earlier "
        "one; the cases that only passed or were skipped are folded.</p>"
    )
    table = _listing(
        folds, "grid", head, rows, failing, "failing cases", "cases that passed or were skipped"
    )
    return _section("grid", title, intro + _legend() + table)


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


def _flaky_section(flaky: pd.DataFrame, folds: dict[str, str]) -> str:
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
    head = _head(["case", "flips", "runs", "verdicts"], {"flips", "runs"})
    return _section(
        "flaky", title, intro + _listing(folds, "flaky", head, rows, [True] * len(rows), "cases")
    )


def _errors_section(trends: pd.DataFrame, x_range: tuple[int, int], folds: dict[str, str]) -> str:
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
        "Worst relative to tolerance first; the cases always within tolerance are folded.</p>"
    )
    head = _head(
        ["case", "over runs", "latest", "worst", "tolerance"], {"latest", "worst", "tolerance"}
    )
    table = _listing(
        folds,
        "errors",
        head,
        rows,
        trends["over"].tolist(),
        "cases over tolerance",
        "cases within tolerance in every run",
    )
    return _section("errors", title, intro + table)


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
    latest = pairs[pairs["run_index"] == pairs["backend"].map(latest_index)]
    rows = []
    for backend, now in sorted(latest.groupby("backend"), key=lambda g: g[1]["speedup"].median()):
        bundle = now["bundle"].iloc[0]
        rows.append(
            f"<tr {facet_attrs({'backend': backend, 'bundle': bundle}, ('backend', 'bundle'))}>"
            f"<td>{esc(backend)}</td><td>{_run_label(int(latest_index[backend]))}</td>"
            f'<td class="num">{len(now)}</td><td class="num">{now["speedup"].median():.2f}x</td>'
            f'<td class="num">{now["speedup"].min():.2f}x</td>'
            f'<td class="num">{now["speedup"].max():.2f}x</td></tr>'
        )
    head = _head(
        ["backend", "latest run", "cases", "median", "min", "max"],
        {"cases", "median", "min", "max"},
    )
    intro = (
        "<p>Per backend and build, the median over capture cases whose eager twin ran in "
        "the same run, slowest first; the dashed line is 1x (replay no faster than eager).</p>"
    )
    table = _table(head, rows)
    return _section("speedup", title, intro + chart + table)


def _failure(record: CaseResult) -> str:
    outcome, verdict = record.outcome, record.verdict
    node = record.divergent_node
    trace = record.trace
    layout = esc(record.layout)
    if record.layout_order:
        layout += f" · order {esc(', '.join(record.layout_order))}"
    if record.layout_values:
        layout += f" · values {esc(json.dumps(record.layout_values, sort_keys=True))}"
    tolerance = record.tolerance
    facts = [
        (
            "result",
            f"<code>{esc(record.result_id)}</code> in run <code>{esc(record.run_id)}</code>",
        ),
        ("suite", f"{esc(record.suite)} <span class='muted'>{esc(record.suite_path)}</span>"),
        (
            "model · shape",
            f"{esc(record.model)} · {esc(', '.join(f'{k}={v}' for k, v in record.shape.items()))}",
        ),
        ("layout", layout),
        (
            "backend",
            f"{esc(record.backend)} · {esc(record.capture)}"
            + (" (revisit: first layout captured again)" if record.revisit else ""),
        ),
        ("injected faults", esc(", ".join(record.injected)) or "—"),
        (
            "verdicts",
            esc(", ".join(record.verdicts))
            + f" <span class='muted'>(expected {esc(', '.join(record.expected))})</span>",
        ),
        ("bug", bug_html(record.bug) or "—"),
        ("reason", esc(record.reason) or "—"),
        ("attribution", esc(record.attribution) or "—"),
        ("stale from", esc(record.stale_from) or "—"),
        ("divergent node", esc(node_text(node)) if node else "—"),
        (
            "error",
            f"max abs {num(record.max_abs_error)}, max rel "
            f"{num(record.max_rel_error)} (tolerance abs {num(tolerance.get('abs'))}, "
            f"rel {num(tolerance.get('rel'))})",
        ),
        (
            "trace",
            esc(", ".join(f"{k} {v}" for k, v in trace.items() if k != "errors"))
            + "".join(f"<pre>{esc(e)}</pre>" for e in trace.get("errors") or []),
        ),
        ("message", f"<pre>{esc(record.message)}</pre>"),
    ]
    details = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    is_open = " open" if outcome in FAILING_OUTCOMES else ""
    command = repro_command(record)
    repro = (
        "<p>A folder that reproduces it on its own, for an upstream report (a minimal model, "
        f"inputs, expected outputs, a page or script, ISSUE.md): <code>{esc(command)}</code></p>"
        if command
        else ""
    )
    return (
        f'<details class="failure" id="{esc(result_anchor(record.result_id))}" '
        f"{facet_attrs(record.to_dict())}{is_open}><summary>{badge(outcome, verdict)} "
        f'<span class="case">{esc(record.case_id)}</span> — {esc(verdict)}: '
        f"{esc(VERDICTS.get(verdict, ''))}</summary><dl>{details}</dl>"
        f"<p>A case for <code>suites/</code> (also <code>python -m runner new-case "
        f'{esc(record.result_id)}</code>):</p><pre class="yaml">'
        f"{esc(case_snippet(record))}</pre>{repro}</details>"
    )


def _failures_section(failures: pd.DataFrame, folds: dict[str, str]) -> str:
    title = "Failures in the latest run"
    if failures.empty:
        return _section("failures", title, '<p class="muted">No failing verdicts.</p>')
    intro = "<p>Unexpected results first (open); known bugs follow, collapsed.</p>"
    blocks = [_failure(r) for r in failures["record"]]
    listed = _listing(folds, "failures", None, blocks, [True] * len(blocks), "failures")
    return _section("failures", title, intro + listed)


# --- the page -----------------------------------------------------------------------------

SECTIONS = (
    ("latest", "latest run"),
    ("runs", "runs"),
    ("changes", "changes"),
    ("pivot", "case × backend"),
    ("versions", "case × version"),
    ("grid", "case × run"),
    ("flaky", "flaky"),
    ("errors", "errors"),
    ("speedup", "speedup"),
    ("failures", "failures"),
)


def _page(title: str, header: str, body: str, folds: dict[str, str]) -> tuple[str, str]:
    """The page and its data.js; the page accepts only the data.js of its own build."""
    data = json.dumps(folds, sort_keys=True)
    build = hashlib.sha1(data.encode()).hexdigest()[:16]
    script = f'window.REPORT_DATA = {{"build": "{build}", "folds": {data}}};\n'
    nav = "".join(f'<a href="#{k}">{esc(v)}</a>' for k, v in SECTIONS if f'id="{k}"' in body)
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{esc(title)}</title><style>{STYLE}</style></head><body data-build="{build}">'
        f"<header><h1>{esc(title)}</h1>{header}<nav>{nav}</nav></header>"
        f"<main>{body}</main><script>{SCRIPT}</script></body></html>\n"
    )
    return html, script


def render_page(history: History, built_at: str, grid_runs: int = GRID_RUNS) -> tuple[str, str]:
    """The whole report: the HTML document, and the script (``DATA_FILE``) holding its folded
    rows."""
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
        return _page(title, header, body, {})
    latest_results = history.run_results(latest["run_id"])
    previous_id = analysis.previous_comparable(history, latest["run_id"])
    previous = history.runs[history.runs["run_id"] == previous_id].iloc[0] if previous_id else None
    changed = analysis.changes(history, latest["run_id"], previous_id)
    run_ids = analysis.recent_runs(history, grid_runs)
    window = analysis.in_runs(history, run_ids)
    failures = analysis.report_failures(latest_results)
    detailed = set(failures["result_id"])
    positions = history.runs.index[history.runs["run_id"].isin(run_ids)]
    x_range = (int(positions.min()), int(positions.max())) if len(positions) else (0, 0)
    header = (
        f'<p class="muted">Built {esc(built_at)} from {len(history.runs)} runs.</p>'
        + _glance(latest_results, changed, latest, previous_id)
        + _filters(pd.concat([window, latest_results]))
    )
    folds: dict[str, str] = {}
    body = "".join(
        [
            _latest_section(latest, latest_results),
            _runs_section(history),
            _changes_section(changed, previous, detailed, folds),
            _pivot_section(latest_results, detailed),
            _versions_section(latest_results, detailed),
            _grid_section(window, run_ids, history.runs, folds),
            _flaky_section(analysis.flaky_cases(window), folds),
            _errors_section(analysis.error_trends(window), x_range, folds),
            _speedup_section(analysis.speedups(window)),
            _failures_section(failures, folds),
        ]
    )
    return _page(title, header, body, folds)
