"""Realize a layout as an equivalent model variant, for backends that choose their own uniforms.

The ``wgpu`` backend orders each kernel's uniform struct by ``layout.order`` itself. A backend
such as onnxruntime-web lays out its uniform structs on its own, so there a layout is realized
in the model it is given: ``apply_layout`` returns a copy with identical inputs, outputs and
shapes, changed as follows.

- ``layout.values`` (changed constants, keys from ``runner.uniforms.VALUE_FIELDS``):

  - ``eps``: every LayerNormalization's ``epsilon`` attribute, and the epsilon of every
    decomposed layer norm. The latter is found structurally: an ``Add`` one of whose inputs is
    produced by a ``ReduceMean`` (the variance) and the other is a scalar constant (an
    initializer or a ``Constant`` node's output); that constant becomes the new eps. A constant
    shared with other nodes is left alone and the Add gets a fresh initializer. A model with no
    layer norm of either kind cannot realize ``eps``: ValueError.
  - ``heads``: only the builtin encoder can change its head count (``materialize`` passes
    values to ``build_encoder``); a ``path:`` model's heads are spread over reshape shapes and
    scale constants that no rewrite can find reliably, so ``apply_layout`` raises ValueError.

- ``layout.order`` (field names from ``runner.uniforms.UNIFORM_FIELDS``): the nodes are
  re-emitted in another valid topological order. A Kahn topological sort takes, among the ready
  nodes, the one whose op mainly carries the field that comes first in ``layout.order``
  (``OP_FIELDS``), ties broken by original position. A node whose field the order omits (or
  whose op is not listed) takes the most urgent rank among the nodes it feeds, directly or not,
  so glue such as bias Adds, Constants and shape chains moves with the kernel it serves; nodes
  feeding nothing ranked come last. Initializers are re-emitted in the order of their first
  consumer. Backends that create programs and uniform buffers while walking the graph thus
  create them in another sequence, which is what a stale binding depends on. How much an order
  moves depends on the graph's freedom: a chain-like graph (the compact encoder) only reorders
  its Q/K/V branches and the V branch against the softmax. An empty order leaves node and
  initializer order untouched.
"""

from __future__ import annotations

import heapq

import onnx
from onnx import helper, numpy_helper

from runner.suite.spec import Layout
from runner.uniforms import UNIFORM_FIELDS, VALUE_FIELDS

# The uniform field each op's kernel mainly carries; the ready-queue priority of `layout.order`.
OP_FIELDS: dict[str, str] = {
    "LayerNormalization": "eps",
    "ReduceMean": "eps",
    "Pow": "eps",
    "Sqrt": "eps",
    "Reshape": "heads",
    "Transpose": "heads",
    "Softmax": "scale",
    "Div": "scale",
    "MatMul": "hidden",
    "Gemm": "hidden",
    "Gelu": "ffn",
    "Erf": "ffn",
    "Relu": "ffn",
    "Tanh": "ffn",
    "Shape": "seq",
    "Slice": "seq",
    "Concat": "seq",
    "Unsqueeze": "seq",
    "Squeeze": "seq",
    "Gather": "rows",
    "Where": "size",
    "Equal": "size",
    "Cast": "size",
    "Add": "size",
    "Sub": "size",
    "Mul": "size",
    "Expand": "strides",
}


def apply_layout(model: onnx.ModelProto, layout: Layout) -> onnx.ModelProto:
    """A copy of ``model`` realizing ``layout``: same inputs, outputs and results."""
    unknown = sorted(set(layout.order) - set(UNIFORM_FIELDS))
    if unknown:
        raise ValueError(f"layout {layout.label!r} orders unknown fields {unknown}")
    variant = onnx.ModelProto()
    variant.CopyFrom(model)
    for field, value in layout.values:
        if field == "eps":
            _set_eps(variant.graph, float(value), layout.label)
        elif field == "heads":
            raise ValueError(
                f"layout {layout.label!r} changes heads, which only the builtin encoder can "
                "realize; a path: model's head count is fixed by its weights and reshapes"
            )
        else:
            raise ValueError(
                f"layout {layout.label!r} changes {field!r}; expected one of {list(VALUE_FIELDS)}"
            )
    if layout.order:
        _reorder(variant.graph, layout.order)
    return variant


def _set_eps(graph: onnx.GraphProto, eps: float, label: str) -> None:
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            consumers[name] = consumers.get(name, 0) + 1
    initializers = {init.name: init for init in graph.initializer}
    changed = 0
    for node in graph.node:
        if node.op_type == "LayerNormalization":
            _set_float_attribute(node, "epsilon", eps)
            changed += 1
        elif node.op_type == "Add":
            changed += _set_decomposed_eps(node, eps, producers, consumers, initializers, graph)
    if not changed:
        raise ValueError(
            f"layout {label!r} changes eps, but the model has no LayerNormalization and no "
            "decomposed layer norm (Add of a scalar constant to a ReduceMean)"
        )


def _set_float_attribute(node: onnx.NodeProto, name: str, value: float) -> None:
    for attribute in node.attribute:
        if attribute.name == name:
            attribute.f = value
            return
    node.attribute.append(helper.make_attribute(name, value))


def _set_decomposed_eps(node, eps, producers, consumers, initializers, graph) -> int:
    """Rewrite the eps of ``Add(ReduceMean(...), scalar)``; 1 if ``node`` is one, else 0."""
    if len(node.input) != 2:
        return 0
    for position, (variance, constant) in enumerate((node.input, node.input[::-1])):
        source = producers.get(variance)
        if source is None or source.op_type != "ReduceMean":
            continue
        slot = 1 - position  # index of `constant` in node.input
        if constant in initializers and _is_scalar(initializers[constant]):
            tensor = initializers[constant]
        elif constant in producers and producers[constant].op_type == "Constant":
            tensor = _constant_tensor(producers[constant])
            if tensor is None or not _is_scalar(tensor):
                continue
        else:
            continue
        array = numpy_helper.to_array(tensor)
        new = numpy_helper.from_array(array.dtype.type(eps).reshape(array.shape), tensor.name)
        if consumers[constant] == 1:
            tensor.CopyFrom(new)
        else:
            new.name = f"{node.name or node.output[0]}/eps"
            graph.initializer.append(new)
            node.input[slot] = new.name
        return 1
    return 0


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    for attribute in node.attribute:
        if attribute.name == "value":
            return attribute.t
    return None


def _is_scalar(tensor: onnx.TensorProto) -> bool:
    return all(d == 1 for d in tensor.dims) and tensor.data_type in (
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.DOUBLE,
    )


def _reorder(graph: onnx.GraphProto, order: tuple[str, ...]) -> None:
    rank = {field: i for i, field in enumerate(order)}
    nodes = list(graph.node)
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    dependents: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for i, node in enumerate(nodes):
        for source in {producer[name] for name in _inputs(node) if name in producer}:
            dependents[source].append(i)
            waiting[i] += 1

    # A node whose op carries no ordered field takes the most urgent rank among its consumers,
    # so glue (bias Adds, Constants, shape chains) travels with the kernel it feeds. ONNX graphs
    # list producers first, so one reverse pass sees every consumer before its producer.
    urgency = [rank.get(OP_FIELDS.get(node.op_type, ""), len(order)) for node in nodes]
    for i in reversed(range(len(nodes))):
        if urgency[i] == len(order):
            urgency[i] = min((urgency[j] for j in dependents[i]), default=len(order))

    def priority(i: int) -> tuple[int, int]:
        return (urgency[i], i)

    ready = [priority(i) for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    emitted: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        emitted.append(i)
        for j in dependents[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, priority(j))
    if len(emitted) != len(nodes):
        raise ValueError("the model's graph has a cycle; it cannot be re-ordered")

    initializers = {init.name: init for init in graph.initializer}
    first_use: dict[str, int] = {}
    for position, i in enumerate(emitted):
        for name in _inputs(nodes[i]):
            first_use.setdefault(name, position)
    unused = len(emitted)
    reordered = sorted(
        initializers.values(), key=lambda init: first_use.get(init.name, unused)
    )  # stable: unused initializers keep their relative order, at the end
    del graph.node[:]
    graph.node.extend(nodes[i] for i in emitted)
    del graph.initializer[:]
    graph.initializer.extend(reordered)


def _inputs(node: onnx.NodeProto) -> list[str]:
    """Values ``node`` reads, including those its subgraphs (If, Loop, Scan) read from outside."""
    names = [name for name in node.input if name]
    for attribute in node.attribute:
        for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            inner = {out for n in subgraph.node for out in n.output}
            inner |= {i.name for i in subgraph.input} | {i.name for i in subgraph.initializer}
            names += [name for n in subgraph.node for name in _inputs(n) if name not in inner]
    return names
