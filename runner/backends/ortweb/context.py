"""The models of a page's own sessions: one Relu of a float each.

``CONTEXT_MODEL`` (harness.js ``contextSession``, a repro bundle's ``context.onnx``) keeps ORT's
WebGPU context between cases, made once and never run. A bundle's page makes it too, so that what
lives on the wasm heap when its cases run is what the suite's page had: whether a C++ build's
replay finds the page's pre-allocated buffers depends on it (a replay looks a buffer up by a heap
address its binding run freed, suites/bugs/ort-prealloc-handle.yaml). Its shape stays [1]: with a
symbolic one the encoder's page-buffer replays in tests/test_ortweb.py threw.

``ALLOCATOR_MODEL`` (``allocator.onnx``): feeds.mjs runs it on zeros to have onnxruntime allocate
the buffers of a case with ``allocator: onnxruntime``, any size, hence its symbolic shape.
"""

from __future__ import annotations

from onnx import TensorProto, helper


def _relu_model(name: str, dim: int | str) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], name, [x], [y])
    opset = [helper.make_opsetid("", 17)]
    return helper.make_model(graph, opset_imports=opset, ir_version=8).SerializeToString()


CONTEXT_MODEL = _relu_model("context", 1)
ALLOCATOR_MODEL = _relu_model("allocator", "n")
