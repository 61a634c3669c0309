"""The one-node model of an ORT-web op test, and a case's tensors as arrays.

Built as ORT-web's runner builds it (``ProtoOpTestContext`` in js/web/test/test-runner.ts): one
node named after the operator, inputs ``input_<i>`` and outputs ``output_<i>``, the test's
opset, attributes and input shape definitions, types from the test's first case. An omitted
optional input is left out the ONNX way, as an empty name.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from onnx import AttributeProto, TensorProto, helper

from runner.suite.spec import OpTensor, OpTest, OpTestCase

ONNX_TYPES = {
    "float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "float64": TensorProto.DOUBLE,
    "int8": TensorProto.INT8, "int16": TensorProto.INT16, "int32": TensorProto.INT32,
    "int64": TensorProto.INT64, "uint8": TensorProto.UINT8, "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64, "bool": TensorProto.BOOL,
    "string": TensorProto.STRING,
}  # fmt: skip

_ATTRIBUTE_TYPES = {
    "int": AttributeProto.INT, "float": AttributeProto.FLOAT, "string": AttributeProto.STRING,
    "ints": AttributeProto.INTS, "floats": AttributeProto.FLOATS,
    "strings": AttributeProto.STRINGS,
}  # fmt: skip


@functools.lru_cache(maxsize=256)
def op_test_model(test: OpTest) -> bytes:
    """The test's model, serialized; shared by all its cases."""
    inputs = [f"input_{i}" if kind else "" for i, kind in enumerate(test.input_types)]
    while inputs and not inputs[-1]:
        inputs.pop()  # trailing omitted inputs are simply absent
    node = helper.make_node(
        test.operator,
        inputs,
        [f"output_{i}" for i in range(len(test.output_types))],
        name=test.operator,
        domain=test.domain,
    )
    node.attribute.extend(
        helper.make_attribute(
            a.name,
            list(a.value) if isinstance(a.value, tuple) else a.value,
            attr_type=_ATTRIBUTE_TYPES[a.type],
        )
        for a in test.attributes
    )
    graph = helper.make_graph(
        [node],
        test.name,
        [
            helper.make_tensor_value_info(f"input_{i}", ONNX_TYPES[kind], _dims(shape))
            for i, (kind, shape) in enumerate(zip(test.input_types, test.input_shapes, strict=True))
            if kind
        ],
        [
            helper.make_tensor_value_info(f"output_{i}", ONNX_TYPES[kind], None)
            for i, kind in enumerate(test.output_types)
        ],
    )
    opsets = [helper.make_opsetid(test.domain, test.opset)]
    model = helper.make_model(
        graph,
        opset_imports=opsets,
        ir_version=helper.find_min_ir_version_for(opsets, ignore_unknown=True),
        producer_name="webgpu-capture-regress op test",
    )
    return model.SerializeToString()


def _dims(shape: Sequence[int | str] | None) -> list[int | str] | None:
    return None if shape is None else list(shape)


def array(tensor: OpTensor) -> np.ndarray:
    """A tensor of the file as numpy holds it (strings as objects, as onnxruntime takes them)."""
    dtype = object if tensor.type == "string" else np.dtype(tensor.type)
    return np.array(tensor.data, dtype=dtype).reshape(tensor.dims)


def case_inputs(case: OpTestCase) -> dict[str, np.ndarray]:
    return {f"input_{i}": array(t) for i, t in enumerate(case.inputs) if t is not None}


def expected_outputs(case: OpTestCase) -> dict[str, np.ndarray]:
    """The file's expected outputs, by output name; unchecked outputs left out."""
    return {f"output_{i}": array(t) for i, t in enumerate(case.outputs) if t is not None}
