"""The op vocabulary explore draws models from: each op's builder, on a graph being drawn.

A builder picks operands whose shapes and types its op takes (an existing value or a new graph
input), draws its attributes and constants, and adds its node with the shape it makes, so a
drawn model is valid by construction; one that cannot be built on the graph so far raises
``NotHere``, and the node is left out. ``OPS`` lists them, simplest first (Hypothesis shrinks
towards the first); ``runner.explore.generated`` draws whole models from them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

# How far an element-wise op's graph input may be scaled first (``unary``): past 88, exp
# overflows float32 (JSEP's Tanh gave NaN there, #19201); past 256, a square overflows float16
# (an unfused float16 LayerNorm's, #31626). Never a computed value: it would scale up what a
# GPU's Erf or Tanh may be off by (an Erf near 0 times 300: 0.5 off in float16 on
# onnxruntime-webgpu 1.27.0, a false positive)
MAGNITUDES = (1.0, 300.0)
MICROSOFT = "com.microsoft"  # the contrib ops' domain (transformer exports' fused ops)
MAX_INPUTS = 3
DIMS = st.integers(1, 6)  # small: a dispatch's size still changes with them
# A graph input may have one wide dim, one below, on or one above a size where kernels change
# path: vector width 4, subgroups and workgroups (32, 64), tiles and channel blocks (128, 256),
# float16's last exact integer (2048), within ELEMENTS elements so that a model stays cheap
BOUNDARIES = tuple(b + d for b in (4, 8, 16, 32, 64, 128, 256, 2048) for d in (-1, 0, 1))
ELEMENTS = 4096
MAX_NODES = 6  # a drawn model's, and the most ops it holds
# The ranges a model's widest graph input dim is counted in (coverage's "widest dim 7-64"), as
# `--sizes` names them: the first is the narrow draw (DIMS, and BOUNDARIES up to 6)
SIZES = {"1-6": (1, 6), "7-64": (7, 64), "65-256": (65, 256), "257-4096": (257, ELEMENTS)}
# What `--without` leaves out of the draw: fused graph shapes (``_then_fusable``), attributes
# left to their defaults (``Graph.spelled``), a second session preferring another data layout
LEAVABLE = ("fusions", "defaults", "data-layouts")


@dataclass(frozen=True)
class Narrowing:
    """How far a user narrowed the draw (explore's ``--sizes``, ``--max-ops``, ``--without``):
    the sizes a graph input's wide dim may take (of ``SIZES``; without "1-6" every new graph
    input has one), the most ops a model holds (a decomposed LayerNorm is one) and what of
    ``LEAVABLE`` is left out. The default narrows nothing."""

    sizes: tuple[str, ...] = tuple(SIZES)
    max_ops: int = MAX_NODES
    without: tuple[str, ...] = ()  # in LEAVABLE's order: the example database's key holds it

    def widths(self) -> tuple[int, ...]:
        """The wide dims a graph input may take."""
        return tuple(
            b for b in BOUNDARIES if any(lo <= b <= hi for lo, hi in map(SIZES.get, self.sizes))
        )


WHOLE_DRAW = Narrowing()


# the fewest elements a normalization is drawn over (``Graph.normalizes``), per float type
NORM_EXTENT = {TensorProto.FLOAT: 3, TensorProto.FLOAT16: 8}
EPSILONS = (1e-5, 1e-3, 0.1)  # LayerNormalization's, and the second layout's

FLOAT, FLOAT16, INT32, BOOL = (
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.BOOL
)  # fmt: skip


@dataclass(frozen=True)
class Value:
    name: str
    dtype: int
    shape: tuple[int, ...]


class Graph:
    """A graph while it is drawn: its values, nodes and constants (mutable: one draw only)."""

    def __init__(self, dtype: int, opset: int, narrowing: Narrowing = WHOLE_DRAW) -> None:
        self.float = dtype  # the float type builders draw in (float32 inside an island)
        self.opset = opset
        self.narrowing = narrowing
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
            raise NotHere
        rank = draw(st.integers(min_rank, max_rank), label="rank")
        shape = [draw(DIMS, label="dim") for _ in range(rank)]
        narrow = "1-6" in self.narrowing.sizes
        if not narrow or draw(st.integers(0, 3), label="wide") == 3:  # shrinks to narrow
            axis = draw(st.integers(0, rank - 1), label="wide axis")
            rest = math.prod(shape) // shape[axis]
            if not narrow and min(self.narrowing.widths()) * rest > ELEMENTS:
                shape, rest = [1] * rank, 1  # room made for a wide dim: the others 1
            widths = [b for b in self.narrowing.widths() if b * rest <= ELEMENTS]
            if widths:
                shape[axis] = draw(st.sampled_from(widths), label="width")
        return self.input(dtype, tuple(shape))

    def input(self, dtype: int, shape: tuple[int, ...]) -> Value:
        """A new graph input; NotHere when there is no room for one."""
        if len(self.inputs) >= MAX_INPUTS:
            raise NotHere
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
        """A normalization over `extent` elements, its reduction counted; NotHere over fewer
        than NORM_EXTENT. Over fewer, values that nearly agree leave x - mean a few bits, which
        a kernel that computes the variance as E[x^2] - E[x]^2 loses, while the exact output
        hardly moves: no move of the inputs shows it, so the oracle's conditioning slack cannot
        cover it (measured: LayerNormalization over rows of 2 1.77e-4 off on onnxruntime-web
        1.30.0's webgpu build at 64 ulps of slack, twice in 60 minutes; a 1-element float16
        InstanceNormalization 30 ulps off on onnxruntime-webgpu 1.27.0, a float16 decomposed
        LayerNorm over 2 values 0.026 off on wgpu)."""
        if extent < NORM_EXTENT[self.float]:
            raise NotHere
        self.reduction = max(self.reduction, extent)

    def spelled(self, draw, attributes: dict[str, Any], defaults: dict[str, Any]) -> dict:
        """`attributes`, those equal to their default left out when the draw says so (shrinking
        writes them): a kernel must read a default it is not told."""
        if "defaults" in self.narrowing.without or not draw(
            st.booleans(), label="defaults omitted"
        ):
            return attributes
        kept = {k: v for k, v in attributes.items() if k not in defaults or defaults[k] != v}
        self.omitted += len(attributes) - len(kept)
        return kept

    def add(self, op: str, inputs: list[str], dtype: int, shape, **attributes) -> Value:
        """A node making one value; NotHere when it would hold over 4 * ELEMENTS elements."""
        if math.prod(shape) > 4 * ELEMENTS:
            raise NotHere
        value = Value(f"t{len(self.nodes)}", dtype, tuple(int(d) for d in shape))
        self.nodes.append(
            helper.make_node(op, inputs, [value.name], name=f"n{len(self.nodes)}", **attributes)
        )
        self.consumed.update(inputs)
        self.values.append(value)
        return value


class NotHere(Exception):
    """The op cannot be built on this graph (no operand fits, no room for a new input)."""


def unary(op: str, **drawn: tuple[Any, ...]) -> Callable:
    """An element-wise op, its operand (a graph input) maybe scaled to a large magnitude first;
    `drawn` attributes take one of their values, the first the default."""

    def build(draw, g: Graph) -> None:
        x = g.operand(draw)
        magnitude = draw(st.sampled_from(MAGNITUDES), label="magnitude")
        if magnitude != 1.0 and x in g.inputs:
            x = g.add("Mul", [x.name, g.scalar(magnitude)], g.float, x.shape)
        attributes = {name: draw(st.sampled_from(v), label=name) for name, v in drawn.items()}
        defaults = {name: values[0] for name, values in drawn.items()}
        g.add(op, [x.name], g.float, x.shape, **g.spelled(draw, attributes, defaults))

    return build


def _clip(draw, g: Graph) -> None:
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

    def build(draw, g: Graph) -> None:
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


def _gelu(draw, g: Graph) -> None:
    if g.opset < 20:
        raise NotHere
    x = g.operand(draw)
    approximate = draw(st.sampled_from(("none", "tanh")), label="approximate")
    attributes = g.spelled(draw, {"approximate": approximate}, {"approximate": "none"})
    g.add("Gelu", [x.name], g.float, x.shape, **attributes)


def _fast_gelu(draw, g: Graph) -> None:
    """FastGelu (a transformer export's fused tanh Gelu), its bias over the last dim optional."""
    x = g.operand(draw)
    inputs = [x.name]
    if draw(st.booleans(), label="bias"):
        inputs.append(g.weights(draw, x.shape[-1:]))
    g.add("FastGelu", inputs, g.float, x.shape, domain=MICROSOFT)


def _quick_gelu(draw, g: Graph) -> None:
    """QuickGelu, x * sigmoid(alpha * x) (CLIP's activation), alpha 1.702 by default."""
    x = g.operand(draw)
    alpha = draw(st.sampled_from((1.702, 1.0)), label="alpha")
    attributes = g.spelled(draw, {"alpha": alpha}, {"alpha": 1.702})
    g.add("QuickGelu", [x.name], g.float, x.shape, domain=MICROSOFT, **attributes)


def _heads(draw, hidden: int, head_sizes: tuple[int, ...] = ()) -> tuple[int, int]:
    """A split of `hidden` into heads of an even size (of `head_sizes` where given): (heads,
    head size); NotHere where none fits."""
    fits = [
        h for h in (1, 2, 4)
        if hidden % h == 0 and (hidden // h) % 2 == 0
        and (not head_sizes or hidden // h in head_sizes)
    ]  # fmt: skip
    if not fits:
        raise NotHere
    heads = draw(st.sampled_from(fits), label="heads")
    return heads, hidden // heads


def _attention_input(draw, g: Graph, head_sizes: tuple[int, ...]) -> Value:
    """A [batch, sequence, heads * head size] operand whose head size is one of `head_sizes`:
    an existing value or a new graph input, of 1, 2 or 4 heads."""
    fits = [
        v for v in g.values
        if v.dtype == g.float and len(v.shape) == 3
        and any(v.shape[2] in (size, 2 * size, 4 * size) for size in head_sizes)
    ]  # fmt: skip
    if fits and draw(st.booleans(), label="existing"):
        return draw(st.sampled_from(fits), label="operand")
    batch, sequence = draw(DIMS, label="batch"), draw(DIMS, label="sequence")
    heads = draw(st.sampled_from((1, 2, 4)), label="heads")
    size = draw(st.sampled_from(head_sizes), label="head size")
    return g.input(g.float, (batch, sequence, heads * size))


def _rotary_embedding(draw, g: Graph) -> None:
    """RotaryEmbedding (a Llama or Phi export's) over x[batch, sequence, heads * head size]:
    positions from an offset, cos and sin caches past them, halves rotated or pairs
    (interleaved), on the whole head or its first half (then with ``num_heads`` and
    ``rotary_embedding_dim``, which a whole-head rotation leaves out)."""
    x = g.operand(draw, min_rank=3, max_rank=3)
    batch, sequence, hidden = x.shape
    heads, head = _heads(draw, hidden)
    rotary = draw(st.sampled_from([r for r in (head, head // 2) if r % 2 == 0]), label="rotary")
    offset = draw(st.integers(0, 2), label="offset")
    positions = np.arange(offset, offset + sequence, dtype=np.int64)
    cached = offset + sequence + draw(st.integers(0, 2), label="cached")
    angles = np.arange(cached)[:, None] * 10000.0 ** (-np.arange(rotary // 2) * 2 / rotary)
    float_type = helper.tensor_dtype_to_np_dtype(g.float)
    inputs = [
        x.name,
        g.constant(np.broadcast_to(positions, (batch, sequence)).copy()),
        g.constant(np.cos(angles).astype(float_type)),
        g.constant(np.sin(angles).astype(float_type)),
    ]
    interleaved = draw(st.sampled_from((0, 1)), label="interleaved")
    attributes = g.spelled(draw, {"interleaved": interleaved}, {"interleaved": 0})
    if rotary != head:
        attributes |= {"num_heads": heads, "rotary_embedding_dim": rotary}
    g.add("RotaryEmbedding", inputs, g.float, x.shape, domain=MICROSOFT, **attributes)


def _multi_head_attention(draw, g: Graph) -> None:
    """MultiHeadAttention (a BERT or Whisper export's): queries x[batch, sequence, heads * head
    size] attending over themselves, or over constant keys and values of another length (cross
    attention)."""
    q = g.operand(draw, min_rank=3, max_rank=3)
    batch, sequence, hidden = q.shape
    heads, head = _heads(draw, hidden)
    if draw(st.booleans(), label="cross"):
        length = draw(DIMS, label="length")
        inputs = [q.name, *(g.weights(draw, (batch, length, hidden)) for _ in "kv")]
    else:
        length = sequence
        inputs = [q.name] * 3
    g.reduction = max(g.reduction, head, length)
    g.add("MultiHeadAttention", inputs, g.float, q.shape, domain=MICROSOFT, num_heads=heads)


def _group_query_attention(draw, g: Graph) -> None:
    """GroupQueryAttention as a decoder's prompt runs it (no past): queries of 1 to 4 heads of 8
    or 16 (onnxruntime CPU's multiples of 8), keys and values of as many heads or fewer that they
    share, every position attending to those up to its own."""
    q = _attention_input(draw, g, (8, 16))
    batch, sequence, hidden = q.shape
    heads, head = _heads(draw, hidden, (8, 16))
    kv_heads = draw(st.sampled_from([k for k in (1, 2, 4) if heads % k == 0]), label="kv heads")
    inputs = [
        q.name,
        *(g.weights(draw, (batch, sequence, kv_heads * head)) for _ in "kv"),
        "",
        "",
        g.constant(np.full(batch, sequence - 1, np.int32)),  # seqlens_k: the last position
        g.constant(np.array(sequence, np.int32)),  # total_sequence_length
    ]
    g.reduction = max(g.reduction, head, sequence)
    attributes = {"num_heads": heads, "kv_num_heads": kv_heads}
    g.add("GroupQueryAttention", inputs, g.float, q.shape, domain=MICROSOFT, **attributes)


# what a float16 export keeps in float32 for its precision (``_float32_island``)
ISLAND_OPS = (
    "Sigmoid", "Softmax", "ReduceMean", "LayerNormalization", "SkipSimplifiedLayerNormalization"
)  # fmt: skip


def _float32_island(draw, g: Graph) -> None:
    """In a float16 model, one op run in float32 between two Casts, as float16 exports keep a
    norm or a Softmax (its operand the Cast's, or a float32 graph input of its own): a graph of
    both float types."""
    if g.float != FLOAT16:
        raise NotHere
    x = g.operand(draw)
    g.add("Cast", [x.name], FLOAT, x.shape, to=FLOAT)
    g.float = FLOAT
    try:
        OPS[draw(st.sampled_from(ISLAND_OPS), label="island op")](draw, g)
    finally:
        g.float = FLOAT16
    made = g.values[-1]
    g.add("Cast", [made.name], FLOAT16, made.shape, to=FLOAT16)


def _cast(draw, g: Graph) -> None:
    x = g.operand(draw)
    if g.float == FLOAT16 and x not in g.inputs:
        # truncation is a step: a computed float16 value one ulp apart (a Sigmoid's, as GPUs
        # and onnxruntime CPU round it) truncates to another integer, not a bug
        raise NotHere
    to = draw(st.sampled_from((INT32, BOOL)), label="to")
    # scaled first, so that truncation to an integer keeps something of each element
    scaled = g.add("Mul", [x.name, g.scalar(4.0)], g.float, x.shape)
    g.add("Cast", [scaled.name], to, x.shape, to=to)


def _softmax(draw, g: Graph) -> None:
    x = g.operand(draw)
    rank = len(x.shape)
    # the last axis, spelled two ways, or another (JSEP took the last only, #22231)
    axis = draw(st.sampled_from((-1, rank - 1, *range(rank - 1))), label="axis")
    g.reduction = max(g.reduction, x.shape[axis])
    g.add("Softmax", [x.name], g.float, x.shape, **g.spelled(draw, {"axis": axis}, {"axis": -1}))


def _transpose(draw, g: Graph) -> None:
    x = g.operand(draw)  # rank 1 too: JSEP got it wrong, #22997
    perm = draw(st.permutations(range(len(x.shape))), label="perm")
    g.add("Transpose", [x.name], g.float, [x.shape[p] for p in perm], perm=list(perm))


def _reduce(op: str) -> Callable:
    def build(draw, g: Graph) -> None:
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


# The activations onnxruntime's optimizer fuses into the Conv before them (ConvActivationFusion,
# registered for the JS and WebGPU EPs too), at its default level. Drawn after a Conv, MatMul or
# Gemm (``_then_fusable``): as an op of its own, a Conv feeding a Tanh came once in about 5000
# models; so, in about 400 (JSEP 1.17.0's #21467).
FUSED_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "HardSigmoid", "Clip")


def _then_fusable(draw, g: Graph, made: Value, bias: bool = False) -> None:
    """What may follow a Conv, MatMul or Gemm as the graphs onnxruntime fuses have it: for a
    MatMul (`bias`) an Add of a bias over its last dim (MatMulAddFusion: a Gemm), then one of
    ``FUSED_ACTIVATIONS`` (a fused kernel of the EP's own where it registers one)."""
    if "fusions" in g.narrowing.without:
        return
    if bias and draw(st.booleans(), label="then bias"):
        made = g.add("Add", [made.name, g.weights(draw, made.shape[-1:])], g.float, made.shape)
    if not draw(st.booleans(), label="then activation"):
        return
    op = draw(st.sampled_from(FUSED_ACTIVATIONS), label="activation")
    inputs, attributes = [made.name], {}
    if op == "Clip":  # the fusion takes constant bounds only
        inputs += [g.scalar(-0.5), g.scalar(0.5)]
    elif op == "LeakyRelu":
        attributes["alpha"] = draw(st.sampled_from((0.01, 0.2)), label="alpha")
    elif op == "HardSigmoid":
        attributes["alpha"] = draw(st.sampled_from((0.2, 0.3)), label="alpha")
    g.add(op, inputs, g.float, made.shape, **attributes)


def _matmul(draw, g: Graph) -> None:
    a = g.operand(draw, min_rank=2)
    k, n = a.shape[-1], draw(DIMS, label="n")
    b = g.weights(draw, (k, n))
    g.reduction = max(g.reduction, k)
    _then_fusable(draw, g, g.add("MatMul", [a.name, b], g.float, (*a.shape[:-1], n)), bias=True)


def _gemm(draw, g: Graph) -> None:
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
    made = g.add("Gemm", inputs, g.float, (m, n), **g.spelled(draw, attributes, defaults))
    _then_fusable(draw, g, made)


def _layer_norm(draw, g: Graph) -> None:
    x = g.operand(draw)
    width = x.shape[-1]
    g.normalizes(width)
    scale, bias = g.weights(draw, (width,)), g.weights(draw, (width,))
    epsilon = draw(st.sampled_from(EPSILONS), label="epsilon")
    attributes = g.spelled(draw, {"axis": -1, "epsilon": epsilon}, {"axis": -1, "epsilon": 1e-5})
    g.add("LayerNormalization", [x.name, scale, bias], g.float, x.shape, **attributes)


def _decomposed_layer_norm(draw, g: Graph) -> None:
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

    def build(draw, g: Graph) -> None:
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


def _instance_norm(draw, g: Graph) -> None:
    x = g.operand(draw, min_rank=3)
    channels = x.shape[1]
    g.normalizes(math.prod(x.shape[2:]))
    scale, bias = g.weights(draw, (channels,)), g.weights(draw, (channels,))
    epsilon = draw(st.sampled_from(EPSILONS), label="epsilon")
    attributes = g.spelled(draw, {"epsilon": epsilon}, {"epsilon": 1e-5})
    g.add("InstanceNormalization", [x.name, scale, bias], g.float, x.shape, **attributes)


def _concat(draw, g: Graph) -> None:
    a = g.operand(draw)
    axis = draw(st.integers(-len(a.shape), len(a.shape) - 1), label="axis")
    other = list(a.shape)
    other[axis] = draw(DIMS, label="dim")
    b = g.weights(draw, tuple(other))
    shape = list(a.shape)
    shape[axis] += other[axis]
    g.add("Concat", [a.name, b], g.float, shape, axis=axis)


def _slice(draw, g: Graph) -> None:
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


def _gather(draw, g: Graph) -> None:
    x = g.operand(draw)
    axis = draw(st.integers(0, len(x.shape) - 1), label="axis")
    count = draw(st.integers(1, 4), label="indices")
    indices = draw(st.lists(st.integers(0, x.shape[axis] - 1), min_size=count, max_size=count))
    shape = (*x.shape[:axis], count, *x.shape[axis + 1 :])
    g.add("Gather", [x.name, g.constant(np.array(indices, np.int64))], g.float, shape, axis=axis)


def _expand(draw, g: Graph) -> None:
    x = g.operand(draw, max_rank=3)
    lead = draw(st.integers(0, 1), label="new dims")
    shape = [draw(DIMS, label="dim") for _ in range(lead)]
    shape += [draw(DIMS, label="dim") if d == 1 else d for d in x.shape]
    g.add("Expand", [x.name, g.constant(np.array(shape, np.int64))], g.float, shape)


def _where(draw, g: Graph) -> None:
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


def _reshape(draw, g: Graph) -> None:
    x = g.operand(draw)
    if len(x.shape) > 1 and draw(st.booleans(), label="merge"):
        shape = [x.shape[0] * x.shape[1], *x.shape[2:]]  # the first two dims as one
    else:
        shape = [1, *x.shape]  # a leading unit dim
    g.add("Reshape", [x.name, g.constant(np.array(shape, np.int64))], g.float, shape)


def _pad(draw, g: Graph) -> None:
    x = g.operand(draw)
    mode = draw(st.sampled_from(("constant", "reflect", "edge")), label="mode")
    most = [d - 1 if mode == "reflect" else 2 for d in x.shape]  # reflect: less than the dim
    pads = [draw(st.integers(0, min(2, m)), label="pad") for m in most * 2]
    inputs = [x.name, g.constant(np.array(pads, np.int64))]
    if mode == "constant" and draw(st.booleans(), label="value"):
        inputs.append(g.scalar(0.5))
    shape = [d + pads[i] + pads[i + len(x.shape)] for i, d in enumerate(x.shape)]
    g.add("Pad", inputs, g.float, shape, **g.spelled(draw, {"mode": mode}, {"mode": "constant"}))


def _window(draw, g: Graph, dilated: bool = False):
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


def _window_attributes(draw, g: Graph, kernel, strides, pads, dilations=None, **more) -> dict:
    attributes = {"kernel_shape": kernel, "strides": strides, "pads": pads, **more}
    defaults = {"strides": [1] * len(kernel), "pads": [0] * 2 * len(kernel)}
    defaults["dilations"] = [1] * len(kernel)
    defaults |= {"group": 1, "ceil_mode": 0, "count_include_pad": 0}
    if dilations is not None:
        attributes["dilations"] = dilations
    return g.spelled(draw, attributes, defaults)


def _conv(draw, g: Graph) -> None:
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
    _then_fusable(
        draw, g, g.add("Conv", inputs, g.float, (x.shape[0], filters, *out), **attributes)
    )


def _conv_transpose(draw, g: Graph) -> None:
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
    def build(draw, g: Graph) -> None:
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
                raise NotHere
            out.append(size)
        g.reduction = max(g.reduction, math.prod(kernel))
        attributes = _window_attributes(draw, g, kernel, strides, pads, **more)
        g.add(op, [x.name], g.float, (*x.shape[:2], *out), **attributes)

    return build


# The vocabulary, simplest first (Hypothesis shrinks towards the first): op -> its builder.
# What a target lacks (wgpu: Conv and the pools) is learned and no longer drawn.
OPS: dict[str, Callable] = {
    "Relu": unary("Relu"),
    "Add": _binary("Add"),
    "Mul": _binary("Mul"),
    "Sub": _binary("Sub"),
    "Sigmoid": unary("Sigmoid"),
    "Tanh": unary("Tanh"),
    "Erf": unary("Erf"),
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
    "Identity": unary("Identity"),
    "Conv": _conv,
    "MaxPool": _pool("MaxPool"),
    "AveragePool": _pool("AveragePool"),
    "LeakyRelu": unary("LeakyRelu", alpha=(0.01, 0.2)),
    "HardSigmoid": unary("HardSigmoid", alpha=(0.2, 0.3), beta=(0.5, 0.4)),
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
    "RotaryEmbedding": _rotary_embedding,
    "MultiHeadAttention": _multi_head_attention,
    "GroupQueryAttention": _group_query_attention,
    "Float32Island": _float32_island,
}
