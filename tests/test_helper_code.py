"""``helper_code``: the onnx.helper lines an issue shows rebuild its model exactly."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from runner.repro.helper_code import helper_code

from .conftest import REPO

BUGS = REPO / "suites/bugs/models"


def constant_float16() -> onnx.ModelProto:
    """A Constant's tensor attribute (0-d), a float16 initializer with an infinity and a NaN, an
    empty one, a string and a list attribute, a symbolic dim."""
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.float16(0.1))),
        helper.make_node("Add", ["x", "c"], ["a"], name="add"),
        helper.make_node("Gelu", ["a"], ["g"], approximate="tanh"),
        helper.make_node("Mul", ["g", "w"], ["m"]),
        helper.make_node("Transpose", ["m"], ["y"], perm=[1, 0]),
        helper.make_node("Concat", ["empty", "z"], ["e"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["n", 5]),
            helper.make_tensor_value_info("z", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT16, [5, "n"]),
            helper.make_tensor_value_info("e", TensorProto.INT64, [2]),
        ],
        [
            numpy_helper.from_array(np.array([0.1, -2.5, 1e-4, np.inf, np.nan], np.float16), "w"),
            numpy_helper.from_array(np.zeros((0,), np.int64), "empty"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def rebuilt(code: str, folder) -> onnx.ModelProto:
    (folder / "build.py").write_text(code)
    subprocess.run([sys.executable, "build.py"], cwd=folder, check=True)
    return onnx.load(folder / "model.onnx")


@pytest.mark.parametrize(
    "model",
    [
        constant_float16(),
        onnx.load(BUGS / "slice-negative-step.onnx"),
        onnx.load(BUGS / "reshape-output.onnx"),
        onnx.load(BUGS / "sigmoid-squeeze-reducemean-unsqueeze.onnx"),
    ],
    ids=["constant-float16", "slice", "reshape", "unsqueeze"],
)
def test_the_code_rebuilds_the_model(model, tmp_path):
    again = rebuilt(helper_code(model), tmp_path)
    onnx.checker.check_model(again, full_check=True)
    assert [n.SerializeToString() for n in again.graph.node] == [
        n.SerializeToString() for n in model.graph.node
    ]
    inputs = [
        v for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}
    ]
    assert list(again.graph.input) == inputs and list(again.graph.output) == list(
        model.graph.output
    )
    for got, want in zip(again.graph.initializer, model.graph.initializer, strict=True):
        assert got.name == want.name
        assert numpy_helper.to_array(got).tobytes() == numpy_helper.to_array(want).tobytes()
        assert numpy_helper.to_array(got).shape == numpy_helper.to_array(want).shape
    assert list(again.opset_import) == list(model.opset_import)


def test_a_model_too_big_to_read_has_no_code():
    big = onnx.load(BUGS / "conv1d-129-channels.onnx")  # weights past what one reads
    assert helper_code(big) is None
