"""A small model as the Python that builds it with ``onnx.helper``, for an issue's reader.

An upstream maintainer reads a few lines of ``onnx.helper`` faster than they open a binary
``model.onnx``. ``helper_code`` writes them for models small enough to read: a few nodes, every
constant a few elements (weights beyond that are no reading matter); None for anything else.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

MAX_NODES = 12
MAX_ELEMENTS = 64  # per initializer or tensor attribute


def helper_code(model: onnx.ModelProto) -> str | None:
    """Python that builds `model` (its nodes, graph inputs, outputs, initializers and opsets)
    and saves it as model.onnx; None when it is too big to read or holds what this cannot
    write (subgraphs, sparse or external tensors)."""
    graph = model.graph
    if len(graph.node) > MAX_NODES or graph.sparse_initializer:
        return None
    try:
        nodes = [_node(node) for node in graph.node]
        initializers = [_tensor(t) for t in graph.initializer]
    except _Unreadable:
        return None
    inputs = [_value_info(v) for v in graph.input if v.name not in _names(graph.initializer)]
    outputs = [_value_info(v) for v in graph.output]
    opsets = ", ".join(
        f"helper.make_opsetid({o.domain!r}, {o.version})" for o in model.opset_import
    )
    return "\n".join(
        [
            "import numpy as np",
            "import onnx",
            "from onnx import TensorProto, helper, numpy_helper",
            "",
            "nodes = [",
            *[f"    {line}," for line in nodes],
            "]",
            "graph = helper.make_graph(",
            "    nodes,",
            f"    {graph.name!r},",
            *_listed(inputs),
            *_listed(outputs),
            *_listed(initializers),
            ")",
            f"model = helper.make_model(graph, opset_imports=[{opsets}])",
            f"model.ir_version = {model.ir_version}",
            'onnx.save(model, "model.onnx")',
            "",
        ]
    )


def _listed(items: list[str]) -> list[str]:
    """A list argument of make_graph, an item a line."""
    return ["    [", *[f"        {item}," for item in items], "    ],"] if items else ["    [],"]


class _Unreadable(Exception):
    """Something in the model the helper code would not show as it is."""


def _names(tensors) -> set[str]:
    return {t.name for t in tensors}


def _node(node: onnx.NodeProto) -> str:
    args = [repr(node.op_type), repr(list(node.input)), repr(list(node.output))]
    if node.name:
        args.append(f"name={node.name!r}")
    if node.domain:
        args.append(f"domain={node.domain!r}")
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.TENSOR:
            value = _tensor(attribute.t)
        elif attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            raise _Unreadable(attribute.name)
        else:
            value = repr(_plain(helper.get_attribute_value(attribute)))
        args.append(f"{attribute.name}={value}")
    return f"helper.make_node({', '.join(args)})"


def _plain(value):
    """An attribute's value as Python literals: strings decoded, lists as lists."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _tensor(tensor: onnx.TensorProto) -> str:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise _Unreadable(tensor.name)
    array = numpy_helper.to_array(tensor)
    if array.size > MAX_ELEMENTS:
        raise _Unreadable(tensor.name)
    literal = f"np.array({_literal(array)}, np.{array.dtype.name})"
    if not array.size:  # an empty array prints as [] whatever its shape
        literal += f".reshape({array.shape})"
    return f"numpy_helper.from_array({literal}, {tensor.name!r})"


def _literal(array: np.ndarray) -> str:
    """Nested lists of the shortest text that reads back as each element's own value."""
    if array.ndim:
        return "[" + ", ".join(_literal(part) for part in array) + "]"
    value = array[()]
    if isinstance(value, np.floating) and not np.isfinite(value):
        return "np.nan" if np.isnan(value) else f"{'-' if value < 0 else ''}np.inf"
    return str(value) if isinstance(value, np.floating) else repr(value.item())


def _value_info(value: onnx.ValueInfoProto) -> str:
    kind = value.type.tensor_type
    element = onnx.TensorProto.DataType.Name(kind.elem_type)
    dims = [d.dim_param or d.dim_value for d in kind.shape.dim]
    shape = repr(dims) if kind.HasField("shape") else "None"
    return f"helper.make_tensor_value_info({value.name!r}, TensorProto.{element}, {shape})"
