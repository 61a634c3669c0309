"""Prepare a model for the device: pin its shapes, fold what is constant, plan the kernels.

Walking the graph in topological order, every tensor gets a static shape (graph inputs are
pinned to the case's input arrays, checked against the declared dims). A node whose inputs are
all known on the host (initializers, Constant, Shape of a pinned tensor, and everything computed
only from those: the exported encoder's Shape/Gather/Unsqueeze/Concat chains) is evaluated on
the host with ``onnx.reference`` and never reaches the device. Every other node goes to its
planner in ``ops``, which picks kernels; a scalar Mul/Div after a MatMul folds into the
MatMul's ``scale`` uniform. Node names are kept (unnamed nodes become ``<op>_<index>``), so a
trace names the ONNX node each dispatch runs.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from runner.backends.wgpu.kernels import Kernel, Program, compose, workgroups
from runner.backends.wgpu.ops import Node, OpPlan, Result, plan_node
from runner.backends.wgpu.tensors import Tensor, host_tensor


@dataclass(frozen=True, eq=False)
class Step:
    """One dispatch: a program, the tensors bound to it, and its packed uniform struct."""

    node: str
    program: Program
    inputs: tuple[str, ...]  # storage names, binding 0..n-1
    output: str  # storage name, binding n
    values: Mapping[str, object]
    invocations: int

    @property
    def uniform(self) -> bytes:
        return self.program.layout.pack(self.values)

    @property
    def workgroups(self) -> tuple[int, int, int]:
        return workgroups(self.invocations)


@dataclass(frozen=True, eq=False)
class Plan:
    steps: tuple[Step, ...]
    tensors: Mapping[str, Tensor]  # every tensor the device holds or aliases, by name
    storage: Mapping[str, str]  # tensor -> the tensor whose buffer holds it (itself, or aliased)
    constants: Mapping[str, np.ndarray]  # storage name -> host value uploaded once
    roles: Mapping[str, str]  # storage name -> input | output | weight | intermediate
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    uniform_order: tuple[str, ...]


def prepare(
    model: bytes,
    inputs: Mapping[str, np.ndarray],
    uniform_order: Sequence[str] = (),
    outputs: Sequence[str] = (),
    dims: Mapping[str, int] | None = None,
    program: Callable[[Kernel, tuple[str, ...]], Program] = compose,
) -> Plan:
    """Plan ``model`` for ``inputs``' shapes (symbolic ``dims`` pinned to the case's values);
    raises UnsupportedOp for an op without a kernel. ``program``: how each kernel becomes a
    program under the uniform order (injected faults' edits and keys: ``Faults.compose``)."""
    proto = onnx.load_from_string(model)
    order, outputs = tuple(uniform_order), tuple(outputs)
    return _Planner(proto, inputs, order, outputs, dims or {}, program).plan()


class _Planner:
    def __init__(self, proto, inputs, order, outputs, dims, program):
        self.proto = proto
        self.order = order
        self.program = program
        graph = proto.graph
        opsets = {o.domain: o.version for o in proto.opset_import}
        self.opset = opsets.get("", opsets.get("ai.onnx", 1))
        self.known: dict[str, Tensor] = {
            i.name: host_tensor(numpy_helper.to_array(i)) for i in graph.initializer
        }
        self.inputs = tuple(i.name for i in graph.input if i.name not in self.known)
        for value_info in graph.input:
            if value_info.name in self.inputs:
                self.known[value_info.name] = _pinned(value_info, inputs, dims)
        self.outputs = outputs or tuple(o.name for o in graph.output)
        self.storage = {name: name for name in self.inputs}
        self.constants: dict[str, np.ndarray] = {}
        self.steps: list[Step] = []
        self.producer: dict[str, int] = {}  # storage name -> index of the step writing it
        self.uses = Counter(name for node in graph.node for name in node.input)
        self.uses.update(self.outputs)

    def plan(self) -> Plan:
        nodes = _needed(_topological(self.proto.graph.node, set(self.known)), self.outputs)
        for index, node in enumerate(nodes):
            name = node.name or f"{node.op_type}_{index}"
            ins = [self.known[i] if i else None for i in node.input]
            if _foldable(node, ins):
                folded = _fold(node, ins, self.proto.opset_import)
                if folded is not None:
                    self.known.update(zip(node.output, map(host_tensor, folded), strict=False))
                    continue
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            view = Node(name, node.op_type, tuple(node.output), attrs, self.opset)
            if not self._fuse_scale(view, node, ins):
                self._place(view, node, plan_node(view, node.domain, ins))
        storage_outputs = [self._buffer(name) for name in self.outputs]
        return Plan(
            tuple(self.steps),
            {name: self.known[name] for name in self.storage},
            dict(self.storage),
            dict(self.constants),
            _roles(self.storage, self.inputs, storage_outputs, self.constants),
            self.inputs,
            self.outputs,
            self.order,
        )

    def _buffer(self, name: str) -> str:
        """The storage of a tensor; a host constant used on the device becomes a weight."""
        if name not in self.storage:
            self.storage[name] = name
            self.constants[name] = self.known[name].value
        return self.storage[name]

    def _place(self, view: Node, node: onnx.NodeProto, plan: OpPlan) -> None:
        self.known.update(zip(node.output, plan.outputs, strict=False))
        if plan.alias is not None:
            self.storage[node.output[0]] = self._buffer(node.input[plan.alias])
            return
        self.storage[node.output[0]] = node.output[0]  # launches or not (all-empty Concat)
        for k, launch in enumerate(plan.launches):
            operands = []
            for j, operand in enumerate(launch.operands):
                if isinstance(operand, int):
                    operands.append(self._buffer(node.input[operand]))
                elif isinstance(operand, Result):
                    operands.append(self.storage[node.output[operand.index]])
                else:  # a constant the planner derived: a weight of its own
                    derived = f"{view.name}:const{k}.{j}"
                    self.known[derived] = host_tensor(operand)
                    operands.append(self._buffer(derived))
            out = node.output[launch.output]
            self.storage[out] = out
            program = self.program(launch.kernel, self.order)
            step = Step(view.name, program, tuple(operands), out, launch.values, launch.invocations)
            self.producer[out] = len(self.steps)
            self.steps.append(step)

    def _fuse_scale(self, view: Node, node: onnx.NodeProto, ins: list) -> bool:
        """Fold Mul/Div by a float scalar constant into the MatMul that is its only producer."""
        positions = {"Mul": (0, 1), "Div": (0,)}.get(view.op_type, ())
        for position in positions:
            product, other = node.input[position], ins[1 - position]
            index = self.producer.get(product)
            if (
                index is None
                or not self.steps[index].program.key.startswith("MatMul[")
                or len(self.steps[index].inputs) != 2  # a bias adds after the scale
                or self.uses[product] != 1
                or other.value is None
                or other.value.size != 1
                or other.value.dtype != np.float32
                or other.value.ndim > len(self.known[product].shape)
            ):
                continue
            factor = float(other.value.ravel()[0])
            step = self.steps[index]
            scale = (
                step.values["scale"] * factor
                if view.op_type == "Mul"
                else step.values["scale"] / factor
            )
            out = node.output[0]
            self.steps[index] = dataclasses.replace(
                step,
                node=f"{step.node}+{view.name}",
                output=out,
                values={**step.values, "scale": scale},
            )
            del self.storage[product], self.producer[product]
            self.storage[out], self.producer[out] = out, index
            self.known[out] = self.known[product]
            return True
        return False


def _pinned(
    value_info: onnx.ValueInfoProto, inputs: Mapping[str, np.ndarray], dims: Mapping[str, int]
) -> Tensor:
    """The graph input at the case's static shape: its array's shape, which must agree with the
    declared dims, fixed or symbolic (pinned by ``dims``)."""
    name = value_info.name
    if name not in inputs:
        raise ValueError(f"no value for model input {name!r}")
    tensor_type = value_info.type.tensor_type
    shape = tuple(np.shape(inputs[name]))
    if tensor_type.HasField("shape"):
        declared = [
            d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param)
            for d in tensor_type.shape.dim
        ]
        if len(declared) != len(shape) or any(
            d not in (None, s) for d, s in zip(declared, shape, strict=True)
        ):
            raise ValueError(f"input {name!r} has shape {shape}; the case pins it to {declared}")
    return Tensor(shape, tensor_type.elem_type)


def _topological(nodes: Sequence[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Nodes in an order where every input precedes its use (one pass if already sorted)."""
    ordered, pending, available = [], list(nodes), set(available) | {""}
    while pending:
        rest = []
        for node in pending:
            if all(name in available for name in node.input):
                ordered.append(node)
                available.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):
            missing = sorted({n for node in rest for n in node.input} - available)
            raise ValueError(f"graph inputs never produced: {missing[:5]}")
        pending = rest
    return ordered


def _needed(nodes: list[onnx.NodeProto], outputs: Sequence[str]) -> list[onnx.NodeProto]:
    """Only the nodes some requested output depends on."""
    wanted, kept = set(outputs), []
    for node in reversed(nodes):
        if wanted.intersection(node.output):
            kept.append(node)
            wanted.update(node.input)
    return kept[::-1]


def _foldable(node: onnx.NodeProto, ins: list[Tensor | None]) -> bool:
    if node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
        return True
    return all(t is None or t.value is not None for t in ins)


def _fold(node: onnx.NodeProto, ins: list[Tensor | None], opsets) -> list[np.ndarray] | None:
    """Evaluate a node on the host; None if the reference evaluator cannot (e.g. a contrib op)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Shape":
        shape = ins[0].shape[attrs.get("start", 0) : attrs.get("end")]
        return [np.array(shape, dtype=np.int64)]
    if node.op_type == "GatherElements":
        return [_gather_elements(ins[0].value, ins[1].value, attrs.get("axis", 0))]
    given = [(name, t) for name, t in zip(node.input, ins, strict=True) if name]
    graph = helper.make_graph(
        [node],
        "fold",
        [helper.make_tensor_value_info(name, t.dtype, None) for name, t in given],
        [helper.make_empty_tensor_value_info(name) for name in node.output],
    )
    try:
        evaluator = ReferenceEvaluator(helper.make_model(graph, opset_imports=list(opsets)))
        return [np.asarray(v) for v in evaluator.run(None, {n: t.value for n, t in given})]
    except Exception:  # the node is then planned for the device like any other
        return None


def _gather_elements(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """GatherElements with numpy: onnx.reference's (onnx 1.23) uses numpy.choose, which takes
    at most 63 choices (31 before NumPy 2), and so fails on an exported BERT's token-type
    lookup, one choice per position; onnx/onnx#8444 moves it to take_along_axis, as here."""
    axis = axis + data.ndim if axis < 0 else axis
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    # The non-axis dims of indices may be shorter than data's: the output has indices' shape.
    window = tuple(slice(None) if d == axis else slice(n) for d, n in enumerate(indices.shape))
    return np.take_along_axis(data[window], indices, axis)


def _roles(storage, inputs, outputs, constants) -> dict[str, str]:
    roles = {}
    for name in set(storage.values()):
        if name in inputs:
            roles[name] = "input"
        elif name in outputs:
            roles[name] = "output"
        elif name in constants:
            roles[name] = "weight"
        else:
            roles[name] = "intermediate"
    return roles
