"""The first divergent node: neither a view the model does not output itself (its values are its
input's) nor a node fed constants only (folded before the session runs) is named: exposing one
as a graph output only tests how the backend outputs a view or a constant, and onnxruntime's
WebGPU builds replay such outputs stale (found on Silero VAD). The backend is a fake answering
like one with that trait and a real capture bug further on: pure logic, no device."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from runner.backends.base import BackendRun, CaseWork
from runner.localize import expose_intermediates, first_divergent_node
from runner.matrix import Case
from runner.measure import Tolerance
from runner.suite.spec import STATIC_SHAPE, BackendTarget, Layout, ModelSpec, Suite
from runner.workload import Workload


def relu_view_sigmoid() -> bytes:
    """x - bias -> Relu -> Unsqueeze -> Sigmoid -> Squeeze -> y, -bias a constant Neg."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    nodes = [
        helper.make_node("Neg", ["bias"], ["folded"], name="constant"),  # fed constants only
        helper.make_node("Add", ["x", "folded"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Unsqueeze", ["r", "axes"], ["u"], name="view"),
        helper.make_node("Sigmoid", ["u"], ["s"], name="sigmoid"),
        helper.make_node("Squeeze", ["s", "axes"], ["y"], name="squeeze"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [axes, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


class StaleViewsAndAWrongSigmoid:
    """Eager is right. Under capture an exposed view output holds the recording run's values,
    and the Sigmoid is wrong (the bug a localization should name)."""

    def __init__(self, x: np.ndarray):
        folded = -np.arange(1, 5, dtype=np.float32)
        r = np.maximum(x + folded, 0)
        self.right = {"folded": folded, "a": x + folded, "r": r, "u": r[None]}
        self.right["s"] = 1 / (1 + np.exp(-r[None]))
        self.right["y"] = self.right["s"][0]

    def run(self, work: CaseWork) -> BackendRun:
        names = work.workload.output_names
        outputs = {name: self.right[name] for name in names}
        if work.case.capture:
            stale = {"u": np.zeros_like(self.right["u"]), "folded": np.zeros(4, np.float32)}
            outputs.update({name: value for name, value in stale.items() if name in names})
            outputs["s"] = self.right["s"] + 0.5
            outputs["y"] = outputs["s"][0]
        return BackendRun(runs=(outputs,))


def test_a_view_is_not_named_the_compute_node_after_it_is():
    x = np.array([-1.0, 2.5, 5.0, 7.0], dtype=np.float32)
    workload = Workload("k", relu_view_sigmoid(), {"x": x}, ("y",), {})
    exposed = expose_intermediates(workload)
    assert exposed.workload.output_names == ("y", "a", "r", "s")  # no view, no constant
    assert [op for _, op, _ in exposed.nodes] == ["Add", "Relu", "Sigmoid"]
    spec, target = ModelSpec("m"), BackendTarget("ort-web", "webgpu")
    suite = Suite("s", Path("s.yaml"), (spec,), (STATIC_SHAPE,), (Layout("default"),), (target,))
    case = Case(suite, spec, STATIC_SHAPE, Layout("default"), target, True, Tolerance())
    node = first_divergent_node(
        StaleViewsAndAWrongSigmoid(x), case, workload, frozenset({"capture-mismatch"})
    )
    assert node is not None
    assert (node["op_type"], node["name"], node["against"]) == ("Sigmoid", "sigmoid", "eager")
    assert node["mismatched"] == 4 and node["max_abs"] == pytest.approx(0.5)
