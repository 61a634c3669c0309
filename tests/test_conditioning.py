"""The tolerance follows the conditioning of what is computed: an ill-conditioned result's
float rounding passes, a well-conditioned result's real error still fails
(``runner.oracle.conditioning``, ``Evidence.against_reference``).

The backend here hands back onnxruntime CPU's own outputs for each run's inputs, with an error
injected on chosen elements: the judge's arithmetic is what is under test, on the real oracle.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from runner.backends.base import BackendOptions, BackendRun, CaseWork, Timings
from runner.compare import compare_outputs
from runner.oracle import ReferenceCache, compute_reference, conditioning
from runner.selection import Selection, select
from runner.step import Step
from runner.workload import materialize


class ErrorInjecting:
    """A backend whose every run returns the reference plus `error` on the first `count`
    elements of output y."""

    def __init__(self, error: float, count: int):
        self.error, self.count = error, count

    def run(self, work: CaseWork) -> BackendRun:
        feeds = work.workload.feeds(1)
        outputs = []
        for feed in feeds:
            y = compute_reference(work.workload, feed.variant)["y"].copy()
            y.reshape(-1)[: self.count] += self.error
            outputs.append({"y": y})
        return BackendRun(runs=tuple(outputs), timings=Timings(runs=len(outputs)))


def layer_norm_suite(tmp_path: Path, row: int, low: float, high: float, dtype=np.float32) -> Path:
    """LayerNormalization over rows of `row` elements, eps 1e-5, inputs uniform in [low, high)."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    rows = 96 // row
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "scale"], ["y"], epsilon=1e-5)],
        "ln",
        [helper.make_tensor_value_info("x", elem, [rows, row])],
        [helper.make_tensor_value_info("y", elem, [rows, row])],
        [helper.make_tensor("scale", elem, [row], np.ones(row, dtype).tolist())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.save(model, tmp_path / "ln.onnx")
    path = tmp_path / "ln.yaml"
    path.write_text(
        "name: ln\n"
        f"models: {{ln: {{path: ln.onnx, inputs: {{x: {{range: [{low}, {high}]}}}}}}}}\n"
        "backends: [wgpu]\ncapture: [eager]\ntolerance: {abs: 1.0e-4, rel: 1.0e-4}\n"
    )
    return path


def stepped(suite: Path, backend: ErrorInjecting):
    (case,) = select(Selection((suite,)))
    return Step(ReferenceCache(None).references, BackendOptions(runs=1)).run(case, backend)


def test_ill_conditioned_rounding_is_no_bug(tmp_path):
    """explore's false positive of 2026-12-05: LayerNormalization over rows of 2, eps 1e-5, two
    elements 1.77e-4 off onnxruntime CPU. Two close values in a row make its output amplify
    rounding: 64 ulps of input move it by 2.4e-3, so it passes."""
    suite = layer_norm_suite(tmp_path, row=2, low=1.0, high=1.001)
    done = stepped(suite, ErrorInjecting(1.77e-4, 2))
    assert done.judgement.verdict == "pass"
    # the tolerance alone would fail it: the slack is what passes it
    (reference,) = done.references.values()
    (actual,) = done.run.runs
    alone = compare_outputs(actual, reference, done.case.tolerance)
    assert alone["y"].mismatched == 2


def test_a_real_error_in_a_well_conditioned_result_still_fails(tmp_path):
    """The same op over rows of 6 spread values: a 1e-3 error on one element is a bug."""
    suite = layer_norm_suite(tmp_path, row=6, low=-1.0, high=1.0)
    judgement = stepped(suite, ErrorInjecting(1e-3, 1)).judgement
    assert judgement.verdict == "reference-mismatch"
    assert "1/96 elements" in judgement.message


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_slack_is_what_rounding_the_inputs_explains(tmp_path, dtype):
    """Per element, per dtype: large along an ill-conditioned row, small along a spread one."""
    slack = {}
    for name, row, low, high in (("ill", 2, 1.0, 1.001), ("well", 6, -1.0, 1.0)):
        (tmp_path / name).mkdir()
        (case,) = select(Selection((layer_norm_suite(tmp_path / name, row, low, high, dtype),)))
        slack[name] = conditioning(materialize(case, 1))["y"]
    ill, well = slack["ill"], slack["well"]
    assert well.max() < 128 * float(np.finfo(dtype).eps)  # the ulps moved, hardly amplified
    assert ill.max() > 100 * well.max()  # amplified a hundredfold and more
