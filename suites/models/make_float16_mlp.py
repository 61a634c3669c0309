"""Make ``float16-mlp.onnx``: a transformer block's MLP in float16, the precision WebGPU
applications ship (q4f16 LLMs run float16 activations): LayerNormalization, MatMul and Add into
64 features, Gelu (its erf form, opset 20), MatMul and Add back to 32, and a residual Add, over
x[1, 8, 32] float16. Weights drawn at random (seed 0) and kept small, so that no value nears
float16's limits.

    python suites/models/make_float16_mlp.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int, scale: float = 0.2) -> onnx.TensorProto:
        values = rng.uniform(-scale, scale, shape).astype(np.float16)
        return numpy_helper.from_array(values, name)

    initializers = [
        weight("gamma", 32, scale=1.0),
        weight("beta", 32),
        weight("w1", 32, 64),
        weight("b1", 64),
        weight("w2", 64, 32),
        weight("b2", 32),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1),
        helper.make_node("MatMul", ["n", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Gelu", ["hb"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["ob"]),
        helper.make_node("Add", ["ob", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "float16_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 8, 32])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    onnx.save(make(), Path(__file__).with_name("float16-mlp.onnx"))
