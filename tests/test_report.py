"""The report from a synthetic history: changes, flaky cases, trends, escaping, JUnit, summary,
and the YAML case offered for each failure.

The history is written through ``SqliteHistory`` as the pipeline writes it, with records
validated against ``schemas/result.schema.json``. Five runs of one suite, plus one unrelated
run, tell this story (case numbers refer to ``CELLS``):

- wgpu capture (2) passes four times, then fails: a new failure;
- ort-web:jsep capture under the swapped layout (4) is a known stale-layout bug, then passes:
  an unexpected pass;
- ort-web:webgpu capture (6) failed four times, then passes: fixed;
- the capture case of a model whose name holds markup (7) flaps between pass and
  nondeterministic;
- ort-web:jsep capture (9) is a known bug every time; ort-web:jspi capture (10) is skipped;
- the last run was interrupted (incomplete), and an unrelated suite ran in between.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from lxml import etree
from lxml import html as lxml_html

from runner.backends import REGISTRY
from runner.cli import build_parser, cmd_new_case
from runner.errors import InvalidInput
from runner.history import CaseResult, RunRecord, SqliteHistory
from runner.history.record import result_id
from runner.newcase import BUG_PLACEHOLDER, case_snippet
from runner.report import analysis, build_reports
from runner.report import model as report_model
from runner.report.history import load_history
from runner.report.junit import junit_xml
from runner.verdicts import VERDICT_CODES, VERDICTS

from .conftest import REPO, RESULT_VALIDATOR

SUITE_SCHEMA = json.loads((REPO / "schemas" / "suite.schema.json").read_text())
JUNIT_XSD = REPO / "tests" / "data" / "junit-10.xsd"

SUITE = 'capture <script>alert("suite")</script> & co'
MARKUP_MODEL = "enc<i>&\"'"
STALE_BUG = "microsoft/onnxruntime#29594"
STALE_BUG_URL = "https://github.com/microsoft/onnxruntime/issues/29594"
EVIL_BUG = "javascript:alert(document.cookie)"
EVIL_MESSAGE = 'outputs differ <img src=x onerror=alert(1)> & "quoted"\nevil: true'

RUNS = ("R1", "R2", "R3", "R4", "R5")


@dataclass(frozen=True)
class Cell:
    """One synthetic case: its id parts, and its verdict in each of the five runs."""

    model: str
    layout: str
    backend: str
    capture: str
    verdicts: tuple[str, str, str, str, str]
    expect: tuple[str, ...] = ("pass",)
    bug: str | None = None
    reason: str | None = None

    @property
    def bundle(self) -> str | None:
        return self.backend.partition(":")[2] or None

    @property
    def case_id(self) -> str:
        return f"{self.model}/batch=1,sequence=8/layout={self.layout}/{self.backend}/{self.capture}"


P, CM, SL, ND, SK = "pass", "capture-mismatch", "stale-layout", "nondeterministic", "skipped"
CELLS = {
    1: Cell("encoder", "eps,heads", "wgpu", "eager", (P, P, P, P, P)),
    2: Cell("encoder", "eps,heads", "wgpu", "capture", (P, P, P, P, CM)),
    3: Cell("encoder", "heads,eps", "ort-web:jsep", "eager", (P, P, P, P, P)),
    4: Cell(
        "encoder",
        "heads,eps",
        "ort-web:jsep",
        "capture",
        (SL, SL, SL, SL, P),
        expect=(SL,),
        bug=STALE_BUG,
        reason='replay binds a stale <uniform> & "eps"',
    ),
    5: Cell("encoder", "eps,heads", "ort-web:webgpu", "eager", (P, P, P, P, P)),
    6: Cell("encoder", "eps,heads", "ort-web:webgpu", "capture", (CM, CM, CM, CM, P)),
    7: Cell(MARKUP_MODEL, "eps,heads", "wgpu", "capture", (P, ND, P, ND, ND), bug=EVIL_BUG),
    8: Cell("encoder", "eps,heads", "ort-web:jsep", "eager", (P, P, P, P, P)),
    9: Cell(
        "encoder",
        "eps,heads",
        "ort-web:jsep",
        "capture",
        (SL, SL, SL, SL, SL),
        expect=(SL,),
        bug=f"https://github.com/{STALE_BUG.replace('#', '/issues/')}",
        reason="known",
    ),
    10: Cell("encoder", "eps,heads", "ort-web:jspi", "capture", (SK, SK, SK, SK, SK)),
}
# The interrupted last run never reached these.
NOT_IN_LAST_RUN = {8}
ERRORS = {P: 2e-6, CM: 0.3, SL: 0.05, ND: 0.01, SK: None}
EAGER_MS = 10.0


def capture_ms(backend: str, run: int) -> float:
    """Replay median per backend and run: the speedups the report must recover."""
    return {"wgpu": 4.0, "ort-web:jsep": 5.0, "ort-web:webgpu": 8.0, "ort-web:jspi": 5.0}[
        backend
    ] - 0.5 * run


def outcome_of(verdict: str, expect: tuple[str, ...]) -> str:
    if verdict == SK:
        return "skipped"
    if expect == ("pass",):
        return "expected" if verdict == P else "unexpected"
    return (
        "expected" if verdict in expect else ("unexpected-pass" if verdict == P else "unexpected")
    )


def make_result(run_id: str, run: int, cell: Cell, suite: str = SUITE) -> dict[str, Any]:
    verdict = cell.verdicts[run]
    error = (
        ERRORS[verdict] * (5 if cell.capture == "capture" and run == 4 else 1)
        if ERRORS[verdict]
        else None
    )
    median = EAGER_MS if cell.capture == "eager" else capture_ms(cell.backend, run)
    record = {
        "result_id": result_id(run_id, cell.case_id),
        "run_id": run_id,
        "case_id": cell.case_id,
        "suite": suite,
        "suite_path": "suites/bugs/synthetic.yaml",
        "model": cell.model,
        "shape": {"batch": 1, "sequence": 8},
        "layout": cell.layout,
        "layout_order": cell.layout.split(","),
        "layout_values": {},
        "backend": cell.backend,
        "bundle": cell.bundle,
        "capture": cell.capture,
        "revisit": False,
        "injected": [],
        "verdict": verdict,
        "verdicts": [verdict],
        "expected": list(cell.expect),
        "outcome": outcome_of(verdict, cell.expect),
        "bug": cell.bug,
        "reason": "JSPI is not available here" if verdict == SK else cell.reason,
        "max_abs_error": error,
        "max_rel_error": None if error is None else error * 10,
        "tolerance": {"abs": 1e-3, "rel": 1e-5},
        "timings": {
            "session_ms": 30.0,
            "first_run_ms": 20.0,
            "median_run_ms": None if verdict == SK else median,
            "runs": 3,
        },
        "wall_ms": 120.0,
        "trace": {
            "dispatches": 14,
            "bind_groups_created": 14,
            "uniform_writes": 14,
            "buffers_created": 30,
            "replay_bind_groups_created": 0,
            "replay_uniform_writes": 0,
            "errors": [],
        },
        "attribution": "capture only"
        if verdict in (CM, ND)
        else ("capture only, after a layout change" if verdict == SL else None),
        "stale_from": "eps,heads" if verdict == SL else None,
        "divergent_node": {"op_type": "LayerNormalization", "name": "ln<0>", "max_abs": error}
        if verdict == CM
        else None,
        "message": EVIL_MESSAGE if verdict == CM else f"{verdict} as seen",
        "finished_at": f"2025-01-0{run + 1}T10:00:30+00:00",
    }
    RESULT_VALIDATOR.validate(record)
    return record


def run_record(run_id: str, started: str, status: str, cases: int, suite: str) -> dict:
    return {
        "run_id": run_id,
        "started": started,
        "ended": started.replace("10:00:00", "10:05:00"),
        "status": status,
        "cases": cases,
        "suites": [suite],
        "options": {"runs": 3, "inject": []},
        "environment": {
            "python": "3.11.2",
            "onnxruntime": "1.32.0",
            "onnxruntime_web": "1.30.0",
            "platform": "<b>linux</b>",
            "backends": {"wgpu": {"adapter": "llvmpipe"}},
        },
        "message": "interrupted; finished results are kept" if status == "incomplete" else "",
        "references_computed": 3,
    }


def write_history(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The synthetic history at `path`; returns each run's records by run id."""
    store = SqliteHistory(path)
    written: dict[str, list[dict[str, Any]]] = {}
    try:
        for run, run_id in enumerate(RUNS):
            last = run == len(RUNS) - 1
            started = f"2025-01-0{run + 1}T10:00:00+00:00"
            run_dict = run_record(run_id, started, "running", len(CELLS), SUITE)
            store.begin_run(RunRecord.from_dict(run_dict))
            written[run_id] = []
            for number, cell in CELLS.items():
                if last and number in NOT_IN_LAST_RUN:
                    continue
                record = make_result(run_id, run, cell)
                store.record(CaseResult.from_dict(record))
                written[run_id].append(record)
            store.end_run(
                RunRecord.from_dict(
                    run_record(
                        run_id, started, "incomplete" if last else "complete", len(CELLS), SUITE
                    )
                )
            )
            if run_id == "R4":  # an unrelated suite in between: not comparable with R5
                other = Cell("tiny", "default", "reference", "eager", (P,) * 5)
                other_run = run_record("R4b", "2025-01-04T12:00:00+00:00", "complete", 1, "other")
                store.begin_run(RunRecord.from_dict(other_run))
                store.record(CaseResult.from_dict(make_result("R4b", 3, other, suite="other")))
                store.end_run(RunRecord.from_dict(other_run))
    finally:
        store.close()
    return written


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    out = tmp_path_factory.mktemp("reports")
    written = write_history(out / "history.sqlite")
    build_reports(out)
    return out, written


@pytest.fixture(scope="module")
def page(reports):
    out, _ = reports
    return lxml_html.fromstring((out / "index.html").read_bytes())


def latest(written, number: int) -> dict[str, Any]:
    return next(r for r in written["R5"] if r["case_id"] == CELLS[number].case_id)


def folded(out: Path, fold: str) -> list:
    """The rows (or blocks) a fold keeps in data.js, parsed as the page would insert them."""
    text = (out / report_model.DATA_FILE).read_text(encoding="utf-8")
    data = json.loads(text.removeprefix("window.REPORT_DATA = ").rstrip().removesuffix(";"))
    markup = data["folds"].get(fold, "")
    parent = "tbody" if markup.startswith("<tr") else "div"
    return list(lxml_html.fragment_fromstring(markup, create_parent=parent)) if markup else []


# --- analysis -----------------------------------------------------------------------------


def test_the_previous_comparable_run_skips_an_unrelated_suite(reports):
    out, _ = reports
    history = load_history(out / "history.sqlite")
    assert history.runs["run_id"].tolist() == ["R1", "R2", "R3", "R4", "R4b", "R5"]
    assert analysis.previous_comparable(history, "R5") == "R4"
    assert analysis.previous_comparable(history, "R4b") is None


def test_changes_name_new_failures_fixes_and_unexpected_passes(reports):
    out, _ = reports
    history = load_history(out / "history.sqlite")
    changed = analysis.changes(history, "R5", "R4")
    assert dict(zip(changed["case_id"], changed["change"], strict=True)) == {
        CELLS[2].case_id: "new failure",
        CELLS[4].case_id: "unexpected pass",
        CELLS[6].case_id: "fixed",
    }
    fixed = changed[changed["change"] == "fixed"].iloc[0]
    assert (fixed["before_verdict"], fixed["verdict"]) == (CM, P)


def test_flaky_cases_are_those_that_flip_back_and_forth(reports):
    out, _ = reports
    history = load_history(out / "history.sqlite")
    window = analysis.in_runs(history, analysis.recent_runs(history, 20))
    flaky = analysis.flaky_cases(window)
    assert flaky["case_id"].tolist() == [CELLS[7].case_id]
    assert flaky.iloc[0]["flips"] == 3
    assert flaky.iloc[0]["verdicts"] == list(CELLS[7].verdicts)


def test_speedup_is_eager_over_replay_per_backend_and_run(reports):
    out, _ = reports
    history = load_history(out / "history.sqlite")
    trend = analysis.speedup_trend(analysis.speedups(history.results))
    last = history.runs.index[history.runs["run_id"] == "R5"][0]
    # ort-web:jspi was skipped (no timings) and has no eager twin: no speedup at all.
    assert sorted(trend.columns) == ["ort-web:jsep", "ort-web:webgpu", "wgpu"]
    assert trend.at[last, "wgpu"] == pytest.approx(EAGER_MS / capture_ms("wgpu", 4))
    # R5 lacks the jsep eps,heads eager twin (interrupted): only the heads,eps pair counts.
    assert trend.at[last, "ort-web:jsep"] == pytest.approx(EAGER_MS / capture_ms("ort-web:jsep", 4))
    assert trend.at[0, "ort-web:webgpu"] == pytest.approx(EAGER_MS / 8.0)


def test_error_trends_put_the_worst_against_tolerance_first(reports):
    out, _ = reports
    history = load_history(out / "history.sqlite")
    trends = analysis.error_trends(history.results)
    top = trends.iloc[0]
    assert top["case_id"] == CELLS[2].case_id
    assert [round(e, 9) for _, e in top["points"]] == [2e-6, 2e-6, 2e-6, 2e-6, 1.5]
    assert CELLS[10].case_id not in set(trends["case_id"])  # skipped: never measured


# --- the page -----------------------------------------------------------------------------


def test_the_legend_gives_every_verdict_a_code_in_headline_order(page):
    (legend,) = page.get_element_by_id("grid").xpath("p/span[@class='muted']")
    shown = legend.text_content()
    positions = [shown.index(f"{VERDICT_CODES[name]} {name}") for name in VERDICTS]
    assert positions == sorted(positions)
    assert set(VERDICT_CODES) == set(VERDICTS)


def test_the_page_is_self_contained_and_escapes_every_user_string(reports, page):
    out, _ = reports
    text = (out / "index.html").read_text(encoding="utf-8")
    assert text.count("<script") == 1  # the filter script; the suite's <script> is text
    assert 'alert("suite")' not in text and "&lt;script&gt;alert(&#34;suite&#34;)" in text
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "<i>" not in text and "enc&lt;i&gt;&amp;&#34;&#39;" in text
    assert "<b>linux</b>" not in text
    assert 'href="javascript:' not in text and "javascript:alert(document.cookie)" in text
    assert page.xpath("//@src") == [] and page.xpath("//link") == []
    assert {h for h in page.xpath("//@href") if not h.startswith("#")} == {STALE_BUG_URL}
    assert "default-src 'none'" in text and "script-src 'self' 'unsafe-inline'" in text
    # the folded rows beside the page are escaped alike, and belong to this build of it
    data = (out / report_model.DATA_FILE).read_text(encoding="utf-8")
    assert 'alert("suite")' not in data and "&lt;script&gt;alert(&#34;suite&#34;)" in data
    build = page.xpath("//body/@data-build")[0]
    assert data.startswith(f'window.REPORT_DATA = {{"build": "{build}", ')


def test_failures_past_the_first_ones_fold_into_data_js_escaped(tmp_path, monkeypatch):
    write_history(tmp_path / "history.sqlite")
    monkeypatch.setattr(report_model, "SHOWN_ROWS", 1)
    build_reports(tmp_path)
    page = lxml_html.fromstring((tmp_path / "index.html").read_bytes())
    failures = page.get_element_by_id("failures")
    (shown,) = failures.xpath("details[@class='failure']")
    assert shown.xpath("summary/span[@class='case']")[0].text_content() == CELLS[7].case_id
    fold = failures.xpath("details[@class='fold']")[0]
    assert fold.xpath("summary")[0].text_content() == "3 more failures (past the first 1)"
    assert fold.xpath("div[@data-fold='failures']")[0].text_content() == ""
    blocks = folded(tmp_path, "failures")
    assert [b.xpath("summary/span[@class='case']")[0].text_content() for b in blocks] == [
        CELLS[2].case_id,
        CELLS[4].case_id,
        CELLS[9].case_id,
    ]
    data = (tmp_path / report_model.DATA_FILE).read_text(encoding="utf-8")
    assert "<img" not in data and "&lt;img src=x onerror=alert(1)&gt;" in data
    assert 'href=\\"javascript:' not in data


def test_the_page_shows_the_latest_run_and_its_interruption(page):
    latest = page.get_element_by_id("latest")
    assert "Run status: incomplete — interrupted; finished results are kept. 9 of 10" in " ".join(
        latest.text_content().split()
    )
    assert "9 of 10 planned cases" in latest.text_content()
    glance = page.find_class("glance")[0].text_content()
    assert "2 unexpected" in glance and "1 unexpected pass" in glance
    assert "1 new failures, 1 fixed" in glance


def test_the_page_lists_changes_with_links_to_cases_and_bugs(page):
    rows = page.get_element_by_id("changes").xpath(".//tbody/tr")
    shown = {
        row.xpath("td[2]")[0].text_content(): row.xpath("td[1]")[0].text_content() for row in rows
    }
    assert shown == {
        CELLS[2].case_id: "new failure",
        CELLS[4].case_id: "unexpected pass",
        CELLS[6].case_id: "fixed",
    }
    for row in rows:
        target = row.xpath("td[2]/a/@href")[0].lstrip("#")
        assert page.get_element_by_id(target) is not None
    unexpected_pass = next(
        r for r in rows if r.xpath("td[1]")[0].text_content() == "unexpected pass"
    )
    assert unexpected_pass.xpath("td[5]/a/@href") == [STALE_BUG_URL]


def test_the_grid_shows_failing_cases_first_and_folds_the_rest(reports, page):
    out, _ = reports
    grid = page.get_element_by_id("grid")
    assert [th.text_content() for th in grid.xpath("table[1]/thead//th[@class='run']")] == [
        "#1",
        "#2",
        "#3",
        "#4",
        "#5",
        "#6",
    ]
    rows = grid.xpath("table[1]/tbody/tr")
    # failing in the latest run (unexpected, unexpected pass, known bug), then failed earlier
    assert [r.xpath("td[1]")[0].text_content() for r in rows] == [
        CELLS[n].case_id for n in (7, 2, 4, 9, 6)
    ]
    quiet = folded(out, "grid")
    assert grid.xpath("details/summary")[0].text_content() == "6 cases that passed or were skipped"
    assert len(rows) + len(quiet) == len(CELLS) + 1  # and the unrelated suite's case
    assert {r.xpath("td[1]")[0].text_content() for r in quiet} == {
        *(CELLS[n].case_id for n in (1, 3, 5, 8, 10)),
        "tiny/batch=1,sequence=8/layout=default/reference/eager",
    }
    new_failure = rows[1]
    cells = new_failure.xpath("td[position() > 1]")
    assert [c.get("class") for c in cells] == ["v o-pass"] * 4 + ["v", "v o-unexpected"]
    assert cells[-1].get("title") == f"#6 R5: {CM} (unexpected)"
    assert new_failure.get("data-backend") == "wgpu"
    assert new_failure.get("data-bundle") == "none"
    assert new_failure.get("data-verdict") == CM


def test_the_pivot_has_a_row_per_case_and_a_column_per_backend_and_mode(page):
    pivot = page.get_element_by_id("pivot")
    head = pivot.xpath("table[1]/thead/tr")
    backends = ["ort-web:jsep", "ort-web:jspi", "ort-web:webgpu", "wgpu"]
    assert [th.text_content() for th in head[0].xpath("th")] == ["case", *backends]
    assert [th.get("colspan") for th in head[0].xpath("th")[1:]] == ["2", "1", "2", "2"]
    modes = ["eager", "capture", "capture", "eager", "capture", "eager", "capture"]
    assert [th.text_content() for th in head[1].xpath("th")] == modes
    rows = pivot.xpath("table[1]/tbody/tr")
    layout = "/batch=1,sequence=8/layout="
    # the markup model's row and the wgpu new failure (unexpected) first, then the known bug
    assert [r.xpath("td[1]")[0].text_content() for r in rows] == [
        f"{MARKUP_MODEL}{layout}eps,heads",
        f"encoder{layout}eps,heads",
        f"encoder{layout}heads,eps",
    ]
    encoder = [c.text_content() for c in rows[1].xpath("td[position() > 1]")]
    # jsep eager did not run (interrupted), its capture is a known bug; webgpu fixed; jspi
    # skipped; wgpu capture is the new failure
    assert encoder == ["", "SL", "–", "✓", "✓", "✓", "CM"]
    link = rows[1].xpath("td[last()]/a/@href")[0]
    assert page.get_element_by_id(link.lstrip("#")).tag == "details"
    assert rows[1].get("data-any-backend") == " ".join(backends)
    assert rows[1].get("data-any-bundle") == "jsep jspi webgpu none"
    assert rows[1].get("data-any-verdict") == f"{CM} {P} {SK} {SL}"
    assert rows[0].get("data-suite") == SUITE
    assert pivot.xpath("details") == []  # nothing passed everywhere


def test_the_runs_chart_stacks_every_runs_results_with_dates(page):
    chart = page.get_element_by_id("runs").xpath(".//svg")[0]
    dates = [t.xpath("tspan")[0].text for t in chart.xpath(".//text[@class='xtick']")]
    assert dates == [
        "2025-01-01",
        "2025-01-02",
        "2025-01-03",
        "2025-01-04",
        "2025-01-04",
        "2025-01-05",
    ]
    last = [
        r.xpath("title")[0].text
        for r in chart.xpath("rect[title]")
        if "R5," in r.xpath("title")[0].text
    ]
    assert [t.split(": ")[1] for t in last] == [
        "2 unexpected",
        "1 unexpected pass",
        "1 known bug",
        "1 skipped",
        "4 pass",
    ]
    assert [t.text for t in chart.xpath("text[@class='flag']")] == ["1", "2", "1", "2", "3"]


def test_the_page_has_flaky_error_and_speedup_sections(page):
    flaky = page.get_element_by_id("flaky").xpath(".//tbody/tr")
    assert [r.xpath("td[1]")[0].text_content() for r in flaky] == [CELLS[7].case_id]
    errors = page.get_element_by_id("errors").xpath(".//tbody/tr")
    assert errors[0].xpath("td[1]")[0].text_content() == CELLS[2].case_id
    assert errors[0].xpath(".//svg//circle[@class='over']")
    speedup = page.get_element_by_id("speedup")
    assert len(speedup.xpath(".//svg[@class='chart']//polyline")) == 3
    rows = {
        r.xpath("td[1]")[0].text_content(): r.xpath("td[4]")[0].text_content()
        for r in speedup.xpath(".//tbody/tr")
    }
    assert rows["wgpu"] == f"{EAGER_MS / capture_ms('wgpu', 4):.2f}x"


def test_each_failure_has_details_and_a_valid_yaml_case(page, reports):
    _, written = reports
    blocks = page.get_element_by_id("failures").xpath(".//details")
    shown = [b.xpath("summary/span[@class='case']")[0].text_content() for b in blocks]
    # unexpected first (7, 2 by id), then the unexpected pass (4), then the known bug (9)
    assert shown == [CELLS[7].case_id, CELLS[2].case_id, CELLS[4].case_id, CELLS[9].case_id]
    assert [b.get("open") is not None for b in blocks] == [True, True, True, False]
    first = blocks[1]
    assert "LayerNormalization" in first.text_content() and "ln<0>" in first.text_content()
    assert "capture only" in first.text_content()
    snippet = first.xpath(".//pre[@class='yaml']")[0].text_content()
    assert snippet == case_snippet(CaseResult.from_dict(latest(written, 2)))
    validate_snippet(snippet, CELLS[2].case_id)


def test_page_summary_and_junit_read_one_model_built_once(tmp_path, monkeypatch):
    write_history(tmp_path / "history.sqlite")
    calls = {"changes": 0, "previous_comparable": 0, "report_failures": 0}
    for name in calls:
        original = getattr(analysis, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(analysis, name, counted)
    build_reports(tmp_path)
    assert calls == {"changes": 1, "previous_comparable": 1, "report_failures": 1}
    # the navigation names the sections the model has: one version, so no version grid
    page = lxml_html.fromstring((tmp_path / "index.html").read_bytes())
    nav = [a.get("href") for a in page.xpath("//nav/a")]
    assert nav == [f"#{s.get('id')}" for s in page.xpath("//main/section")]
    assert "#versions" not in nav and nav[0] == "#latest" and nav[-1] == "#failures"


def test_an_empty_history_gives_a_page_saying_so(tmp_path):
    written = build_reports(tmp_path)
    assert [p.name for p in written] == ["data.js", "index.html", "junit.xml", "summary.md"]
    assert "No runs yet" in (tmp_path / "index.html").read_text()
    assert "No runs yet" in (tmp_path / "summary.md").read_text()
    assert not (tmp_path / "history.sqlite").exists()
    etree.XMLSchema(etree.parse(str(JUNIT_XSD))).assertValid(
        etree.parse(str(tmp_path / "junit.xml"))
    )


# --- the YAML case ------------------------------------------------------------------------


def validate_snippet(snippet: str, case_id: str) -> dict[str, Any]:
    parsed = yaml.safe_load(snippet)
    assert list(parsed) == ["cases"]  # nothing leaked out of the comments
    schema = {**SUITE_SCHEMA["properties"]["cases"], "$defs": SUITE_SCHEMA["$defs"]}
    jsonschema.validate(parsed["cases"], schema)
    (entry,) = parsed["cases"]
    assert fnmatch.fnmatchcase(case_id, entry["match"]["id"])
    return entry


def test_the_yaml_case_expects_what_was_seen(reports):
    _, written = reports
    snippet = case_snippet(CaseResult.from_dict(latest(written, 2)))
    entry = validate_snippet(snippet, CELLS[2].case_id)
    assert entry == {
        "match": {"id": CELLS[2].case_id},
        "bug": BUG_PLACEHOLDER,
        "expect": [CM],
        "reason": EVIL_MESSAGE,
    }
    snippet = case_snippet(CaseResult.from_dict(latest(written, 9)))
    known = validate_snippet(snippet, CELLS[9].case_id)
    assert known["bug"] == CELLS[9].bug and known["expect"] == [SL]


def test_the_yaml_case_matches_only_its_case_when_the_id_has_glob_characters(reports):
    _, written = reports
    record = {
        **latest(written, 2),
        "case_id": "enc*[x]?/static/layout=a/wgpu/capture",
        "message": "line one\nbugs: [injected]\u2028also: injected",
    }
    entry = validate_snippet(case_snippet(CaseResult.from_dict(record)), record["case_id"])
    assert not fnmatch.fnmatchcase("encXYZ[x]!/static/layout=a/wgpu/capture", entry["match"]["id"])
    assert entry["reason"] == record["message"]


def new_case_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["new-case", *argv])


def test_new_case_prints_the_snippet_for_a_result_id_prefix(reports, capsys):
    out, written = reports
    record = latest(written, 7)
    assert cmd_new_case(new_case_args(record["result_id"][:8], "--out", str(out))) == 0
    assert capsys.readouterr().out == case_snippet(CaseResult.from_dict(record))


def test_new_case_says_what_is_wrong(reports, tmp_path):
    out, _ = reports
    with pytest.raises(InvalidInput, match="no result 'ffffffff'"):
        cmd_new_case(new_case_args("ffffffff", "--out", str(out)))
    with pytest.raises(InvalidInput, match="4 hex digits"):
        cmd_new_case(new_case_args("%", "--out", str(out)))
    with pytest.raises(InvalidInput, match="no history yet"):
        cmd_new_case(new_case_args("abcd1234", "--out", str(tmp_path)))


# --- JUnit and the summary ----------------------------------------------------------------


@pytest.mark.parametrize("family", ["xunit1", "xunit2"])
def test_the_schema_accepts_what_pytest_itself_writes(tmp_path, family):
    """The XSD is the one pytest's xunit2 output follows, with `<error>` as pytest writes it
    and xunit1's `file` and `line` on a testcase: pytest's own report validates."""
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "@pytest.fixture\n"
        "def broken(): raise RuntimeError('setup')\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert 0\n"
        "def test_error(broken): pass\n"
        "@pytest.mark.skip(reason='no')\n"
        "def test_skip(): pass\n"
        "@pytest.mark.xfail(reason='bug')\n"
        "def test_xfail(): assert 0\n"
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            f"junit_family={family}",
            "--junitxml",
            "out.xml",
            "test_sample.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    schema = etree.XMLSchema(etree.parse(str(JUNIT_XSD)))
    written = etree.parse(str(tmp_path / "out.xml"))
    schema.assertValid(written)
    assert len(written.findall(".//testcase/error")) == 1
    files = {c.get("file") for c in written.iter("testcase")}
    lines = [c.get("line") for c in written.iter("testcase")]
    if family == "xunit1":  # pytest's lines count from 0
        assert files == {"test_sample.py"} and lines[:3] == ["3", "4", "5"]
    else:
        assert files == {None} and set(lines) == {None}
    with_properties = etree.fromstring(
        b'<testsuites><testsuite name="s" tests="1" failures="0" errors="0"><testcase name="t">'
        b'<properties><property name="a" value="b"/></properties></testcase></testsuite>'
        b"</testsuites>"
    )
    assert not schema.validate(with_properties)  # why properties sit on a testsuite


def test_junit_xml_follows_xunit2_and_describes_the_latest_run(reports):
    out, written = reports
    document = etree.parse(str(out / "junit.xml"))
    etree.XMLSchema(etree.parse(str(JUNIT_XSD))).assertValid(document)
    root = document.getroot()
    assert root.get("name") == "regress R5 (incomplete)"
    assert (root.get("tests"), root.get("failures")) == ("9", "3")
    cases = {case.get("name"): case for case in root.iter("testcase")}
    assert set(cases) == {r["case_id"] for r in written["R5"]}

    def properties(number: int) -> dict[str, str]:
        suite = cases[CELLS[number].case_id].getparent()
        return {p.get("name"): p.get("value") for p in suite.iter("property")}

    assert {k: properties(2)[k] for k in ("backend", "layout", "capture", "verdict")} == {
        "backend": "wgpu",
        "layout": "eps,heads",
        "capture": "capture",
        "verdict": CM,
    }
    assert float(properties(2)["max_abs_error"]) == pytest.approx(1.5)
    failure = cases[CELLS[2].case_id].find("failure")
    assert failure.get("type") == CM and EVIL_MESSAGE in failure.get("message")
    assert cases[CELLS[4].case_id].find("failure").get("type") == "unexpected-pass"
    known = cases[CELLS[9].case_id].find("skipped")
    assert known.get("type") == "pytest.xfail" and CELLS[9].bug in known.get("message")
    assert cases[CELLS[10].case_id].find("skipped").get("type") == "pytest.skip"
    assert list(cases[CELLS[1].case_id]) == []  # passed


def test_cases_that_did_not_run_are_errors_located_at_their_model(tmp_path, monkeypatch):
    """error and timeout are JUnit errors, other unexpected verdicts failures; every testcase
    names the suite file (relative to the working directory) and its model's line, which a
    record written before results had lines leaves out."""
    monkeypatch.chdir(tmp_path)
    cell = CELLS[2]
    located = {"suite_path": str(tmp_path.resolve() / "suites" / "bugs.yaml"), "suite_line": 7}
    records = [
        {**make_result("R1", 4, cell), **located},
        {**make_result("R1", 4, cell), **located, "case_id": "e", "verdict": "error"},
        {**make_result("R1", 4, cell), **located, "case_id": "t", "verdict": "timeout"},
        {**make_result("R1", 4, CELLS[1]), "suite_path": "/elsewhere/old.yaml"},
    ]
    for record in records:
        RESULT_VALIDATOR.validate(record)
    run = RunRecord.from_dict({"run_id": "R1", "started": "", "status": "complete"})
    document = etree.fromstring(junit_xml(run, [CaseResult.from_dict(r) for r in records]))
    etree.XMLSchema(etree.parse(str(JUNIT_XSD))).assertValid(document)
    assert (document.get("tests"), document.get("failures"), document.get("errors")) == (
        "4",
        "1",
        "2",
    )
    cases = document.findall(".//testcase")
    assert [[child.tag for child in case] for case in cases] == [
        ["failure"],
        ["error"],
        ["error"],
        [],
    ]
    assert [case[0].get("type") for case in cases[:3]] == [CM, "error", "timeout"]
    assert [(c.getparent().get("failures"), c.getparent().get("errors")) for c in cases] == [
        ("1", "0"),
        ("0", "1"),
        ("0", "1"),
        ("0", "0"),
    ]
    assert [(case.get("file"), case.get("line")) for case in cases] == [
        ("suites/bugs.yaml", "7"),
        ("suites/bugs.yaml", "7"),
        ("suites/bugs.yaml", "7"),
        ("/elsewhere/old.yaml", None),
    ]


def test_the_summary_names_the_changes_and_escapes_markup(reports):
    out, _ = reports
    summary = (out / "summary.md").read_text()
    assert summary.startswith("## Regression run R5: incomplete")
    assert "**9 results**: 2 unexpected, 1 unexpected pass, 1 skipped." in summary
    assert "| new failure | encoder/batch=1,sequence=8/layout=eps,heads/wgpu/capture |" in summary
    assert f"[microsoft/onnxruntime\\#29594]({STALE_BUG_URL})" in summary
    assert not re.search(r"(?<!\\)<", summary)  # every < escaped
    assert "\\<img src=x onerror=alert(1)\\>" in summary and "enc\\<i\\>" in summary
    assert "](javascript" not in summary


def test_a_latest_run_that_recorded_nothing_still_heads_the_report(tmp_path):
    write_history(tmp_path / "history.sqlite")
    store = SqliteHistory(tmp_path / "history.sqlite")
    try:
        store.end_run(
            RunRecord.from_dict(
                {
                    **run_record(
                        "R6", "2025-01-07T10:00:00+00:00", "environment-unusable", 10, SUITE
                    ),
                    "message": "no WebGPU adapter <here>",
                }
            )
        )
    finally:
        store.close()
    build_reports(tmp_path)
    page = lxml_html.fromstring((tmp_path / "index.html").read_bytes())
    latest_text = " ".join(page.get_element_by_id("latest").text_content().split())
    assert "Run status: environment-unusable — no WebGPU adapter <here>. 0 of 10" in latest_text
    assert "No results recorded in this run." in latest_text
    assert "No earlier run shares a case" in page.get_element_by_id("changes").text_content()
    shown = page.get_element_by_id("grid").xpath("table[1]/tbody/tr")
    assert len(shown) + len(folded(tmp_path, "grid")) == len(CELLS) + 1
    junit = etree.parse(str(tmp_path / "junit.xml"))
    etree.XMLSchema(etree.parse(str(JUNIT_XSD))).assertValid(junit)
    assert junit.getroot().get("tests") == "0"
    assert "no WebGPU adapter \\<here\\>" in (tmp_path / "summary.md").read_text()


def test_a_history_whose_only_run_recorded_nothing_gives_a_report(tmp_path):
    store = SqliteHistory(tmp_path / "history.sqlite")
    try:
        store.end_run(
            RunRecord.from_dict(
                run_record("R1", "2025-01-01T10:00:00+00:00", "environment-unusable", 3, SUITE)
            )
        )
    finally:
        store.close()
    build_reports(tmp_path)
    page = lxml_html.fromstring((tmp_path / "index.html").read_bytes())
    assert "No results recorded in this run." in page.get_element_by_id("latest").text_content()
    chart = page.get_element_by_id("runs").xpath(".//svg")[0]
    assert chart.xpath("rect[title]") == [] and chart.xpath(".//tspan")[0].text == "2025-01-01"
    assert "No results in the latest run." in page.get_element_by_id("pivot").text_content()


# --- from a real run ----------------------------------------------------------------------

REAL_SUITE = """
name: report-e2e
models:
  enc: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}
shapes:
  - {batch: 1, sequence: 8}
layouts:
  - [eps, heads]
backends: [reference]
"""

EXPECT_A_BUG = """
cases:
  - match: {capture: capture}
    bug: microsoft/onnxruntime#29594
    expect: [stale-layout]
    reason: pretend the reference backend had the bug
"""


def test_a_report_from_real_runs_of_the_reference_backend(write_suite, tmp_path):
    """Two real runs: all pass, then the suite claims a bug the CPU cannot have."""
    from runner.backends.base import BackendOptions
    from runner.matrix import expand_matrix
    from runner.pipeline import execute
    from runner.selection import RunPlan
    from runner.suite import load_suites

    out = tmp_path / "reports"
    for text in (REAL_SUITE, REAL_SUITE + EXPECT_A_BUG):
        if out.exists():
            time.sleep(1.05)  # run start times have whole seconds: keep the runs in order
        suite = write_suite(text)
        cases = expand_matrix(load_suites([suite], REGISTRY))
        execute(RunPlan(tuple(cases)), out, BackendOptions(runs=2))
    build_reports(out)
    history = load_history(out / "history.sqlite")
    first, second = history.runs["run_id"]
    capture_id = "enc/batch=1,sequence=8/layout=eps,heads/reference/capture"
    changed = analysis.changes(history, second, first)
    assert dict(zip(changed["case_id"], changed["change"], strict=True)) == {
        capture_id: "unexpected pass"
    }
    speedup = analysis.speedups(history.results)
    assert len(speedup) == 2 and (speedup["speedup"] > 0).all()
    page = lxml_html.fromstring((out / "index.html").read_bytes())
    (block,) = page.get_element_by_id("failures").xpath(".//details")
    snippet = block.xpath(".//pre[@class='yaml']")[0].text_content()
    entry = validate_snippet(snippet, capture_id)
    assert entry["expect"] == ["pass"] and entry["bug"] == STALE_BUG
    junit = etree.parse(str(out / "junit.xml"))
    etree.XMLSchema(etree.parse(str(JUNIT_XSD))).assertValid(junit)
    assert [f.get("type") for f in junit.iter("failure")] == ["unexpected-pass"]
    # where the model `enc` is declared: line 3 of the suite file (outside the working folder)
    located = {(case.get("file"), case.get("line")) for case in junit.iter("testcase")}
    assert located == {(str(suite.resolve()), "3")}


def test_the_report_names_suites_relative_to_where_a_reader_finds_them(tmp_path, monkeypatch):
    """A run stores absolute paths; the report names a suite relative to the working directory,
    else to the repository holding it, else to its own folder."""
    from runner.report.build import suite_name

    repo, loose = tmp_path / "checkout", tmp_path / "loose"
    (repo / ".git").mkdir(parents=True)
    (repo / "suites" / "bugs").mkdir(parents=True)
    loose.mkdir()
    in_repo = str(repo / "suites" / "bugs" / "a.yaml")
    monkeypatch.chdir(repo)
    assert suite_name(in_repo) == "suites/bugs/a.yaml"
    monkeypatch.chdir(repo / "suites")
    assert suite_name(in_repo) == "bugs/a.yaml"
    monkeypatch.chdir(loose)
    assert suite_name(in_repo) == "suites/bugs/a.yaml"  # outside: the repository's
    assert suite_name(str(loose / "elsewhere" / "b.yaml")) == "elsewhere/b.yaml"
    assert suite_name("/nowhere/on/this/machine/c.yaml") == "c.yaml"
    assert suite_name("suites/d.yaml") == "suites/d.yaml"  # stored relative already
    assert suite_name("") == ""
