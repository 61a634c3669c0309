"""Detectors end to end on real wgpu (lavapipe): each fires on an injected fault, stays quiet
on a clean run, names the stale layout and localizes the divergent node."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions
from runner.matrix import expand_matrix, select_cases
from runner.pipeline import execute
from runner.selection import RunPlan
from runner.suite import load_suite
from runner.suite.spec import Expectation

from .conftest import RESULT_VALIDATOR

pytestmark = pytest.mark.gpu

SEQUENCE = """
models:
  enc: {builtin: encoder, layers: 1, hidden: 32, heads: 4, ffn: 64}
shapes:
  - {batch: 1, sequence: 16}
layouts:
  - label: first
    order: [eps, rows, cols]
  - label: second
    values: {eps: 1.0e-2}
backends: [wgpu]
"""


def run_suite(path: Path, out: Path, **options) -> dict[str, dict]:
    summary = execute(
        RunPlan(tuple(expand_matrix([load_suite(path, REGISTRY)]))),
        out,
        BackendOptions(runs=3, **options),
    )
    assert summary.status == "complete"
    return {r.case_id: r.to_dict() for r in summary.results}


def test_clean_sequence_passes_without_localization(write_suite, tmp_path):
    results = run_suite(write_suite(SEQUENCE), tmp_path)
    assert len(results) == 5  # 2 layouts x 2 modes + the first captured again
    assert {r["verdict"] for r in results.values()} == {"pass"}
    assert all(r["divergent_node"] is None for r in results.values())


def test_only_the_second_layout_poisoned_names_the_first(write_suite, tmp_path):
    path = write_suite(
        SEQUENCE
        + """
cases:
  - match: {layout: second, capture: capture}
    inject: [shape-only-capture-cache]
    expect: stale-layout
"""
    )
    results = run_suite(path, tmp_path)
    poisoned = results["enc/batch=1,sequence=16/layout=second/wgpu/capture"]
    assert poisoned["verdicts"] == ["capture-mismatch", "stale-layout"]
    assert poisoned["verdict"] == "stale-layout" and poisoned["outcome"] == "expected"
    assert poisoned["stale_from"] == "first"
    assert poisoned["attribution"] == "capture only, after a layout change"
    assert poisoned["injected"] == ["shape-only-capture-cache"]
    # the fault sits in every layer norm's epsilon: the first one is where outputs part
    node = poisoned["divergent_node"]
    assert node["op_type"] == "LayerNormalization" and node["against"] == "eager"
    assert node["name"] == "/layers.0.norm1/LayerNormalization"
    others = {k: v for k, v in results.items() if v is not poisoned}
    assert {r["verdict"] for r in others.values()} == {"pass"}, "the fault leaked"
    revisit = results["enc/batch=1,sequence=16/layout=first/wgpu/capture-revisit"]
    assert revisit["verdict"] == "pass"


def test_run_wide_inject_poisons_every_layout_change(write_suite, tmp_path):
    results = run_suite(
        write_suite(SEQUENCE), tmp_path, inject=frozenset({"shape-only-capture-cache"})
    )
    verdicts = {case: r["verdict"] for case, r in results.items()}
    assert verdicts["enc/batch=1,sequence=16/layout=second/wgpu/capture"] == "stale-layout"
    assert list(verdicts.values()).count("pass") == 4
    [run_json] = tmp_path.glob("runs/*/run.json")
    run = json.loads(run_json.read_text())
    assert run["options"]["inject"] == ["shape-only-capture-cache"]
    assert run["environment"]["backends"]["wgpu"]["adapter"]["name"]


CANARIES = Path(__file__).resolve().parents[1] / "suites" / "canaries.yaml"


@pytest.mark.browser
def test_canary_suite_sees_every_injected_fault(canary_run):
    _, summary = canary_run
    # ort-native's cases run only where ONNX Runtime finds a GPU (tests/test_ortnative.py)
    skipped = [r for r in summary.results if r.verdict == "skipped"]
    assert all(r.backend.startswith("ort-native") for r in skipped)
    ran = [r for r in summary.results if r.verdict != "skipped"]
    injected = [r for r in ran if r.injected]
    on_gpu = any(r.backend.startswith("ort-native") for r in ran)
    native = {"capture-option-dropped"} if on_gpu else set()
    assert {fault for r in injected for fault in r.injected} == {
        "shape-only-capture-cache",
        "row-mean-skips-first",
        "capture-falls-back-to-eager",
        "racy-replay",
        "stale-input-binding",
        "stale-uniform-binding",
        "ep-name-as-string",
        "input-snapshot-at-capture",
        "graphs-share-inputs",
        "tanh-through-exp",
        *native,
    }
    assert all(r.outcome == "expected" and r.verdict != "pass" for r in injected)
    assert all(r.verdict == "pass" for r in ran if not r.injected)
    assert summary.exit_code == 0


def test_canary_models_without_faults_pass_20_times_on_wgpu(tmp_path):
    clean = [
        dataclasses.replace(case, inject=frozenset(), expectation=Expectation())
        for case in select_cases(expand_matrix([load_suite(CANARIES, REGISTRY)]), ["backend=wgpu"])
    ]
    summary = execute(RunPlan(tuple(clean * 20)), tmp_path, BackendOptions(runs=3))
    assert len(summary.results) == 20 * len(clean)
    false_positives = [r.case_id for r in summary.results if r.verdict != "pass"]
    assert false_positives == []


def test_every_mode_buffer_mode_and_graphs_pass_clean_on_wgpu(write_suite, tmp_path):
    """wgpu models a correct EP: new inputs every run, fresh buffers, two graphs, dynamic."""
    path = write_suite(
        """
models:
  enc: {builtin: encoder, layers: 1, hidden: 32, heads: 4, ffn: 64}
  fresh: {builtin: encoder, layers: 1, hidden: 32, heads: 4, ffn: 64, graphs: 2,
          buffers: {inputs: fresh, outputs: fresh}}
shapes:
  - {batch: 1, sequence: 16}
backends: [wgpu, reference]
capture: [dynamic, eager, capture]
"""
    )
    results = run_suite(path, tmp_path)
    assert len(results) == 2 * 2 * 3
    assert {r["verdict"] for r in results.values()} == {"pass"}, {
        k: r["message"] for k, r in results.items() if r["verdict"] != "pass"
    }
    assert [k.rsplit("/", 1)[1] for k in results][:3] == ["dynamic", "eager", "capture"]
    assert results["fresh/batch=1,sequence=16/layout=default/wgpu/capture"]["timings"]["runs"] == 6
    for record in results.values():
        RESULT_VALIDATOR.validate(record)
