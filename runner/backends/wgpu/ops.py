"""ONNX operator semantics: each op's output shapes and the kernel launches computing it.

A planner sees a node and its input tensors (shape, element type, and the host value of
anything constant) and returns the outputs and the launches, or an alias: Reshape, Flatten,
Squeeze, Unsqueeze, Identity and same-type Casts only relabel a buffer. Anything a planner
cannot do raises ``UnsupportedOp`` naming the op and why; the case then reports
``unsupported-op``. Shape, Constant and any node whose inputs are all constant never get here:
``prepare`` folds them on the host (an exported mask's Range, ConstantOfShape and the
comparisons on them). A launch writes one of the node's outputs (GroupQueryAttention's present
caches, SkipSimplifiedLayerNormalization's sum) and may read one an earlier launch wrote.
Planners are registered by domain: contrib ops under com.microsoft, where onnxruntime has them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto

from runner.backends.wgpu.kernels import Kernel
from runner.backends.wgpu.kernels.attention import attention_kernel, cache_write_kernel
from runner.backends.wgpu.kernels.elementwise import (
    BINARY,
    COMPARE,
    COPY,
    IS_NAN,
    LOGIC,
    UNARY_F32,
    WHERE,
    broadcast_strides,
    cast_expression,
    contiguous_strides,
    map_kernel,
    map_values,
)
from runner.backends.wgpu.kernels.gather import gather_kernel, gather_values
from runner.backends.wgpu.kernels.matmul import matmul_kernel, matmul_values
from runner.backends.wgpu.kernels.quantized import (
    COLUMNS,
    gather_block_quantized_kernel,
    matmul_nbits_kernel,
)
from runner.backends.wgpu.kernels.rows import (
    layer_norm_kernel,
    reduce_kernel,
    rms_norm_kernel,
    softmax_kernel,
)
from runner.backends.wgpu.tensors import (
    DEVICE_TYPES,
    FLOATS,
    DeviceTypeError,
    Tensor,
    UnsupportedOp,
    host_tensor,
)


@dataclass(frozen=True)
class Node:
    name: str
    op_type: str
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    opset: int  # of the default domain

    def attr(self, key: str, default: Any = None) -> Any:
        value = self.attrs.get(key, default)
        return value.decode() if isinstance(value, bytes) else value

    def unsupported(self, reason: str) -> UnsupportedOp:
        return UnsupportedOp(self.op_type, self.name, reason)


@dataclass(frozen=True)
class Result:
    """An operand: the node's own output ``index``, written by an earlier launch."""

    index: int


# An operand: a node input by position, the node's own output, or a constant the planner
# derived (uploaded as a weight).
Operand = int | Result | np.ndarray


@dataclass(frozen=True, eq=False)
class Launch:
    kernel: Kernel
    operands: tuple[Operand, ...]
    values: Mapping[str, object]  # uniform field values
    invocations: int
    output: int = 0  # the node output it writes


@dataclass(frozen=True)
class OpPlan:
    outputs: tuple[Tensor, ...]
    launches: tuple[Launch, ...] = ()
    alias: int | None = None  # output 0 is this input's buffer, relabelled


Planner = Callable[[Node, list], OpPlan]
MICROSOFT = "com.microsoft"
PLANNERS: dict[tuple[str, str], Planner] = {}  # (domain, op type) -> planner; "" is ONNX's


def _op(*names: str, domains: tuple[str, ...] = ("",)) -> Callable[[Planner], Planner]:
    def register(planner: Planner) -> Planner:
        PLANNERS.update({(domain, name): planner for domain in domains for name in names})
        return planner

    return register


def plan_node(node: Node, domain: str, ins: list[Tensor | None]) -> OpPlan:
    key = ("" if domain == "ai.onnx" else domain, node.op_type)
    if key not in PLANNERS:
        raise node.unsupported(f"no WGSL kernel for {domain + '.' if domain else ''}{node.op_type}")
    try:
        return PLANNERS[key](node, ins)
    except DeviceTypeError as error:
        raise node.unsupported(str(error)) from None


def _operand_tensor(ins: list, operand: Operand) -> Tensor:
    return ins[operand] if isinstance(operand, int) else host_tensor(operand)


def _host(node: Node, ins: list, position: int, what: str) -> np.ndarray | None:
    """The constant value of an optional input; unsupported if it is computed on the device."""
    if position >= len(ins) or ins[position] is None:
        return None
    if ins[position].value is None:
        raise node.unsupported(f"{what} must be constant")
    return ins[position].value


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _require_float(node: Node, *tensors: Tensor) -> None:
    if any(t.device_type not in FLOATS for t in tensors):
        raise node.unsupported("only float32 and float16 inputs are implemented")


def _require_f32(node: Node, *tensors: Tensor) -> None:
    if any(t.device_type != "f32" for t in tensors):
        raise node.unsupported("only float32 inputs are implemented")


def _types(ins: list, operands: Sequence[Operand]) -> tuple[str, ...]:
    """The device element type of each operand, as a kernel declares its inputs."""
    return tuple(_operand_tensor(ins, o).device_type for o in operands)


def _require_same_type(node: Node, *tensors: Tensor) -> None:
    if len({t.device_type for t in tensors}) > 1:
        raise node.unsupported("inputs of different element types")


def _elementwise(
    node: Node, ins: list, operands: Sequence[int | np.ndarray], expression: str, dtype: int
) -> OpPlan:
    out, launch = _map(node, ins, operands, expression, dtype)
    return OpPlan((out,), (launch,))


def _map(
    node: Node,
    ins: list,
    operands: Sequence[int | np.ndarray],
    expression: str,
    dtype: int,
    output: int = 0,
) -> tuple[Tensor, Launch]:
    """``expression`` of the operands, broadcast, as a launch writing node output ``output``."""
    tensors = [_operand_tensor(ins, o) for o in operands]
    shape = tuple(np.broadcast_shapes(*(t.shape for t in tensors)))
    rank = len(shape)
    kernel = map_kernel(
        node.op_type, expression, [t.device_type for t in tensors], DEVICE_TYPES[dtype], rank
    )
    values = map_values(
        shape,
        (contiguous_strides(shape), 0),
        [(broadcast_strides(t.shape, rank), 0) for t in tensors],
    )
    out = Tensor(shape, dtype)
    return out, Launch(kernel, tuple(operands), values, out.size, output)


def _copy(
    node: Node,
    x: Tensor,
    shape: Sequence[int],
    source: tuple[Sequence[int], int],
    target: tuple[Sequence[int], int] | None = None,
    operand: int = 0,
) -> Launch:
    """Copy ``x`` (read through ``source`` strides and offset) into an output of ``shape``."""
    kernel = map_kernel(node.op_type, COPY, [x.device_type], x.device_type, len(shape))
    values = map_values(shape, target or (contiguous_strides(shape), 0), [source])
    return Launch(kernel, (operand,), values, int(np.prod(shape, dtype=np.int64)))


def _alias(x: Tensor, shape: Sequence[int], dtype: int | None = None) -> OpPlan:
    return OpPlan((Tensor(tuple(int(d) for d in shape), dtype or x.dtype),), alias=0)


@_op("Sqrt", "Erf", "Tanh", "Relu", "Sigmoid")
def _unary(node: Node, ins: list) -> OpPlan:
    _require_float(node, ins[0])
    return _elementwise(node, ins, [0], UNARY_F32[node.op_type], ins[0].dtype)


@_op("Gelu", domains=("", MICROSOFT))
def _gelu(node: Node, ins: list) -> OpPlan:
    _require_float(node, ins[0])
    expression = UNARY_F32["GeluTanh" if node.attr("approximate") == "tanh" else "Gelu"]
    return _elementwise(node, ins, [0], expression, ins[0].dtype)


@_op("Add", "Sub", "Mul", "Div")
def _arithmetic(node: Node, ins: list) -> OpPlan:
    _require_same_type(node, *ins)
    return _elementwise(node, ins, [0, 1], BINARY[node.op_type], ins[0].dtype)


@_op("Pow")
def _pow(node: Node, ins: list) -> OpPlan:
    base, exponent = ins
    _require_float(node, base)
    operand: Operand = 1
    if exponent.device_type not in FLOATS:
        if exponent.value is None:
            raise node.unsupported("an integer exponent must be constant")
        operand = exponent.value.astype(np.float32)
    return _elementwise(node, ins, [0, operand], BINARY["Pow"], base.dtype)


@_op(*COMPARE)
def _compare(node: Node, ins: list) -> OpPlan:
    _require_same_type(node, *ins)
    return _elementwise(node, ins, [0, 1], COMPARE[node.op_type], TensorProto.BOOL)


@_op(*LOGIC)
def _logic(node: Node, ins: list) -> OpPlan:
    operands = list(range(len(ins)))
    return _elementwise(node, ins, operands, LOGIC[node.op_type], TensorProto.BOOL)


@_op("IsNaN")
def _is_nan(node: Node, ins: list) -> OpPlan:
    _require_float(node, ins[0])
    return _elementwise(node, ins, [0], IS_NAN, TensorProto.BOOL)


@_op("Where")
def _where(node: Node, ins: list) -> OpPlan:
    _require_same_type(node, ins[1], ins[2])
    return _elementwise(node, ins, [0, 1, 2], WHERE, ins[1].dtype)


@_op("Cast")
def _cast(node: Node, ins: list) -> OpPlan:
    x, to = ins[0], int(node.attr("to"))
    target = Tensor((), to).device_type
    to_bool = to == TensorProto.BOOL and x.dtype != TensorProto.BOOL
    if x.device_type == target and not to_bool:
        return _alias(x, x.shape, to)
    return _elementwise(node, ins, [0], cast_expression(x.device_type, target, to_bool), to)


@_op("Identity")
def _identity(node: Node, ins: list) -> OpPlan:
    return _alias(ins[0], ins[0].shape)


@_op("Reshape")
def _reshape(node: Node, ins: list) -> OpPlan:
    x, target = ins[0], [int(d) for d in _host(node, ins, 1, "the target shape")]
    if not node.attr("allowzero", 0):
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
        target[target.index(-1)] = x.size // known if known else 0
    if int(np.prod(target, dtype=np.int64)) != x.size:
        raise ValueError(f"{node.name}: cannot reshape {x.shape} to {target}")
    return _alias(x, target)


@_op("Flatten")
def _flatten(node: Node, ins: list) -> OpPlan:
    x = ins[0]
    axis = _axis(int(node.attr("axis", 1)), len(x.shape))
    outer, inner = (int(np.prod(part, dtype=np.int64)) for part in (x.shape[:axis], x.shape[axis:]))
    return _alias(x, (outer, inner))


@_op("Range", "ConstantOfShape")
def _shaped_by_values(node: Node, ins: list) -> OpPlan:
    """Both are folded on the host when their inputs are constant, as an exporter's shape
    arithmetic is once the case pins the shapes; otherwise their output's shape would depend on
    values only the device knows."""
    raise node.unsupported("a data-dependent output shape: its inputs must be constant")


def _axes(node: Node, ins: list, opset_with_input: int) -> list[int] | None:
    if node.opset < opset_with_input:
        axes = node.attr("axes")
        return None if axes is None else list(axes)
    value = _host(node, ins, 1, "axes")
    return None if value is None else [int(a) for a in value.ravel()]


@_op("Unsqueeze")
def _unsqueeze(node: Node, ins: list) -> OpPlan:
    x, axes = ins[0], _axes(node, ins, 13) or []
    rank = len(x.shape) + len(axes)
    shape = list(x.shape)
    for axis in sorted(_axis(a, rank) for a in axes):
        shape.insert(axis, 1)
    return _alias(x, shape)


@_op("Squeeze")
def _squeeze(node: Node, ins: list) -> OpPlan:
    x, axes = ins[0], _axes(node, ins, 13)
    drop = (
        {_axis(a, len(x.shape)) for a in axes}
        if axes
        else {i for i, d in enumerate(x.shape) if d == 1}
    )
    return _alias(x, [d for i, d in enumerate(x.shape) if i not in drop])


@_op("Transpose")
def _transpose(node: Node, ins: list) -> OpPlan:
    x = ins[0]
    perm = node.attr("perm") or list(reversed(range(len(x.shape))))
    shape = tuple(x.shape[p] for p in perm)
    source = contiguous_strides(x.shape)
    launch = _copy(node, x, shape, ([source[p] for p in perm], 0))
    return OpPlan((Tensor(shape, x.dtype),), (launch,))


@_op("Expand")
def _expand(node: Node, ins: list) -> OpPlan:
    x, target = ins[0], _host(node, ins, 1, "the target shape")
    shape = tuple(np.broadcast_shapes(x.shape, tuple(int(d) for d in target)))
    launch = _copy(node, x, shape, (broadcast_strides(x.shape, len(shape)), 0))
    return OpPlan((Tensor(shape, x.dtype),), (launch,))


@_op("Slice")
def _slice(node: Node, ins: list) -> OpPlan:
    x = ins[0]
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
    else:
        starts = _host(node, ins, 1, "starts")
        ends = _host(node, ins, 2, "ends")
        axes, steps = _host(node, ins, 3, "axes"), _host(node, ins, 4, "steps")
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    shape, source = list(x.shape), contiguous_strides(x.shape)
    strides, offset = list(source), 0
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = _axis(int(axis), len(shape))
        first, stop, step = slice(int(start), int(end), int(step)).indices(x.shape[axis])
        shape[axis] = len(range(first, stop, step))
        offset += first * source[axis]
        strides[axis] = source[axis] * step
    launch = _copy(node, x, shape, (strides, offset))
    return OpPlan((Tensor(tuple(shape), x.dtype),), (launch,))


@_op("Concat")
def _concat(node: Node, ins: list) -> OpPlan:
    """As onnxruntime does it (its ConcatBase): the first non-empty input gives the other dims;
    every input of its rank adds its dim along the axis, an empty one too, but only non-empty
    inputs are copied, one after another from the start, so that what empty inputs add stays
    at the end (zeros). A zero-sized input of another rank is left out, as onnxruntime-web's
    op tests expect ("Concat zero-sized preserving dims")."""
    _require_same_type(node, *ins)
    reference = next((t for t in ins if t.size), ins[0])
    rank = len(reference.shape)
    axis = _axis(int(node.attr("axis")), rank)
    shape = list(reference.shape)
    shape[axis] = sum(t.shape[axis] for t in ins if len(t.shape) == rank)
    target = contiguous_strides(shape)
    launches, start = [], 0
    for operand, part in enumerate(ins):
        if part.size:
            offset = start * target[axis]
            source = (contiguous_strides(part.shape), 0)
            launches.append(_copy(node, part, part.shape, source, (target, offset), operand))
            start += part.shape[axis]
    return OpPlan((Tensor(tuple(shape), reference.dtype),), tuple(launches))


@_op("Gather")
def _gather(node: Node, ins: list) -> OpPlan:
    data, indices = ins
    if indices.device_type != "i32":
        raise node.unsupported("indices must be integers")
    axis = _axis(int(node.attr("axis", 0)), len(data.shape))
    shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
    out = Tensor(shape, data.dtype)
    inner = int(np.prod(data.shape[axis + 1 :], dtype=np.int64))
    values = gather_values(out.size, indices.size, inner, data.shape[axis])
    launch = Launch(gather_kernel(data.device_type), (0, 1), values, out.size)
    return OpPlan((out,), (launch,))


@_op("MatMul")
def _matmul(node: Node, ins: list) -> OpPlan:
    a, b = ins
    _require_float(node, a, b)
    a_shape = (1, *a.shape) if len(a.shape) == 1 else a.shape
    b_shape = (*b.shape, 1) if len(b.shape) == 1 else b.shape
    (m, k), (k_b, n) = a_shape[-2:], b_shape[-2:]
    if k != k_b:
        raise ValueError(f"{node.name}: MatMul of {a.shape} and {b.shape}")
    batch = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    rank = len(batch) + 2
    a_batch = broadcast_strides(a_shape, rank)[:-2]
    b_batch = broadcast_strides(b_shape, rank)[:-2]
    values = matmul_values(batch, a_batch, b_batch, m, n, k, (k, 1), (n, 1))
    shape = batch + (() if len(a.shape) == 1 else (m,)) + (() if len(b.shape) == 1 else (n,))
    out = Tensor(shape, a.dtype)
    kernel = matmul_kernel(len(batch), _types(ins, (0, 1)), out.device_type)
    launch = Launch(kernel, (0, 1), values, out.size)
    return OpPlan((out,), (launch,))


@_op("Gemm")
def _gemm(node: Node, ins: list) -> OpPlan:
    a, b = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    _require_float(node, *(t for t in (a, b, bias) if t is not None))
    trans_a, trans_b = node.attr("transA", 0), node.attr("transB", 0)
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = b.shape[0] if trans_b else b.shape[1]
    a_strides = (1, m) if trans_a else (k, 1)
    b_strides = (1, k) if trans_b else (n, 1)
    operands: list[Operand] = [0, 1]
    c_strides = (0, 0)
    if bias is not None:
        beta = float(node.attr("beta", 1.0))
        if beta != 1.0 and bias.value is None:
            raise node.unsupported("beta != 1 with a computed C")
        operands.append(2 if beta == 1.0 else (bias.value * beta).astype(np.float32))
        c_strides = tuple(broadcast_strides(bias.shape, 2))
    scale = float(node.attr("alpha", 1.0))
    values = matmul_values((), [], [], m, n, k, a_strides, b_strides, c_strides, scale)
    out = Tensor((m, n), a.dtype)
    kernel = matmul_kernel(0, _types(ins, operands), out.device_type)
    return OpPlan((out,), (Launch(kernel, tuple(operands), values, out.size),))


def _rows(shape: Sequence[int], axis: int) -> tuple[int, int]:
    cols = int(np.prod(shape[axis:], dtype=np.int64))
    return int(np.prod(shape, dtype=np.int64)) // max(cols, 1), cols


@_op("Softmax")
def _softmax(node: Node, ins: list) -> OpPlan:
    x = ins[0]
    _require_float(node, x)
    if node.opset < 13:  # the axes from `axis` on, flattened: one row
        rows, cols = _rows(x.shape, _axis(int(node.attr("axis", 1)), len(x.shape)))
        inner = 1
    else:
        axis = _axis(int(node.attr("axis", -1)), len(x.shape))
        cols = x.shape[axis]
        inner = int(np.prod(x.shape[axis + 1 :], dtype=np.int64))
        rows = int(np.prod(x.shape, dtype=np.int64)) // max(cols, 1)
    values = {"rows": rows, "cols": cols, "inner": inner}
    kernel = softmax_kernel(x.device_type)
    return OpPlan((Tensor(x.shape, x.dtype),), (Launch(kernel, (0,), values, rows),))


@_op("LayerNormalization")
def _layer_norm(node: Node, ins: list) -> OpPlan:
    x = ins[0]
    _require_float(node, *(t for t in ins if t is not None))
    if any(node.outputs[1:]):
        raise node.unsupported("the Mean and InvStdDev outputs are not implemented")
    axis = _axis(int(node.attr("axis", -1)), len(x.shape))
    rows, cols = _rows(x.shape, axis)
    operands: list[Operand] = []
    for position in (1, 2):
        if position < len(ins) and ins[position] is not None:
            operands.append(_per_column(node, ins[position], x.shape[axis:], position))
    values = {"rows": rows, "cols": cols, "eps": float(node.attr("epsilon", 1e-5))}
    kernel = layer_norm_kernel(_types(ins, (0, *operands)), x.device_type)
    launch = Launch(kernel, (0, *operands), values, rows)
    return OpPlan((Tensor(x.shape, x.dtype),), (launch,))


def _per_column(node: Node, t: Tensor, normalized: Sequence[int], position: int) -> Operand:
    """Scale or bias as one value per normalized element, or a skip as one per element
    (constants broadcast on the host)."""
    if tuple(t.shape) == tuple(normalized):
        return position
    if t.value is None:
        raise node.unsupported("a computed scale or bias must have the normalized shape")
    return np.broadcast_to(t.value, tuple(normalized)).astype(np.float32)


# Reduction -> the opset from which its axes come as an input rather than an attribute.
_AXES_INPUT_SINCE = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18}


@_op(*_AXES_INPUT_SINCE)
def _reduce(node: Node, ins: list) -> OpPlan:
    x = ins[0]
    if node.op_type == "ReduceMean":
        _require_float(node, x)
    rank, axes = len(x.shape), _axes(node, ins, _AXES_INPUT_SINCE[node.op_type])
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return _alias(x, x.shape)
        axes = list(range(rank))
    axes = sorted(_axis(a, rank) for a in axes)
    if axes != list(range(rank - len(axes), rank)):
        raise node.unsupported("only reductions over trailing axes are implemented")
    rows, cols = _rows(x.shape, axes[0])
    keep = node.attr("keepdims", 1)
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    launch = Launch(
        reduce_kernel(node.op_type, x.device_type), (0,), {"rows": rows, "cols": cols}, rows
    )
    return OpPlan((Tensor(shape, x.dtype),), (launch,))


@_op("SimplifiedLayerNormalization")
def _simplified_layer_norm(node: Node, ins: list) -> OpPlan:
    """onnxruntime's RMS norm (registered in the ONNX domain): x / sqrt(mean(x^2) + eps) * scale
    over the axes from ``axis`` on."""
    x = ins[0]
    _require_float(node, x, ins[1])
    if any(node.outputs[1:]):
        raise node.unsupported("the inv_std_var output is not implemented")
    axis = _axis(int(node.attr("axis", -1)), len(x.shape))
    rows, cols = _rows(x.shape, axis)
    gamma = _per_column(node, ins[1], x.shape[axis:], 1)
    values = {"rows": rows, "cols": cols, "eps": float(node.attr("epsilon", 1e-5))}
    kernel = rms_norm_kernel(False, _types(ins, (0, gamma)), x.device_type)
    launch = Launch(kernel, (0, gamma), values, rows)
    return OpPlan((Tensor(x.shape, x.dtype),), (launch,))


@_op("SkipSimplifiedLayerNormalization", domains=(MICROSOFT,))
def _skip_simplified_layer_norm(node: Node, ins: list) -> OpPlan:
    """The RMS norm of input + skip (+ bias) over the last axis (output 0), and that sum
    (output 3, what the next layer adds to)."""
    x, skip = ins[0], ins[1]
    bias = ins[3] if len(ins) > 3 else None
    _require_float(node, *(t for t in ins if t is not None))
    if tuple(skip.shape) != tuple(x.shape) and skip.value is None:
        raise node.unsupported(f"a computed skip of shape {skip.shape} for an input of {x.shape}")
    outputs = (*node.outputs, "", "", "")[:4]
    if outputs[1] or outputs[2]:
        raise node.unsupported("the mean and inv_std_var outputs are not implemented")
    rows, cols = _rows(x.shape, len(x.shape) - 1)
    skipped = _per_column(node, skip, x.shape, 1)  # a constant one broadcast on the host
    per_column = [_per_column(node, ins[p], x.shape[-1:], p) for p in (2, 3)[: 1 + bool(bias)]]
    values = {"rows": rows, "cols": cols, "eps": float(node.attr("epsilon", 1e-5))}
    kernel = rms_norm_kernel(True, _types(ins, (0, skipped, *per_column)), x.device_type)
    launches = [Launch(kernel, (0, skipped, *per_column), values, rows)]
    out = Tensor(x.shape, x.dtype)
    if outputs[3]:
        addends = [0, 1, *([3] if bias is not None else [])]
        expression = " + ".join("abc"[: len(addends)])
        launches.append(_map(node, ins, addends, expression, x.dtype, output=3)[1])
    return OpPlan((out, out, out, out)[: len(node.outputs)], tuple(launches))


@_op("GroupQueryAttention", domains=(MICROSOFT,))
def _group_query_attention(node: Node, ins: list) -> OpPlan:
    """As onnxruntime's CPU kernel, in its shared-buffer form: past and present caches of one
    max length, present = past with the step's keys and values written at their positions."""
    query, key, value, past_key, past_value, seqlens_k, total = (*ins, *[None] * 7)[:7]
    cos, sin = (*ins[7:9], None, None)[:2]
    if any(t is not None for t in ins[9:]):
        raise node.unsupported("position_ids, attention_bias and head_sink are not implemented")
    if past_key is None or past_value is None or len(node.outputs) < 3 or not all(node.outputs):
        raise node.unsupported("only the form with past and present key/value is implemented")
    for attribute, default in (("local_window_size", -1), ("softcap", 0.0), ("smooth_softmax", 0)):
        if node.attr(attribute, default) != default:
            raise node.unsupported(f"{attribute}={node.attr(attribute)} is not implemented")
    _require_f32(node, *(t for t in (query, key, value, past_key, past_value) if t is not None))
    heads, kv_heads = int(node.attr("num_heads")), int(node.attr("kv_num_heads"))
    batch, seq, row = query.shape
    packed = key is None
    head_dim = row // (heads + 2 * kv_heads) if packed else row // heads
    length = past_key.shape[2]
    rotary = bool(node.attr("do_rotary", 0))
    if rotary and (cos is None or sin is None):
        raise node.unsupported("do_rotary needs cos_cache and sin_cache")
    geometry = [kv_heads, length]
    sources = (  # (operand, row stride, offset) of Q, K, V
        [(0, row, 0), (0, row, heads * head_dim), (0, row, (heads + kv_heads) * head_dim)]
        if packed
        else [(0, row, 0), (1, key.shape[2], 0), (2, value.shape[2], 0)]
    )
    rotation = [cos.shape[1] if rotary else 0, int(node.attr("rotary_interleaved", 0)), 0, 0]
    caches = (7, 8) if rotary else ()
    present = Tensor((batch, kv_heads, length, head_dim), past_key.dtype)
    launches = []
    for output, (source, stride, offset), past in ((1, sources[1], 3), (2, sources[2], 4)):
        rotates = rotary and output == 1
        values = {
            "size": present.size,
            "head_dim": head_dim,
            "seq": seq,
            "strides": [*geometry, stride, offset, *(rotation if rotates else [0] * 4)],
        }
        operands = (source, *(caches if rotates else ()), 5, 6, past)
        kernel = cache_write_kernel(rotates)
        launches.append(Launch(kernel, operands, values, present.size, output))
    scale = float(node.attr("scale", 0.0)) or 1.0 / float(np.sqrt(head_dim))
    rows = batch * seq * heads
    values = {
        "rows": rows,
        "heads": heads,
        "head_dim": head_dim,
        "seq": seq,
        "scale": scale,
        "strides": [*geometry, *sources[0][1:], *rotation],
    }
    operands = (0, *caches, 5, 6, Result(1), Result(2))
    launches.append(Launch(attention_kernel(rotary), operands, values, rows))
    output = Tensor((batch, seq, heads * head_dim), query.dtype)
    return OpPlan((output, present, present), tuple(launches))


@_op("MatMulNBits", domains=(MICROSOFT,))
def _matmul_nbits(node: Node, ins: list) -> OpPlan:
    a, weights, scales = ins[0], ins[1], ins[2]
    zero_points = ins[3] if len(ins) > 3 else None
    bias = ins[5] if len(ins) > 5 else None
    if len(ins) > 4 and ins[4] is not None:
        raise node.unsupported("g_idx is not implemented")
    _require_f32(node, a)
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size"))
    depth, columns = int(node.attr("K")), int(node.attr("N"))
    if bits not in (2, 4, 8):
        raise node.unsupported(f"bits={bits}: only 2, 4 and 8 are implemented")
    if block < 16 or block & (block - 1):
        raise node.unsupported(f"block_size={block}: expected a power of 2 of at least 16")
    if weights.value is None or scales.value is None:
        raise node.unsupported("B and scales must be constant")
    blocks = -(-depth // block)
    operands: list[Operand] = [
        0,
        _words(weights.value),
        scales.value.astype(np.float32).reshape(-1),
        _zero_points(node, zero_points, columns * blocks, bits),
    ]
    if bias is not None:
        operands.append(5)
    rows = a.size // depth
    out = Tensor((*a.shape[:-1], columns), TensorProto.FLOAT)
    invocations = rows * -(-columns // COLUMNS)
    values = {
        "size": invocations,
        "rows": rows,
        "cols": columns,
        "strides": [depth, blocks, block, bits],
    }
    launch = Launch(matmul_nbits_kernel(bias is not None), tuple(operands), values, invocations)
    return OpPlan((out,), (launch,))


@_op("GatherBlockQuantized", domains=(MICROSOFT,))
def _gather_block_quantized(node: Node, ins: list) -> OpPlan:
    """Rows of a constant table quantized in blocks along its last axis (uint8 holding
    ``bits``-bit values, low bits first, as MatMulNBits' B), gathered along axis 0 (a 4-bit
    embedding shared with the logits' MatMulNBits, as genai's builder writes it)."""
    data, indices, scales = ins[0], ins[1], ins[2]
    zero_points = ins[3] if len(ins) > 3 else None
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 128))
    _require_f32(node, scales)
    if int(node.attr("gather_axis", 0)) != 0 or data.value is None or scales.value is None:
        raise node.unsupported("only a constant table gathered along axis 0 is implemented")
    if data.value.dtype != np.uint8 or bits not in (2, 4, 8) or indices.device_type != "i32":
        raise node.unsupported(f"only uint8 tables of 2, 4 or 8 bits ({bits}) are implemented")
    if _axis(int(node.attr("quantize_axis", 1)), len(data.shape)) != len(data.shape) - 1:
        raise node.unsupported("only a table quantized along its last axis is implemented")
    rows, columns = data.shape[0], data.value[0].size * 8 // bits
    blocks = -(-columns // block)
    out = Tensor((*indices.shape, columns), TensorProto.FLOAT)
    operands = (
        1,
        _words(data.value),
        scales.value.astype(np.float32).reshape(-1),
        _zero_points(node, zero_points, rows * blocks, bits),
    )
    values = {"size": out.size, "rows": rows, "strides": [columns, blocks, block, bits]}
    launch = Launch(gather_block_quantized_kernel(), operands, values, out.size)
    return OpPlan((out,), (launch,))


def _words(packed: np.ndarray) -> np.ndarray:
    """Packed bytes as i32 words (WGSL has no 8-bit type), little end first, zero-padded."""
    flat = np.frombuffer(packed.astype(np.uint8).tobytes(), np.uint8)
    words = np.zeros(-(-flat.size // 4) * 4, np.uint8)
    words[: flat.size] = flat
    return words.view("<i4").astype(np.int32)


def _zero_points(node: Node, zero_points: Tensor | None, groups: int, bits: int) -> np.ndarray:
    """One f32 zero point per (column, block): 2^(bits-1) when absent, else unpacked from the
    uint8 input ([N, ceil(blocks * bits / 8)], low bits first) or taken from a float one."""
    if zero_points is None:
        return np.full(groups, 2.0 ** (bits - 1), np.float32)
    if zero_points.value is None:
        raise node.unsupported("zero_points must be constant")
    value = zero_points.value
    if value.dtype != np.uint8:
        return value.astype(np.float32).reshape(-1)
    columns = value.shape[0]
    per_column = groups // columns
    levels = np.unpackbits(value.reshape(columns, -1, 1), axis=2, bitorder="little")
    levels = levels.reshape(columns, -1, bits)[:, :per_column]
    return (levels * (1 << np.arange(bits))).sum(axis=2).astype(np.float32).reshape(-1)
