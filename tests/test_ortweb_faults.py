"""The ort-web fault ``stale-uniform-binding`` end to end in headless Chromium: with it, the
capture of a layout whose LayerNormalization epsilon changed replays the earlier layout's
uniforms, and the real pipeline's judge names that layout on every onnxruntime-web build;
without it, the same cases pass."""

from __future__ import annotations

import pytest

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions
from runner.matrix import expand_matrix
from runner.pipeline import execute
from runner.selection import RunPlan
from runner.suite import load_suite

pytestmark = pytest.mark.browser

BUNDLES = ("jsep", "webgpu", "jspi")
SUITE = """
models:
  enc: {builtin: encoder, layers: 1, hidden: 32, heads: 4}
shapes:
  - {batch: 1, sequence: 16}
layouts:
  - label: first
  - label: second
    values: {eps: 1.0e-2}
backends:
  - {name: ort-web, bundle: jsep}
  - {name: ort-web, bundle: webgpu}
  - {name: ort-web, bundle: jspi}
cases:
  - match: {layout: second, capture: capture}
    inject: [stale-uniform-binding]
    expect: stale-layout
"""


def test_stale_uniform_binding_names_the_earlier_layout_on_every_bundle(write_suite, tmp_path):
    summary = execute(
        RunPlan(tuple(expand_matrix([load_suite(write_suite(SUITE), REGISTRY)]))),
        tmp_path / "out",
        BackendOptions(runs=3),
    )
    assert summary.status == "complete"
    results = {r.case_id: r.to_dict() for r in summary.results}
    assert len(results) == 3 * 5  # per bundle: 2 layouts x 2 modes + the first captured again
    for bundle in BUNDLES:
        poisoned = results[f"enc/batch=1,sequence=16/layout=second/ort-web:{bundle}/capture"]
        assert poisoned["injected"] == ["stale-uniform-binding"]
        assert poisoned["verdicts"] == ["capture-mismatch", "stale-layout"], poisoned["message"]
        assert poisoned["verdict"] == "stale-layout" and poisoned["outcome"] == "expected"
        assert poisoned["stale_from"] == "first"
        # eps 1e-5 where 1e-2 belongs: far off its own reference, close to the first layout's
        assert poisoned["max_abs_error"] > 1e-3
    clean = {case: r["verdict"] for case, r in results.items() if not r["injected"]}
    assert set(clean.values()) == {"pass"}, clean  # the fault reached no other case
