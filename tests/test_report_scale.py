"""The report at scale: a history of three runs of 2,188 results each, shaped like ORT-web's op
tests on every build (plus an encoder with layouts and revisits), written through
``SqliteHistory`` as the pipeline writes it, each record valid against the result schema.

What the latest run tells (rows of the pivot, by case without backend and mode):

- ``add/Add #0/case 0..5`` fail capture on ort-web:webgpu (capture-mismatch): unexpected,
  new in this run;
- ``softmax/Softmax #1/case 0..1`` fail on wgpu in every run (reference-mismatch): unexpected;
- ``layer-norm/deliberately wrong/*`` fail on every backend as their suite expects (known);
- wgpu skips every ``cast`` test (float16): skipped, not a failure;
- everything else passes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lxml import html as lxml_html

from runner.history import CaseResult, RunRecord, SqliteHistory
from runner.history.record import result_id
from runner.report import build_reports
from runner.report.model import DATA_FILE, SHOWN_ROWS

from .conftest import RESULT_VALIDATOR

RUNS = ("20250301T100000Z-aaaaaa", "20250302T100000Z-bbbbbb", "20250303T100000Z-cccccc")
FILES = ("add", "softmax", "layer-norm", "cast", "gather", "concat", "matmul", "transpose", "where")
TESTS = 5  # per file
CASES = 6  # per test
OP_CASES = len(FILES) * TESTS * CASES
ORT_WEB = ("ort-web:jsep", "ort-web:jspi", "ort-web:webgpu")
BACKENDS = ("wgpu", *ORT_WEB)
LAYOUTS = ("eps,heads", "heads,eps", "eps-1e-3")
ENCODER = "encoder-small"
ENCODER_SHAPE = {"batch": 1, "sequence": 16}
ENCODER_SHAPE_LABEL = "batch=1,sequence=16"  # as case ids write it

# op-test cases x 4 backends x 2 modes, and 3 layouts x 4 backends x 2 modes + 4 revisits.
RESULTS_PER_RUN = OP_CASES * 8 + len(LAYOUTS) * 8 + 4
PIVOT_ROWS = OP_CASES + len(LAYOUTS)
NEW_FAILURES = {f"ort-ops/add/Add #0/case {c}" for c in range(CASES)}
ALWAYS_FAILING = {f"ort-ops/softmax/Softmax #1/case {c}" for c in range(2)}
KNOWN = {f"ort-ops/layer-norm/deliberately wrong/case {c}" for c in range(CASES)}


def _test_name(file: str, test: int) -> str:
    return "deliberately wrong" if (file, test) == ("layer-norm", 4) else f"{file.title()} #{test}"


def _verdict(run: int, model: str, backend: str, capture: str) -> tuple[str, list[str]]:
    """(verdict, expected) of one op-test result."""
    if model in KNOWN:
        return "expected-mismatch", ["expected-mismatch"]
    if "/cast/" in model and backend == "wgpu":
        return "skipped", ["pass"]
    last_run = run == len(RUNS) - 1
    if model in NEW_FAILURES and last_run and backend == "ort-web:webgpu" and capture == "capture":
        return "capture-mismatch", ["pass"]
    if model in ALWAYS_FAILING and backend == "wgpu":
        return "reference-mismatch", ["pass"]
    return "pass", ["pass"]


def _record(
    run: int,
    model: str,
    backend: str,
    capture: str,
    judged: tuple[str, list[str]],
    layout: str = "default",
    revisit: bool = False,
) -> dict[str, Any]:
    """One result as ``CaseResult.to_dict`` stores it; `judged` is (verdict, expected)."""
    run_id = RUNS[run]
    verdict, expected = judged
    op_test = model.startswith("ort-ops/")
    cell = (
        f"{model}/{backend}"
        if op_test
        else f"{model}/{ENCODER_SHAPE_LABEL}/layout={layout}/{backend}"
    )
    case_id = f"{cell}/{capture}{'-revisit' if revisit else ''}"
    failing = verdict not in ("pass", "skipped")
    error = None if verdict == "skipped" else (0.5 if failing else 1e-7 * (1 + len(model) % 7))
    if verdict == "pass":
        outcome = "expected" if expected == ["pass"] else "unexpected-pass"
    elif verdict == "skipped":
        outcome = "skipped"
    else:
        outcome = "expected" if verdict in expected else "unexpected"
    record = {
        "result_id": result_id(run_id, case_id),
        "run_id": run_id,
        "case_id": case_id,
        "suite": "ort-ops" if op_test else "encoder-layouts",
        "suite_path": "suites/ort-ops.example.yaml" if op_test else "suites/smoke.yaml",
        "model": model,
        "shape": {} if op_test else ENCODER_SHAPE,
        "layout": layout,
        "layout_order": [] if op_test else layout.split(","),
        "layout_values": {},
        "backend": backend,
        "bundle": backend.partition(":")[2] or None,
        "capture": capture,
        "revisit": revisit,
        "injected": [],
        "verdict": verdict,
        "verdicts": [verdict],
        "expected": expected,
        "outcome": outcome,
        "bug": "microsoft/onnxruntime#29594" if verdict == "expected-mismatch" else None,
        "reason": "the fixture is wrong on purpose" if verdict == "expected-mismatch" else None,
        "max_abs_error": error,
        "max_rel_error": None if error is None else error * 2,
        "tolerance": {"abs": 1e-3, "rel": 1e-5},
        "timings": {
            "session_ms": 12.0,
            "first_run_ms": 8.0,
            "median_run_ms": None if verdict == "skipped" else (2.0 if capture == "eager" else 1.0),
            "runs": 3,
        },
        "wall_ms": 30.0,
        "trace": {
            "dispatches": 1,
            "bind_groups_created": 2,
            "uniform_writes": 2,
            "buffers_created": 4,
            "replay_bind_groups_created": 0,
            "replay_uniform_writes": 0,
            "errors": [],
        },
        "attribution": "capture only" if verdict == "capture-mismatch" else None,
        "stale_from": None,
        "divergent_node": None,
        "message": f"{verdict}: output_0 differs, max abs {error}" if failing else "",
        "finished_at": f"2025-03-0{run + 1}T10:{run + 10}:00+00:00",
    }
    RESULT_VALIDATOR.validate(record)
    return record


def run_results(run: int) -> list[dict[str, Any]]:
    """The results of run `run`, in the order the pipeline runs them."""
    results = []
    for file in FILES:
        for test in range(TESTS):
            for case in range(CASES):
                model = f"ort-ops/{file}/{_test_name(file, test)}/case {case}"
                for backend in BACKENDS:
                    for capture in ("eager", "capture"):
                        judged = _verdict(run, model, backend, capture)
                        results.append(_record(run, model, backend, capture, judged))
    for backend in BACKENDS:
        modes = [(layout, c, False) for layout in LAYOUTS for c in ("eager", "capture")]
        for layout, capture, revisit in [*modes, (LAYOUTS[0], "capture", True)]:
            results.append(
                _record(run, ENCODER, backend, capture, ("pass", ["pass"]), layout, revisit)
            )
    return results


def write_large_history(path: Path) -> None:
    store = SqliteHistory(path)
    try:
        for run, run_id in enumerate(RUNS):
            started = f"2025-03-0{run + 1}T10:00:00+00:00"
            record = {
                "run_id": run_id,
                "started": started,
                "ended": started.replace("T10:00", "T10:30"),
                "status": "complete",
                "cases": RESULTS_PER_RUN,
                "suites": ["suites/ort-ops.example.yaml", "suites/smoke.yaml"],
                "options": {"runs": 3, "inject": []},
                "environment": {"onnxruntime_web": "1.30.0"},
                "message": "",
            }
            store.begin_run(RunRecord.from_dict({**record, "status": "running", "ended": None}))
            for result in run_results(run):
                store.record(CaseResult.from_dict(result))
            store.end_run(RunRecord.from_dict(record))
    finally:
        store.close()


@pytest.fixture(scope="session")
def large_reports(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("large")
    write_large_history(out / "history.sqlite")
    build_reports(out)
    return out


def _data(out: Path) -> dict[str, Any]:
    text = (out / DATA_FILE).read_text(encoding="utf-8")
    prefix = "window.REPORT_DATA = "
    assert text.startswith(prefix)
    return json.loads(text.removeprefix(prefix).rstrip().removesuffix(";"))


def _case_of(row) -> str:
    return row.xpath("td[1]")[0].text_content()


def test_the_synthetic_run_is_as_large_as_promised():
    assert len(run_results(len(RUNS) - 1)) == RESULTS_PER_RUN >= 2000


def test_a_run_of_2000_results_gives_a_page_under_1_mb(large_reports):
    assert (large_reports / "index.html").stat().st_size < 1_000_000


def test_the_pivot_has_a_row_per_case_and_a_column_per_backend_and_mode(large_reports):
    page = lxml_html.fromstring((large_reports / "index.html").read_bytes())
    pivot = page.get_element_by_id("pivot")
    shown, folded = pivot.xpath("table/tbody"), pivot.xpath("details/table/tbody")
    shown_rows, folded_rows = shown[0].xpath("tr"), folded[0].xpath("tr")
    assert len(shown_rows) + len(folded_rows) == PIVOT_ROWS
    # unexpected first (the new capture mismatches, the wgpu kernel bug), then known bugs
    failing = [_case_of(r) for r in shown_rows]
    assert failing == sorted(ALWAYS_FAILING | NEW_FAILURES) + sorted(KNOWN)
    first = shown_rows[0].xpath("td[@title]")
    assert "o-unexpected" in {c.get("class").split()[-1] for c in first}
    header = pivot.xpath("table[1]/thead/tr")
    assert [th.text_content() for th in header[0].xpath("th")[1:]] == sorted(BACKENDS)
    modes = [th.text_content() for th in header[1].xpath("th")]
    assert modes == ["eager", "capture", "capture-revisit"] * len(BACKENDS)
    # a failing cell links to its detail block
    new_failure = next(r for r in shown_rows if _case_of(r) in NEW_FAILURES)
    target = new_failure.xpath("td/a/@href")[0].lstrip("#")
    assert page.get_element_by_id(target).tag == "details"
    # the encoder's layouts are rows; its revisit a column of its first layout only
    encoder = {_case_of(r): r for r in folded_rows if _case_of(r).startswith(ENCODER)}
    assert set(encoder) == {f"{ENCODER}/batch=1,sequence=16/layout={layout}" for layout in LAYOUTS}
    revisited = encoder[f"{ENCODER}/batch=1,sequence=16/layout={LAYOUTS[0]}"]
    assert len(revisited.xpath("td[contains(@class, 'o-pass')]")) == 3 * len(BACKENDS)


def test_the_grid_and_error_trends_show_failures_and_fold_the_rest(large_reports):
    page = lxml_html.fromstring((large_reports / "index.html").read_bytes())
    data = _data(large_reports)
    grid = page.get_element_by_id("grid")
    shown = grid.xpath("table/tbody/tr")
    unexpected = len(NEW_FAILURES) + 2 * len(ALWAYS_FAILING)  # webgpu capture; wgpu both modes
    failing_cases = unexpected + 8 * len(KNOWN)
    assert len(shown) == min(failing_cases, SHOWN_ROWS)
    assert _case_of(shown[0]).endswith("/ort-web:webgpu/capture")  # failing in the latest run
    assert shown[0].xpath("td[last()]")[0].get("class") == "v o-unexpected"
    folded = lxml_html.fragment_fromstring(data["folds"]["grid"], create_parent="tbody")
    assert len(shown) + len(folded) == RESULTS_PER_RUN
    assert grid.xpath("details/table/tbody[@data-fold='grid']")[0].text_content() == ""
    errors = page.get_element_by_id("errors").xpath("table/tbody/tr")
    assert errors and all(r.xpath(".//circle[@class='over']") for r in errors)
    assert len(errors) == failing_cases  # every failing result here is over tolerance
    blocks = page.get_element_by_id("failures").xpath("details[@class='failure']")
    assert len(blocks) == failing_cases
    opened = [b.get("open") is not None for b in blocks]
    assert opened == [True] * unexpected + [False] * len(KNOWN) * 8  # known bugs collapsed


def test_the_runs_chart_stacks_each_runs_results_by_kind_with_dates(large_reports):
    page = lxml_html.fromstring((large_reports / "index.html").read_bytes())
    chart = page.get_element_by_id("runs").xpath(".//svg")[0]
    dates = [t.text_content() for t in chart.xpath(".//text[@class='xtick']/tspan[1]")]
    assert dates == ["2025-03-01", "2025-03-02", "2025-03-03"]
    last = [r for r in chart.xpath("rect[title]") if RUNS[-1] in r.xpath("title")[0].text]
    counts = {r.get("class"): int(r.xpath("title")[0].text.split(": ")[1].split()[0]) for r in last}
    skipped = 5 * CASES * 2
    known = len(KNOWN) * 8
    unexpected = len(NEW_FAILURES) + len(ALWAYS_FAILING) * 2
    assert counts == {
        "k-pass": RESULTS_PER_RUN - skipped - known - unexpected,
        "k-known": known,
        "k-unexpected": unexpected,
        "k-skipped": skipped,
    }
