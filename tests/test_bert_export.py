"""A real torch.onnx export of a BERT sentence encoder (tests/data/models/make_bert_export.py)
through the suite ``tests/data/bert-export.yaml`` on every backend: the mask path it carries
(Flatten, Range, ConstantOfShape, And, GreaterOrEqual, IsNaN) folded or run on wgpu, and what
each onnxruntime-web build does with it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from runner.backends.wgpu.prepare import prepare

from .conftest import REPO, regress

SUITE = REPO / "tests/data/bert-export.yaml"
MODEL = REPO / "tests/data/models/bert_tiny_export.onnx"
MASK_OPS = {"Flatten", "Range", "ConstantOfShape", "And", "GreaterOrEqual", "IsNaN"}


def run_results(tmp_path: Path, backend: str, *more: str) -> dict[str, dict]:
    """Verdict records by backend/mode for the suite run on the named backends."""
    backends = [arg for name in (backend, *more) for arg in ("--backend", name)]
    proc = regress("run", SUITE, *backends, "--out", tmp_path, "--runs", "2")
    assert proc.returncode == 0, proc.stderr
    [results] = tmp_path.glob("runs/*/results.jsonl")
    records = [json.loads(line) for line in results.read_text().splitlines()]
    return {"/".join(r["case_id"].split("/")[-2:]): r for r in records}


def test_the_fixture_is_a_small_export_with_the_mask_ops():
    model = onnx.load(MODEL)
    assert MODEL.stat().st_size < 300_000
    assert MASK_OPS <= {node.op_type for node in model.graph.node}
    for value in model.graph.input:
        assert value.type.tensor_type.elem_type == onnx.TensorProto.INT64
        assert [d.dim_param for d in value.type.tensor_type.shape.dim] == ["batch", "sequence"]


def test_pinned_shapes_fold_the_mask_arithmetic_and_leave_the_data_dependent_ops():
    model = onnx.load(MODEL)
    ops = {node.name: node.op_type for node in model.graph.node}
    mask = np.array([[1, 1, 1, 1, 1, 0, 0, 0], [1, 0, 1, 1, 0, 1, 1, 1]], np.int64)
    inputs = {"input_ids": np.arange(16, dtype=np.int64).reshape(2, 8), "attention_mask": mask}
    plan = prepare(MODEL.read_bytes(), inputs, dims={"batch": 2, "sequence": 8})
    run = Counter(ops[step.node.split("+")[0]] for step in plan.steps)
    assert run["And"] == 1 and run["IsNaN"] == 2  # the padding mask; softmax's NaN guard
    assert not {"Flatten", "Range", "ConstantOfShape", "GreaterOrEqual", "GatherElements"} & set(
        run
    )


@pytest.mark.gpu
def test_wgpu_eager_and_capture_and_the_reference_pass(tmp_path):
    results = run_results(tmp_path, "wgpu", "reference")
    assert {case: r["verdict"] for case, r in results.items()} == {
        "wgpu/eager": "pass",
        "wgpu/capture": "pass",
        "reference/eager": "pass",
        "reference/capture": "pass",
    }
    assert results["wgpu/capture"]["trace"]["replay_bind_groups_created"] == 0


@pytest.mark.browser
def test_ort_web_runs_it_eager_and_every_build_refuses_to_capture_it(tmp_path):
    results = run_results(tmp_path, "ort-web")
    for bundle in ("jsep", "webgpu", "jspi"):
        eager, capture = results[f"ort-web:{bundle}/eager"], results[f"ort-web:{bundle}/capture"]
        assert eager["verdict"] == "pass" and eager["trace"]["dispatches"] > 0
        assert capture["verdict"] == "capture-unsupported" and capture["outcome"] == "expected"
        assert "have not been partitioned" in capture["message"]
