"""The op-test fixtures (tests/data/optests/, through suites/ort-ops.example.yaml) on each
onnxruntime-web build in headless Chromium, eager and with capture: verdicts and skip reasons
per test. The same fixtures on the reference and wgpu backends: tests/test_optests.py."""

from __future__ import annotations

import pytest

from runner.backends.base import BackendOptions
from runner.pipeline import execute
from runner.selection import RunPlan
from runner.suite.spec import BackendTarget
from tests.test_optests import BACKEND, COMMON, PASS, example_cases, outcomes

pytestmark = pytest.mark.browser

ON_ORT_WEB = {
    **COMMON,
    "FastGelu": {PASS},
    "Clip with max only": {PASS},
    "Gather int64 indices": {PASS},
    "Add float16": {BACKEND},  # SwiftShader's adapter has no shader-f16
    "FastGelu with a bias that broadcasts": {PASS},  # judged without a reference
    "Concat zero-sized preserving dims": {"error"},  # JSEP refuses, the C++ builds abort
    "BiasSplitGelu": {"error"},  # hidden sizes 2560, 5120 or 10240 only
}
BUNDLES = {
    # JSEP runs Scaler (ai.onnx.ml) eagerly on its CPU EP, and so will not capture it.
    "jsep": {**ON_ORT_WEB, "Scaler": {PASS, BACKEND}},
    # The C++ EP builds leave the ai.onnx.ml domain out: "No Op registered for Scaler".
    "webgpu": {**ON_ORT_WEB, "Scaler": {BACKEND}},
    "jspi": {**ON_ORT_WEB, "Scaler": {BACKEND}},
}


@pytest.mark.parametrize("bundle", sorted(BUNDLES))
def test_fixtures_on_ort_web(bundle, tmp_path):
    run = execute(
        RunPlan(tuple(example_cases(BackendTarget("ort-web", bundle=bundle)))),
        tmp_path,
        BackendOptions(),
    )
    assert run.status == "complete" and run.exit_code == 0
    want = {
        test: want if isinstance(want, set) else {want} for test, want in BUNDLES[bundle].items()
    }
    assert outcomes(run.results) == want
    by_id = {r.case_id: r for r in run.results}
    wrong = by_id[
        f"ort-ops/layer-norm/LayerNorm, expected output deliberately wrong/T[1,4]/"
        f"ort-web:{bundle}/capture"
    ]
    assert (
        wrong.outcome == "expected"
        and "the file's expected output disagrees with onnxruntime CPU on 'output_0'"
        in wrong.message
    )
