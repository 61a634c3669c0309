"""The model of a page's own session (harness.js ``contextSession``, a repro bundle's
``context.onnx``), which keeps ORT's WebGPU context between cases: one Relu of a float vector. A
bundle's page makes it too, so that what lives on the wasm heap when its cases run is what the
suite's page had (where a replay's pre-allocated outputs land depends on it). feeds.mjs runs a
second session of it on zeros to have onnxruntime allocate buffers (``allocator: onnxruntime``)."""

from __future__ import annotations

from onnx import TensorProto, helper


def _context_model() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "context", [x], [y])
    opset = [helper.make_opsetid("", 17)]
    return helper.make_model(graph, opset_imports=opset, ir_version=8).SerializeToString()


CONTEXT_MODEL = _context_model()
