"""Models explore draws itself: small ONNX graphs from an op vocabulary, by Hypothesis strategies.

A drawn model is valid by construction (each op builder picks operands whose shapes and types it
takes, and computes what it makes; ``onnx.checker`` with full shape inference confirms it), and
puts pressure on purpose on what a WebGPU EP keys its caches by:

- key pressure: a later node takes, as often as not, an op the graph already has, with its
  attributes and operands drawn again, so twins of one op that differ only in an attribute
  (Gelu's ``approximate``, Cast's ``to``, a reduction's ``keepdims``), an operand's rank or a
  broadcast share one graph, one session and one device's program cache;
- layout pressure (the seed's class): a model with a LayerNormalization may come with a second
  layout of other epsilon, the same shapes and another constant, which the case matrix runs
  back to back under capture on one device (``runner.workload.variants``).

A drawn model is written as a suite of its own (``GeneratedSuite``): the model file, its layouts,
the one target and the tolerance its ops and sizes call for (``tolerance``). Its cases are
judged exactly as a suite's are (``runner.step``).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from hypothesis import reject
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from runner.measure import Tolerance

OPSET = 20  # Gelu's; ReduceMean and ReduceMax take axes as an input, LayerNormalization exists
# The opsets a drawn model may import, the first what shrinking goes to: 18 is the last before
# AveragePool's and Pad's 19, and an op's kernel may differ by opset (the C++ EP registered
# AveragePool up to 18 only until 1.29.0: 19 and later ran on the CPU); no Gelu before 20
OPSETS = (OPSET, 18)
# How far an element-wise op's graph input may be scaled first (``_unary``): past 88, exp
# overflows float32 (JSEP's Tanh gave NaN there, #19201); past 256, a square overflows float16
# (an unfused float16 LayerNorm's, #31626). Never a computed value: it would scale up what a
# GPU's Erf or Tanh may be off by (an Erf near 0 times 300: 0.5 off in float16 on
# onnxruntime-webgpu 1.27.0, a false positive)
MAGNITUDES = (1.0, 300.0)
IR_VERSION = 9  # what onnxruntime 1.16 and later read
MICROSOFT = "com.microsoft"  # the contrib ops' domain (transformer exports' fused ops)
MAX_NODES = 6
MAX_INPUTS = 3
DIMS = st.integers(1, 6)  # small: a dispatch's size still changes with them
# A graph input may have one wide dim, one below, on or one above a size where kernels change
# path: vector width 4, subgroups and workgroups (32, 64), tiles and channel blocks (128, 256),
# float16's last exact integer (2048), within ELEMENTS elements so that a model stays cheap
BOUNDARIES = tuple(b + d for b in (4, 8, 16, 32, 64, 128, 256, 2048) for d in (-1, 0, 1))
ELEMENTS = 4096
SIZE_BUCKETS = (6, 64, 256, ELEMENTS)  # what coverage counts a model's widest input dim in
FLOAT16_ABS = 2.0**-7  # a float16 model's tolerance, absolute and relative (``tolerance``)
# the fewest elements a normalization is drawn over (``_Graph.normalizes``), per float type
NORM_EXTENT = {TensorProto.FLOAT: 3, TensorProto.FLOAT16: 8}
EPSILONS = (1e-5, 1e-3, 0.1)  # LayerNormalization's, and the second layout's

FLOAT, FLOAT16, INT32, BOOL = (
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.BOOL
)  # fmt: skip
# The float type a model's float tensors take, by the name `--dtypes` spells it: the first is
# what shrinking goes towards
DTYPES = {"float32": FLOAT, "float16": FLOAT16}


@dataclass(frozen=True)
class Value:
    name: str
    dtype: int
    shape: tuple[int, ...]


class _Graph:
    """A graph while it is drawn: its values, nodes and constants (mutable: one draw only)."""

    def __init__(self, dtype: int = FLOAT, opset: int = OPSET) -> None:
        self.float = dtype  # every float tensor's element type
        self.opset = opset
        self.inputs: list[Value] = []
        self.values: list[Value] = []
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []
        self.consumed: set[str] = set()
        self.reduction = 1  # the longest sum or row any node reduces over (the tolerance's)
        self.omitted = 0  # attributes left to their defaults

    def operand(
        self, draw, dtype: int | None = None, min_rank: int = 1, max_rank: int = 4
    ) -> Value:
        """An existing value of `dtype` (the graph's float type by default) and rank, or a new
        graph input (while there is room), maybe with one wide dim."""
        dtype = self.float if dtype is None else dtype
        fits = [v for v in self.values if v.dtype == dtype and min_rank <= len(v.shape) <= max_rank]
        room = len(self.inputs) < MAX_INPUTS
        if fits and (not room or draw(st.booleans(), label="existing")):
            return draw(st.sampled_from(fits), label="operand")
        if not room:
            raise _NotHere
        rank = draw(st.integers(min_rank, max_rank), label="rank")
        shape = [draw(DIMS, label="dim") for _ in range(rank)]
        if draw(st.integers(0, 3), label="wide") == 3:  # shrinks to narrow
            axis = draw(st.integers(0, rank - 1), label="wide axis")
            rest = math.prod(shape) // shape[axis]
            shape[axis] = draw(
                st.sampled_from([b for b in BOUNDARIES if b * rest <= ELEMENTS]), label="width"
            )
        return self.input(dtype, tuple(shape))

    def input(self, dtype: int, shape: tuple[int, ...]) -> Value:
        """A new graph input; _NotHere when there is no room for one."""
        if len(self.inputs) >= MAX_INPUTS:
            raise _NotHere
        value = Value(f"x{len(self.inputs)}", dtype, shape)
        self.inputs.append(value)
        self.values.append(value)
        return value

    def weights(self, draw, shape: tuple[int, ...], dtype: int | None = None) -> str:
        """A constant of `dtype` (the graph's float type by default), uniform in [-1, 1]; bool:
        where that is positive."""
        seed = draw(st.integers(0, 2**16), label="seed")
        values = np.random.default_rng(seed).uniform(-1.0, 1.0, shape)
        if dtype == BOOL:
            return self.constant(values > 0)
        return self.constant(values.astype(helper.tensor_dtype_to_np_dtype(dtype or self.float)))

    def scalar(self, value: float) -> str:
        return self.constant(np.array(value, helper.tensor_dtype_to_np_dtype(self.float)))

    def constant(self, array: np.ndarray) -> str:
        name = f"c{len(self.constants)}"
        self.constants.append(numpy_helper.from_array(array, name))
        return name

    def normalizes(self, extent: int) -> None:
        """A normalization over `extent` elements, its reduction counted; _NotHere over fewer
        than NORM_EXTENT. Over fewer, values that nearly agree leave x - mean a few bits, which
        a kernel that computes the variance as E[x^2] - E[x]^2 loses, while the exact output
        hardly moves: no move of the inputs shows it, so the oracle's conditioning slack cannot
        cover it (measured: LayerNormalization over rows of 2 1.77e-4 off on onnxruntime-web
        1.30.0's webgpu build at 64 ulps of slack, twice in 60 minutes; a 1-element float16
        InstanceNormalization 30 ulps off on onnxruntime-webgpu 1.27.0, a float16 decomposed
        LayerNorm over 2 values 0.026 off on wgpu)."""
        if extent < NORM_EXTENT[self.float]:
            raise _NotHere
        self.reduction = max(self.reduction, extent)

    def spelled(self, draw, attributes: dict[str, Any], defaults: dict[str, Any]) -> dict:
        """`attributes`, those equal to their default left out when the draw says so (shrinking
        writes them): a kernel must read a default it is not told."""
        if not draw(st.booleans(), label="defaults omitted"):
            return attributes
        kept = {k: v for k, v in attributes.items() if k not in defaults or defaults[k] != v}
        self.omitted += len(attributes) - len(kept)
        return kept

    def add(self, op: str, inputs: list[str], dtype: int, shape, **attributes) -> Value:
        """A node making one value; _NotHere when it would hold over 4 * ELEMENTS elements."""
        if math.prod(shape) > 4 * ELEMENTS:
            raise _NotHere
        value = Value(f"t{len(self.nodes)}", dtype, tuple(int(d) for d in shape))
        self.nodes.append(
            helper.make_node(op, inputs, [value.name], name=f"n{len(self.nodes)}", **attributes)
        )
        self.consumed.update(inputs)
        self.values.append(value)
        return value


class _NotHere(Exception):
    """The op cannot be built on this graph (no operand fits, no room for a new input)."""


def _unary(op: str, **drawn: tuple[Any, ...]) -> Callable:
    """An element-wise op, its operand (a graph input) maybe scaled to a large magnitude first;
    `drawn` attributes take one of their values, the first the default."""

    def build(draw, g: _Graph) -> None:
        x = g.operand(draw)
        magnitude = draw(st.sampled_from(MAGNITUDES), label="magnitude")
        if magnitude != 1.0 and x in g.inputs:
            x = g.add("Mul", [x.name, g.scalar(magnitude)], g.float, x.shape)
        attributes = {name: draw(st.sampled_from(v), label=name) for name, v in drawn.items()}
        defaults = {name: values[0] for name, values in drawn.items()}
        g.add(op, [x.name], g.float, x.shape, **g.spelled(draw, attributes, defaults))

    return build


def _clip(draw, g: _Graph) -> None:
    x = g.operand(draw)
    bounds = draw(st.sampled_from(((), (-0.5,), (-0.5, 0.5), ("", 0.5))), label="bounds")
    inputs = [x.name, *(b if b == "" else g.scalar(b) for b in bounds)]  # "": min omitted
    g.add("Clip", inputs, g.float, x.shape)


def _broadcasting(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with `shape`: its trailing dims or fewer, with ones where `shape`
    has more, or more where `shape` has ones."""
    keep = draw(st.integers(0, len(shape)), label="broadcast rank")
    tail = shape[len(shape) - keep :]
    both = 1 in tail and draw(st.booleans(), label="both broadcast")
    return tuple(
        draw(DIMS, label="dim")
        if both and d == 1
        else (1 if draw(st.booleans(), label="broadcast") else d)
        for d in tail
    )


def _binary(op: str, dtype: int | None = None) -> Callable:
    """An op of two operands that broadcast (``_broadcasting``), either going first."""

    def build(draw, g: _Graph) -> None:
        kind = g.float if dtype is None else dtype
        a = g.operand(draw, kind)
        shape = _broadcasting(draw, a.shape)
        same = [v for v in g.values if v.dtype == kind and v.shape == shape]
        if same and draw(st.booleans(), label="existing"):
            b = draw(st.sampled_from(same), label="operand").name
        else:
            b = g.weights(draw, shape, kind)
        inputs = [b, a.name] if draw(st.booleans(), label="swapped") else [a.name, b]
        g.add(op, inputs, kind, np.broadcast_shapes(a.shape, shape))

    return build


def _gelu(draw, g: _Graph) -> None:
    if g.opset < 20:
        raise _NotHere
    x = g.operand(draw)
    approximate = draw(st.sampled_from(("none", "tanh")), label="approximate")
    attributes = g.spelled(draw, {"approximate": approximate}, {"approximate": "none"})
    g.add("Gelu", [x.name], g.float, x.shape, **attributes)


def _fast_gelu(draw, g: _Graph) -> None:
    """FastGelu (a transformer export's fused tanh Gelu), its bias over the last dim optional."""
    x = g.operand(draw)
    inputs = [x.name]
    if draw(st.booleans(), label="bias"):
        inputs.append(g.weights(draw, x.shape[-1:]))
    g.add("FastGelu", inputs, g.float, x.shape, domain=MICROSOFT)


def _quick_gelu(draw, g: _Graph) -> None:
    """QuickGelu, x * sigmoid(alpha * x) (CLIP's activation), alpha 1.702 by default."""
    x = g.operand(draw)
    alpha = draw(st.sampled_from((1.702, 1.0)), label="alpha")
    attributes = g.spelled(draw, {"alpha": alpha}, {"alpha": 1.702})
    g.add("QuickGelu", [x.name], g.float, x.shape, domain=MICROSOFT, **attributes)


def _cast(draw, g: _Graph) -> None:
    x = g.operand(draw)
    if g.float == FLOAT16 and x not in g.inputs:
        # truncation is a step: a computed float16 value one ulp apart (a Sigmoid's, as GPUs
        # and onnxruntime CPU round it) truncates to another integer, not a bug
        raise _NotHere
    to = draw(st.sampled_from((INT32, BOOL)), label="to")
    # scaled first, so that truncation to an integer keeps something of each element
    scaled = g.add("Mul", [x.name, g.scalar(4.0)], g.float, x.shape)
    g.add("Cast", [scaled.name], to, x.shape, to=to)


def _softmax(draw, g: _Graph) -> None:
    x = g.operand(draw)
    rank = len(x.shape)
    # the last axis, spelled two ways, or another (JSEP took the last only, #22231)
    axis = draw(st.sampled_from((-1, rank - 1, *range(rank - 1))), label="axis")
    g.reduction = max(g.reduction, x.shape[axis])
    g.add("Softmax", [x.name], g.float, x.shape, **g.spelled(draw, {"axis": axis}, {"axis": -1}))


def _transpose(draw, g: _Graph) -> None:
    x = g.operand(draw)  # rank 1 too: JSEP got it wrong, #22997
    perm = draw(st.permutations(range(len(x.shape))), label="perm")
    g.add("Transpose", [x.name], g.float, [x.shape[p] for p in perm], perm=list(perm))


def _reduce(op: str) -> Callable:
    def build(draw, g: _Graph) -> None:
        x = g.operand(draw)
        count = draw(st.integers(1, len(x.shape)), label="axes")  # trailing axes
        axes = list(range(len(x.shape) - count, len(x.shape)))
        keep = draw(st.sampled_from((1, 0)), label="keepdims")
        shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
        g.reduction = max(g.reduction, math.prod(x.shape[a] for a in axes))
        axes_input = g.constant(np.array(axes, np.int64))
        attributes = g.spelled(draw, {"keepdims": keep}, {"keepdims": 1})
        g.add(op, [x.name, axes_input], g.float, shape, **attributes)

    return build


def _matmul(draw, g: _Graph) -> None:
    a = g.operand(draw, min_rank=2)
    k, n = a.shape[-1], draw(DIMS, label="n")
    b = g.weights(draw, (k, n))
    g.reduction = max(g.reduction, k)
    g.add("MatMul", [a.name, b], g.float, (*a.shape[:-1], n))


def _gemm(draw, g: _Graph) -> None:
    a = g.operand(draw, min_rank=2, max_rank=2)
    trans_a = draw(st.sampled_from((0, 1)), label="transA")
    trans_b = draw(st.sampled_from((0, 1)), label="transB")
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = draw(DIMS, label="n")
    b = g.weights(draw, (n, k) if trans_b else (k, n))
    inputs = [a.name, b]
    if draw(st.booleans(), label="bias"):
        inputs.append(g.weights(draw, (n,)))
    alpha = draw(st.sampled_from((1.0, 0.5)), label="alpha")
    g.reduction = max(g.reduction, k)
    attributes = {"transA": trans_a, "transB": trans_b, "alpha": alpha}
    defaults = {"transA": 0, "transB": 0, "alpha": 1.0}
    g.add("Gemm", inputs, g.float, (m, n), **g.spelled(draw, attributes, defaults))


def _layer_norm(draw, g: _Graph) -> None:
    x = g.operand(draw)
    width = x.shape[-1]
    g.normalizes(width)
    scale, bias = g.weights(draw, (width,)), g.weights(draw, (width,))
    epsilon = draw(st.sampled_from(EPSILONS), label="epsilon")
    attributes = g.spelled(draw, {"axis": -1, "epsilon": epsilon}, {"axis": -1, "epsilon": 1e-5})
    g.add("LayerNormalization", [x.name, scale, bias], g.float, x.shape, **attributes)


def _decomposed_layer_norm(draw, g: _Graph) -> None:
    """A LayerNorm as exporters before opset 17 write it, seven nodes onnxruntime fuses into one
    LayerNormalization where it registers that fusion for the EP."""
    x = g.operand(draw)
    g.normalizes(x.shape[-1])
    last = g.constant(np.array([-1], np.int64))
    row = (*x.shape[:-1], 1)
    mean = g.add("ReduceMean", [x.name, last], g.float, row)
    centred = g.add("Sub", [x.name, mean.name], g.float, x.shape)
    squared = g.add("Pow", [centred.name, g.scalar(2.0)], g.float, x.shape)
    variance = g.add("ReduceMean", [squared.name, last], g.float, row)
    epsilon = draw(st.sampled_from(EPSILONS), label="epsilon")
    shifted = g.add("Add", [variance.name, g.scalar(epsilon)], g.float, row)
    deviation = g.add("Sqrt", [shifted.name], g.float, row)
    g.add("Div", [centred.name, deviation.name], g.float, x.shape)


def _skip_layer_norm(op: str) -> Callable:
    """SkipLayerNormalization or its simplified (RMS) form: a residual add and a norm in one,
    the skip of the input's shape or broadcast over the batch, the bias (and beta) optional."""

    def build(draw, g: _Graph) -> None:
        x = g.operand(draw, min_rank=3, max_rank=3)
        hidden = x.shape[-1]
        g.normalizes(hidden)
        skip_shape = draw(st.sampled_from((x.shape, (1, *x.shape[1:]), x.shape[1:])), label="skip")
        inputs = [x.name, g.weights(draw, skip_shape), g.weights(draw, (hidden,))]
        if op == "SkipLayerNormalization":
            inputs.append(g.weights(draw, (hidden,)) if draw(st.booleans(), label="beta") else "")
        if draw(st.booleans(), label="bias"):
            inputs.append(g.weights(draw, (hidden,)))
        while inputs[-1] == "":
            inputs.pop()
        epsilon = draw(st.sampled_from(EPSILONS), label="epsilon")
        g.add(op, inputs, g.float, x.shape, domain=MICROSOFT, epsilon=epsilon)

    return build


def _instance_norm(draw, g: _Graph) -> None:
    x = g.operand(draw, min_rank=3)
    channels = x.shape[1]
    g.normalizes(math.prod(x.shape[2:]))
    scale, bias = g.weights(draw, (channels,)), g.weights(draw, (channels,))
    epsilon = draw(st.sampled_from(EPSILONS), label="epsilon")
    attributes = g.spelled(draw, {"epsilon": epsilon}, {"epsilon": 1e-5})
    g.add("InstanceNormalization", [x.name, scale, bias], g.float, x.shape, **attributes)


def _concat(draw, g: _Graph) -> None:
    a = g.operand(draw)
    axis = draw(st.integers(-len(a.shape), len(a.shape) - 1), label="axis")
    other = list(a.shape)
    other[axis] = draw(DIMS, label="dim")
    b = g.weights(draw, tuple(other))
    shape = list(a.shape)
    shape[axis] += other[axis]
    g.add("Concat", [a.name, b], g.float, shape, axis=axis)


def _slice(draw, g: _Graph) -> None:
    x = g.operand(draw)
    axis = draw(st.integers(0, len(x.shape) - 1), label="axis")
    step = draw(st.sampled_from((1, 2, -1)), label="step")
    dim = x.shape[axis]
    start = draw(st.integers(0, dim - 1), label="start")
    end = draw(st.integers(start + 1, dim), label="end") if step > 0 else -dim - 1
    kept = len(range(*slice(start, end, step).indices(dim)))
    shape = [kept if i == axis else d for i, d in enumerate(x.shape)]
    ints = [g.constant(np.array([v], np.int64)) for v in (start, end, axis, step)]
    g.add("Slice", [x.name, *ints], g.float, shape)


def _gather(draw, g: _Graph) -> None:
    x = g.operand(draw)
    axis = draw(st.integers(0, len(x.shape) - 1), label="axis")
    count = draw(st.integers(1, 4), label="indices")
    indices = draw(st.lists(st.integers(0, x.shape[axis] - 1), min_size=count, max_size=count))
    shape = (*x.shape[:axis], count, *x.shape[axis + 1 :])
    g.add("Gather", [x.name, g.constant(np.array(indices, np.int64))], g.float, shape, axis=axis)


def _expand(draw, g: _Graph) -> None:
    x = g.operand(draw, max_rank=3)
    lead = draw(st.integers(0, 1), label="new dims")
    shape = [draw(DIMS, label="dim") for _ in range(lead)]
    shape += [draw(DIMS, label="dim") if d == 1 else d for d in x.shape]
    g.add("Expand", [x.name, g.constant(np.array(shape, np.int64))], g.float, shape)


def _where(draw, g: _Graph) -> None:
    """A Where choosing between an operand and a constant: by whether the operand is positive,
    or by a condition of its own that broadcasts (a [1] one broke JSEP, #19009)."""
    x = g.operand(draw)
    if draw(st.booleans(), label="own condition"):
        condition = g.input(BOOL, _broadcasting(draw, x.shape))
    else:
        condition = g.add("Greater", [x.name, g.scalar(0.0)], BOOL, x.shape)
    other = g.weights(draw, x.shape)
    shape = np.broadcast_shapes(condition.shape, x.shape)
    g.add("Where", [condition.name, x.name, other], g.float, shape)


def _reshape(draw, g: _Graph) -> None:
    x = g.operand(draw)
    if len(x.shape) > 1 and draw(st.booleans(), label="merge"):
        shape = [x.shape[0] * x.shape[1], *x.shape[2:]]  # the first two dims as one
    else:
        shape = [1, *x.shape]  # a leading unit dim
    g.add("Reshape", [x.name, g.constant(np.array(shape, np.int64))], g.float, shape)


def _pad(draw, g: _Graph) -> None:
    x = g.operand(draw)
    mode = draw(st.sampled_from(("constant", "reflect", "edge")), label="mode")
    most = [d - 1 if mode == "reflect" else 2 for d in x.shape]  # reflect: less than the dim
    pads = [draw(st.integers(0, min(2, m)), label="pad") for m in most * 2]
    inputs = [x.name, g.constant(np.array(pads, np.int64))]
    if mode == "constant" and draw(st.booleans(), label="value"):
        inputs.append(g.scalar(0.5))
    shape = [d + pads[i] + pads[i + len(x.shape)] for i, d in enumerate(x.shape)]
    g.add("Pad", inputs, g.float, shape, **g.spelled(draw, {"mode": mode}, {"mode": "constant"}))


def _window(draw, g: _Graph, dilated: bool = False):
    """An operand of 1 to 3 spatial dims (N, C, ...: ranks 3 to 5) and the drawn window: kernel,
    strides, pads (every axis' start, then every axis' end), dilations."""
    x = g.operand(draw, min_rank=3, max_rank=5)
    kernel = [draw(st.integers(1, min(3, d)), label="kernel") for d in x.shape[2:]]
    strides = [draw(st.integers(1, 2), label="stride") for _ in kernel]
    pads = [draw(st.integers(0, k - 1), label="pad") for k in kernel] * 2
    dilations = [
        draw(st.integers(1, 2), label="dilation") if dilated and (k - 1) * 2 < d else 1
        for k, d in zip(kernel, x.shape[2:], strict=True)
    ]
    return x, kernel, strides, pads, dilations


def _window_attributes(draw, g: _Graph, kernel, strides, pads, dilations=None, **more) -> dict:
    attributes = {"kernel_shape": kernel, "strides": strides, "pads": pads, **more}
    defaults = {"strides": [1] * len(kernel), "pads": [0] * 2 * len(kernel)}
    defaults["dilations"] = [1] * len(kernel)
    defaults |= {"group": 1, "ceil_mode": 0, "count_include_pad": 0}
    if dilations is not None:
        attributes["dilations"] = dilations
    return g.spelled(draw, attributes, defaults)


def _conv(draw, g: _Graph) -> None:
    x, kernel, strides, pads, dilations = _window(draw, g, dilated=True)
    out = [
        (d + pads[i] + pads[i + len(kernel)] - dilations[i] * (k - 1) - 1) // strides[i] + 1
        for i, (d, k) in enumerate(zip(x.shape[2:], kernel, strict=True))
    ]
    channels = x.shape[1]
    group = draw(st.sampled_from([d for d in (1, channels) if channels % d == 0]), label="group")
    filters = group * draw(st.integers(1, 2), label="filters per group")
    weights = g.weights(draw, (filters, channels // group, *kernel))
    inputs = [x.name, weights]
    if draw(st.booleans(), label="bias"):
        inputs.append(g.weights(draw, (filters,)))
    g.reduction = max(g.reduction, channels // group * math.prod(kernel))
    attributes = _window_attributes(draw, g, kernel, strides, pads, dilations, group=group)
    g.add("Conv", inputs, g.float, (x.shape[0], filters, *out), **attributes)


def _conv_transpose(draw, g: _Graph) -> None:
    x = g.operand(draw, min_rank=3, max_rank=5)
    kernel = [draw(st.integers(1, 3), label="kernel") for _ in x.shape[2:]]
    strides = [draw(st.integers(1, 2), label="stride") for _ in kernel]
    pads = [draw(st.integers(0, (k - 1) // 2), label="pad") for k in kernel] * 2  # output >= 1
    out = [
        (d - 1) * strides[i] - pads[i] - pads[i + len(kernel)] + k
        for i, (d, k) in enumerate(zip(x.shape[2:], kernel, strict=True))
    ]
    channels = x.shape[1]
    group = draw(st.sampled_from([d for d in (1, channels) if channels % d == 0]), label="group")
    per_group = draw(st.integers(1, 2), label="filters per group")
    inputs = [x.name, g.weights(draw, (channels, per_group, *kernel))]
    if draw(st.booleans(), label="bias"):
        inputs.append(g.weights(draw, (group * per_group,)))
    g.reduction = max(g.reduction, channels // group * math.prod(kernel))
    attributes = _window_attributes(draw, g, kernel, strides, pads, group=group)
    g.add("ConvTranspose", inputs, g.float, (x.shape[0], group * per_group, *out), **attributes)


def _pool(op: str) -> Callable:
    def build(draw, g: _Graph) -> None:
        x, kernel, strides, pads, _ = _window(draw, g)
        ceil = draw(st.sampled_from((0, 1)), label="ceil_mode")
        more = {"ceil_mode": ceil}
        if op == "AveragePool":
            more["count_include_pad"] = draw(st.sampled_from((0, 1)), label="count_include_pad")
        out = []
        for i, (d, k) in enumerate(zip(x.shape[2:], kernel, strict=True)):
            span = d + pads[i] + pads[i + len(kernel)] - k
            size = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
            if (size - 1) * strides[i] >= d + pads[i]:
                # its last window would start in the end padding: onnxruntime drops it, ONNX's
                # shape inference keeps it
                raise _NotHere
            out.append(size)
        g.reduction = max(g.reduction, math.prod(kernel))
        attributes = _window_attributes(draw, g, kernel, strides, pads, **more)
        g.add(op, [x.name], g.float, (*x.shape[:2], *out), **attributes)

    return build


# The vocabulary, simplest first (Hypothesis shrinks towards the first): op -> its builder.
# What a target lacks (wgpu: Conv and the pools) is learned and no longer drawn.
OPS: dict[str, Callable] = {
    "Relu": _unary("Relu"),
    "Add": _binary("Add"),
    "Mul": _binary("Mul"),
    "Sub": _binary("Sub"),
    "Sigmoid": _unary("Sigmoid"),
    "Tanh": _unary("Tanh"),
    "Erf": _unary("Erf"),
    "Gelu": _gelu,
    "Cast": _cast,
    "Transpose": _transpose,
    "Softmax": _softmax,
    "ReduceSum": _reduce("ReduceSum"),
    "ReduceMean": _reduce("ReduceMean"),
    "ReduceMax": _reduce("ReduceMax"),
    "MatMul": _matmul,
    "Gemm": _gemm,
    "LayerNormalization": _layer_norm,
    "Concat": _concat,
    "Slice": _slice,
    "Gather": _gather,
    "Expand": _expand,
    "Where": _where,
    "Reshape": _reshape,
    "Identity": _unary("Identity"),
    "Conv": _conv,
    "MaxPool": _pool("MaxPool"),
    "AveragePool": _pool("AveragePool"),
    "LeakyRelu": _unary("LeakyRelu", alpha=(0.01, 0.2)),
    "HardSigmoid": _unary("HardSigmoid", alpha=(0.2, 0.3), beta=(0.5, 0.4)),
    "Clip": _clip,
    "And": _binary("And", BOOL),
    "Or": _binary("Or", BOOL),
    "Pad": _pad,
    "InstanceNormalization": _instance_norm,
    "ConvTranspose": _conv_transpose,
    "DecomposedLayerNorm": _decomposed_layer_norm,
    "SkipLayerNormalization": _skip_layer_norm("SkipLayerNormalization"),
    "SkipSimplifiedLayerNormalization": _skip_layer_norm("SkipSimplifiedLayerNormalization"),
    "FastGelu": _fast_gelu,
    "QuickGelu": _quick_gelu,
}


@dataclass(frozen=True)
class GeneratedModel:
    """A drawn model: its ONNX bytes, the ops it holds, its layouts and its tolerance."""

    model: bytes
    ops: tuple[str, ...]  # of its nodes, in node order (the Mul before a Cast included)
    layouts: tuple[Mapping[str, Any], ...]  # a suite's `layouts:` entries; () the default only
    tolerance: Tolerance
    dtype: str = "float32"  # its float tensors' type, a key of DTYPES
    omitted: int = 0  # attributes left to their defaults
    opset: int = OPSET

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.model + repr(self.layouts).encode()).hexdigest()

    @property
    def nodes(self) -> int:
        return len(self.ops)


@dataclass(frozen=True)
class OpCovered:
    """One op of the models drawn: how many nodes of it, and every attribute value they held
    (``name=value``), what twins of the op differed by."""

    op: str
    nodes: int
    values: tuple[str, ...]


def buckets(generated: GeneratedModel) -> list[str]:
    """The bucket of each dimension of the draw `generated` falls in (``dtype float16``,
    ``widest dim 65-256``, ``contrib ops``...): what coverage and the bench count by."""
    graph = onnx.load_from_string(generated.model).graph
    widest = max(d.dim_value for i in graph.input for d in i.type.tensor_type.shape.dim)
    low = max((b + 1 for b in SIZE_BUCKETS if b < widest), default=1)
    high = next(b for b in SIZE_BUCKETS if widest <= b)
    found = [f"dtype {generated.dtype}", f"opset {generated.opset}", f"widest dim {low}-{high}"]
    if generated.omitted:
        found.append("attributes left to defaults")
    if any(node.domain == MICROSOFT for node in graph.node):
        found.append("contrib ops")
    return found


class Coverage:
    """The ops and attribute values of the models added so far (mutable: explore adds each
    model it judges), as "how much of the vocabulary did a budget try" is measured."""

    def __init__(self) -> None:
        self.nodes: collections.Counter[str] = collections.Counter()
        self.values: dict[str, set[str]] = collections.defaultdict(set)
        self.dimensions: collections.Counter[str] = collections.Counter()  # models per bucket

    def add(self, generated: GeneratedModel) -> None:
        graph = onnx.load_from_string(generated.model).graph
        for node in graph.node:
            self.nodes[node.op_type] += 1
            self.values[node.op_type].update(
                f"{a.name}={helper.get_attribute_value(a)!r}" for a in node.attribute
            )
        self.dimensions.update(buckets(generated))

    def ops(self) -> tuple[OpCovered, ...]:
        """Each op added, the most drawn first."""
        return tuple(
            OpCovered(op, count, tuple(sorted(self.values[op])))
            for op, count in self.nodes.most_common()
        )


def tolerance(reduction: int, dtype: str = "float32") -> Tolerance:
    """What a generated model's outputs may differ from onnxruntime CPU's by: f32 kernels that
    sum `reduction` terms of inputs in [-1, 1] (products of two such) drift by a few ulps per
    term, so 2e-5 per term and at least 1e-4 absolute, or a ratio within 1e-4 (ORT-web's op-test
    rule, with its 1e-3 and 1e-5 scaled to what twins differ by: Gelu's two approximations part
    by 1.5e-4 at 1). float16 rounds every op on both sides, and GPUs approximate Erf, Tanh and
    Sigmoid a few of its ulps off, along chains of up to 6 ops: 8 ulps at 1 (2^-7; measured: an
    Erf of an Erf 4.7e-3 off on onnxruntime-webgpu 1.27.0), and one at 1 per term summed, up to
    1 (a suite's most)."""
    if dtype == "float16":
        return Tolerance(abs=min(1.0, max(FLOAT16_ABS, 2.0**-10 * reduction)), rel=FLOAT16_ABS)
    return Tolerance(abs=min(1.0, max(1e-4, 2e-5 * reduction)), rel=1e-4)


@st.composite
def generated_models(
    draw,
    vocabulary: tuple[str, ...],
    dtypes: tuple[str, ...] = ("float32",),
    opsets: tuple[int, ...] = (OPSET,),
) -> GeneratedModel:
    """A valid model of 1 to ``MAX_NODES`` ops of `vocabulary` (some of them twins), its float
    tensors of one of `dtypes`, importing one of `opsets`, with a second layout when it has a
    LayerNormalization and the draw says so."""
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    opset = draw(st.sampled_from(opsets), label="opset")
    g = _Graph(DTYPES[dtype], opset)
    drawn: list[str] = []
    # one "more?" before each op but the first, as Hypothesis draws lists: a node's choices are
    # one block, which shrinking deletes whole
    for _ in range(MAX_NODES):
        if len(g.nodes) >= MAX_NODES or drawn and not draw(st.booleans(), label="more"):
            break  # an op of several nodes (a decomposed LayerNorm's 7) leaves less room
        again = drawn and draw(st.booleans(), label="twin")
        op = draw(st.sampled_from(drawn if again else vocabulary), label="op")
        try:
            OPS[op](draw, g)
        except _NotHere:  # the graph has no room for it: one node fewer
            continue
        drawn.append(op)
    if not g.nodes:
        reject()
    outputs = [v for v in g.values if v not in g.inputs and v.name not in g.consumed]
    graph = helper.make_graph(
        g.nodes,
        "generated",
        [helper.make_tensor_value_info(v.name, v.dtype, v.shape) for v in g.inputs],
        [helper.make_tensor_value_info(v.name, v.dtype, v.shape) for v in outputs],
        initializer=[c for c in g.constants if c.name in g.consumed],  # a refused node's go
    )
    imports = [helper.make_opsetid("", opset)]
    if any(n.domain == MICROSOFT for n in g.nodes):
        imports.append(helper.make_opsetid(MICROSOFT, 1))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    layouts: tuple[Mapping[str, Any], ...] = ()
    norms = [n for n in g.nodes if n.op_type == "LayerNormalization"]
    if norms and draw(st.booleans(), label="second layout"):
        first = next((a.f for a in norms[0].attribute if a.name == "epsilon"), 1e-5)
        epsilon = draw(st.sampled_from([e for e in EPSILONS if e != first]), label="layout eps")
        layouts = ({"label": "default"}, {"label": f"eps-{epsilon:g}", "values": {"eps": epsilon}})
    ops = tuple(n.op_type for n in g.nodes)
    return GeneratedModel(
        model.SerializeToString(),
        ops,
        layouts,
        tolerance(g.reduction, dtype),
        dtype,
        g.omitted,
        opset,
    )


def without_bystanders(generated: GeneratedModel, culprit: str) -> GeneratedModel | None:
    """`generated` without the nodes the node named `culprit` neither reads from nor feeds,
    their outputs, inputs and constants gone with them; None when every node is one of those it
    reads or feeds (or no node has that name)."""
    model = onnx.load_from_string(generated.model)
    nodes = list(model.graph.node)
    found = [n for n in nodes if n.name == culprit]
    if not found:
        return None
    feeds, values = set(), set(found[0].output)  # every node fed by the culprit's outputs
    for node in nodes:  # topological
        if values & set(node.input):
            feeds.add(node.name)
            values.update(node.output)
    return _keeping(generated, model, _read_by(nodes, found) | feeds)


def without_output(generated: GeneratedModel, output: str) -> GeneratedModel | None:
    """`generated` without graph output `output` and the nodes only it needs; None when it has
    no other output."""
    model = onnx.load_from_string(generated.model)
    others = {o.name for o in model.graph.output} - {output}
    if not others:
        return None
    nodes = list(model.graph.node)
    return _keeping(generated, model, _read_by(nodes, [n for n in nodes if others & set(n.output)]))


def _read_by(nodes: list[onnx.NodeProto], these: list[onnx.NodeProto]) -> set[str]:
    """The names of `these` and of every node they read from, however far back."""
    producers = {out: n for n in nodes for out in n.output}
    reads, pending = set(), list(these)
    while pending:
        node = pending.pop()
        if node.name not in reads:
            reads.add(node.name)
            pending += [producers[name] for name in node.input if name in producers]
    return reads


def _keeping(
    generated: GeneratedModel, model: onnx.ModelProto, kept_names: set[str]
) -> GeneratedModel | None:
    """`generated` (its `model`, parsed) with only the nodes named `kept_names`, the outputs,
    inputs and constants of the others gone with them; None when it keeps every node, or none.
    A second layout stays where a LayerNormalization does."""
    graph = model.graph
    kept = [n for n in graph.node if n.name in kept_names]
    if len(kept) in (0, len(graph.node)):
        return None
    used = {name for n in kept for name in n.input}
    made = {name for n in kept for name in n.output}
    pruned = helper.make_graph(
        kept,
        graph.name,
        [i for i in graph.input if i.name in used],
        [o for o in graph.output if o.name in made],
        initializer=[t for t in graph.initializer if t.name in used],
    )
    pruned_model = helper.make_model(pruned, opset_imports=model.opset_import)
    pruned_model.ir_version = model.ir_version
    onnx.checker.check_model(pruned_model, full_check=True)
    ops = tuple(n.op_type for n in kept)
    layouts = generated.layouts if "LayerNormalization" in ops else ()
    return dataclasses.replace(
        generated, model=pruned_model.SerializeToString(), ops=ops, layouts=layouts
    )


@dataclass(frozen=True)
class GeneratedSuite:
    """A drawn model written as a suite of its own: what `run` reproduces."""

    path: Path  # the suite file; the model file beside it
    model_name: str


def write_suite(
    generated: GeneratedModel,
    folder: Path,
    backend: str | Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    header: str = "",
    name: str = "",
) -> GeneratedSuite:
    """``folder/<name>.yaml`` and ``folder/<name>.onnx`` for `generated` on `backend` (a suite's
    ``backends:`` entry); `extra` adds keys (a finding's ``cases:``). `name` defaults to one
    from the model's digest."""
    name = name or f"generated-{generated.digest[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.onnx").write_bytes(generated.model)
    tolerance = dataclasses.asdict(generated.tolerance)
    suite = {
        "name": name,
        "models": {name: {"path": f"{name}.onnx"}},
        **({"layouts": list(generated.layouts)} if generated.layouts else {}),
        "backends": [backend],
        "tolerance": tolerance,
        **(extra or {}),
    }
    path = folder / f"{name}.yaml"
    path.write_text(header + yaml.safe_dump(suite, sort_keys=False, width=100))
    return GeneratedSuite(path, name)
