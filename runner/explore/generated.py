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
IR_VERSION = 9  # what onnxruntime 1.16 and later read
MAX_NODES = 6
MAX_INPUTS = 3
DIMS = st.integers(1, 6)  # small: a dispatch's size still changes with them
EPSILONS = (1e-5, 1e-3, 0.1)  # LayerNormalization's, and the second layout's

FLOAT, INT32, BOOL = TensorProto.FLOAT, TensorProto.INT32, TensorProto.BOOL


@dataclass(frozen=True)
class Value:
    name: str
    dtype: int
    shape: tuple[int, ...]


class _Graph:
    """A graph while it is drawn: its values, nodes and constants (mutable: one draw only)."""

    def __init__(self) -> None:
        self.inputs: list[Value] = []
        self.values: list[Value] = []
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []
        self.consumed: set[str] = set()
        self.reduction = 1  # the longest sum or row any node reduces over (the tolerance's)

    def operand(self, draw, dtype: int = FLOAT, min_rank: int = 1, max_rank: int = 4) -> Value:
        """An existing value of `dtype` and rank, or a new graph input (while there is room)."""
        fits = [v for v in self.values if v.dtype == dtype and min_rank <= len(v.shape) <= max_rank]
        room = len(self.inputs) < MAX_INPUTS
        if fits and (not room or draw(st.booleans(), label="existing")):
            return draw(st.sampled_from(fits), label="operand")
        if not room:
            raise _NotHere
        rank = draw(st.integers(min_rank, max_rank), label="rank")
        shape = tuple(draw(DIMS, label="dim") for _ in range(rank))
        value = Value(f"x{len(self.inputs)}", dtype, shape)
        self.inputs.append(value)
        self.values.append(value)
        return value

    def constant(self, array: np.ndarray) -> str:
        name = f"c{len(self.constants)}"
        self.constants.append(numpy_helper.from_array(array, name))
        return name

    def add(self, op: str, inputs: list[str], dtype: int, shape, **attributes) -> Value:
        value = Value(f"t{len(self.nodes)}", dtype, tuple(int(d) for d in shape))
        self.nodes.append(
            helper.make_node(op, inputs, [value.name], name=f"n{len(self.nodes)}", **attributes)
        )
        self.consumed.update(inputs)
        self.values.append(value)
        return value


class _NotHere(Exception):
    """The op cannot be built on this graph (no operand fits, no room for a new input)."""


def _weights(draw, shape: tuple[int, ...]) -> np.ndarray:
    seed = draw(st.integers(0, 2**16), label="seed")
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(np.float32)


def _unary(op: str) -> Callable:
    def build(draw, g: _Graph) -> None:
        x = g.operand(draw)
        g.add(op, [x.name], FLOAT, x.shape)

    return build


def _gelu(draw, g: _Graph) -> None:
    x = g.operand(draw)
    approximate = draw(st.sampled_from(("none", "tanh")), label="approximate")
    g.add("Gelu", [x.name], FLOAT, x.shape, approximate=approximate)


def _binary(op: str) -> Callable:
    def build(draw, g: _Graph) -> None:
        a = g.operand(draw)
        # the other operand broadcasts: the same shape, ones in some dims, or fewer dims
        keep = draw(st.integers(0, len(a.shape)), label="broadcast rank")
        shape = tuple(
            1 if draw(st.booleans(), label="broadcast") else d
            for d in a.shape[len(a.shape) - keep :]
        )
        same = [v for v in g.values if v.dtype == FLOAT and v.shape == shape]
        if same and draw(st.booleans(), label="existing"):
            b = draw(st.sampled_from(same), label="operand").name
        else:
            b = g.constant(_weights(draw, shape))
        g.add(op, [a.name, b], FLOAT, np.broadcast_shapes(a.shape, shape))

    return build


def _cast(draw, g: _Graph) -> None:
    x = g.operand(draw)
    to = draw(st.sampled_from((INT32, BOOL)), label="to")
    # scaled first, so that truncation to an integer keeps something of each element
    scaled = g.add("Mul", [x.name, g.constant(np.float32(4.0))], FLOAT, x.shape)
    g.add("Cast", [scaled.name], to, x.shape, to=to)


def _softmax(draw, g: _Graph) -> None:
    x = g.operand(draw)
    axis = draw(st.sampled_from((-1, len(x.shape) - 1)), label="axis")  # one axis, two spellings
    g.reduction = max(g.reduction, x.shape[-1])
    g.add("Softmax", [x.name], FLOAT, x.shape, axis=axis)


def _transpose(draw, g: _Graph) -> None:
    x = g.operand(draw, min_rank=2)
    perm = draw(st.permutations(range(len(x.shape))), label="perm")
    g.add("Transpose", [x.name], FLOAT, [x.shape[p] for p in perm], perm=list(perm))


def _reduce(op: str) -> Callable:
    def build(draw, g: _Graph) -> None:
        x = g.operand(draw)
        count = draw(st.integers(1, len(x.shape)), label="axes")  # trailing axes
        axes = list(range(len(x.shape) - count, len(x.shape)))
        keep = draw(st.sampled_from((1, 0)), label="keepdims")
        shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
        g.reduction = max(g.reduction, math.prod(x.shape[a] for a in axes))
        axes_input = g.constant(np.array(axes, np.int64))
        g.add(op, [x.name, axes_input], FLOAT, shape, keepdims=keep)

    return build


def _matmul(draw, g: _Graph) -> None:
    a = g.operand(draw, min_rank=2)
    k, n = a.shape[-1], draw(DIMS, label="n")
    b = g.constant(_weights(draw, (k, n)))
    g.reduction = max(g.reduction, k)
    g.add("MatMul", [a.name, b], FLOAT, (*a.shape[:-1], n))


def _gemm(draw, g: _Graph) -> None:
    a = g.operand(draw, min_rank=2, max_rank=2)
    trans_a = draw(st.sampled_from((0, 1)), label="transA")
    trans_b = draw(st.sampled_from((0, 1)), label="transB")
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = draw(DIMS, label="n")
    b = g.constant(_weights(draw, (n, k) if trans_b else (k, n)))
    inputs = [a.name, b]
    if draw(st.booleans(), label="bias"):
        inputs.append(g.constant(_weights(draw, (n,))))
    alpha = draw(st.sampled_from((1.0, 0.5)), label="alpha")
    g.reduction = max(g.reduction, k)
    g.add("Gemm", inputs, FLOAT, (m, n), transA=trans_a, transB=trans_b, alpha=alpha)


def _layer_norm(draw, g: _Graph) -> None:
    x = g.operand(draw)
    width = x.shape[-1]
    scale, bias = g.constant(_weights(draw, (width,))), g.constant(_weights(draw, (width,)))
    epsilon = draw(st.sampled_from(EPSILONS), label="epsilon")
    g.reduction = max(g.reduction, width)
    g.add("LayerNormalization", [x.name, scale, bias], FLOAT, x.shape, axis=-1, epsilon=epsilon)


def _concat(draw, g: _Graph) -> None:
    a = g.operand(draw)
    axis = draw(st.integers(-len(a.shape), len(a.shape) - 1), label="axis")
    other = list(a.shape)
    other[axis] = draw(DIMS, label="dim")
    b = g.constant(_weights(draw, tuple(other)))
    shape = list(a.shape)
    shape[axis] += other[axis]
    g.add("Concat", [a.name, b], FLOAT, shape, axis=axis)


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
    g.add("Slice", [x.name, *ints], FLOAT, shape)


def _gather(draw, g: _Graph) -> None:
    x = g.operand(draw)
    axis = draw(st.integers(0, len(x.shape) - 1), label="axis")
    count = draw(st.integers(1, 4), label="indices")
    indices = draw(st.lists(st.integers(0, x.shape[axis] - 1), min_size=count, max_size=count))
    shape = (*x.shape[:axis], count, *x.shape[axis + 1 :])
    g.add("Gather", [x.name, g.constant(np.array(indices, np.int64))], FLOAT, shape, axis=axis)


def _expand(draw, g: _Graph) -> None:
    x = g.operand(draw, max_rank=3)
    lead = draw(st.integers(0, 1), label="new dims")
    shape = [draw(DIMS, label="dim") for _ in range(lead)]
    shape += [draw(DIMS, label="dim") if d == 1 else d for d in x.shape]
    g.add("Expand", [x.name, g.constant(np.array(shape, np.int64))], FLOAT, shape)


def _where(draw, g: _Graph) -> None:
    x = g.operand(draw)
    positive = g.add("Greater", [x.name, g.constant(np.float32(0.0))], BOOL, x.shape)
    other = g.constant(_weights(draw, x.shape))
    g.add("Where", [positive.name, x.name, other], FLOAT, x.shape)


def _reshape(draw, g: _Graph) -> None:
    x = g.operand(draw)
    if len(x.shape) > 1 and draw(st.booleans(), label="merge"):
        shape = [x.shape[0] * x.shape[1], *x.shape[2:]]  # the first two dims as one
    else:
        shape = [1, *x.shape]  # a leading unit dim
    g.add("Reshape", [x.name, g.constant(np.array(shape, np.int64))], FLOAT, shape)


def _spatial(draw, g: _Graph, channels_from_weights: bool = False):
    """An NCHW operand and the drawn window: kernel, strides, pads, dilations, output dims."""
    x = g.operand(draw, min_rank=4, max_rank=4)
    kernel = [draw(st.integers(1, min(3, d)), label="kernel") for d in x.shape[2:]]
    strides = [draw(st.integers(1, 2), label="stride") for _ in kernel]
    pads = [draw(st.integers(0, k - 1), label="pad") for k in kernel] * 2
    dilations = [1, 1]
    if channels_from_weights:
        dilations = [
            draw(st.integers(1, 2), label="dilation") if (k - 1) * 2 < d else 1
            for k, d in zip(kernel, x.shape[2:], strict=True)
        ]
    out = [
        (d + pads[i] + pads[i + 2] - dilations[i] * (k - 1) - 1) // strides[i] + 1
        for i, (d, k) in enumerate(zip(x.shape[2:], kernel, strict=True))
    ]
    return x, kernel, strides, pads, dilations, out


def _conv(draw, g: _Graph) -> None:
    x, kernel, strides, pads, dilations, out = _spatial(draw, g, channels_from_weights=True)
    channels = x.shape[1]
    group = draw(st.sampled_from([d for d in (1, channels) if channels % d == 0]), label="group")
    filters = group * draw(st.integers(1, 2), label="filters per group")
    weights = g.constant(_weights(draw, (filters, channels // group, *kernel)))
    inputs = [x.name, weights]
    if draw(st.booleans(), label="bias"):
        inputs.append(g.constant(_weights(draw, (filters,))))
    g.reduction = max(g.reduction, channels // group * math.prod(kernel))
    attributes = {"kernel_shape": kernel, "strides": strides, "pads": pads, "group": group}
    g.add("Conv", inputs, FLOAT, (x.shape[0], filters, *out), dilations=dilations, **attributes)


def _pool(op: str) -> Callable:
    def build(draw, g: _Graph) -> None:
        x, kernel, strides, pads, _, out = _spatial(draw, g)
        g.reduction = max(g.reduction, math.prod(kernel))
        g.add(op, [x.name], FLOAT, (*x.shape[:2], *out), kernel_shape=kernel, strides=strides)
        g.nodes[-1].attribute.append(helper.make_attribute("pads", pads))

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
}


@dataclass(frozen=True)
class GeneratedModel:
    """A drawn model: its ONNX bytes, the ops it holds, its layouts and its tolerance."""

    model: bytes
    ops: tuple[str, ...]  # of its nodes, in node order (the Mul before a Cast included)
    layouts: tuple[Mapping[str, Any], ...]  # a suite's `layouts:` entries; () the default only
    tolerance: Tolerance

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


class Coverage:
    """The ops and attribute values of the models added so far (mutable: explore adds each
    model it judges), as "how much of the vocabulary did a budget try" is measured."""

    def __init__(self) -> None:
        self.nodes: collections.Counter[str] = collections.Counter()
        self.values: dict[str, set[str]] = collections.defaultdict(set)

    def add(self, model: bytes) -> None:
        for node in onnx.load_from_string(model).graph.node:
            self.nodes[node.op_type] += 1
            self.values[node.op_type].update(
                f"{a.name}={helper.get_attribute_value(a)!r}" for a in node.attribute
            )

    def ops(self) -> tuple[OpCovered, ...]:
        """Each op added, the most drawn first."""
        return tuple(
            OpCovered(op, count, tuple(sorted(self.values[op])))
            for op, count in self.nodes.most_common()
        )


def tolerance(reduction: int) -> Tolerance:
    """What a generated model's outputs may differ from onnxruntime CPU's by: f32 kernels that
    sum `reduction` terms of inputs in [-1, 1] (products of two such) drift by a few ulps per
    term, so 2e-5 per term and at least 1e-4 absolute, or a ratio within 1e-4 (ORT-web's op-test
    rule, with its 1e-3 and 1e-5 scaled to what twins differ by: Gelu's two approximations part
    by 1.5e-4 at 1)."""
    return Tolerance(abs=max(1e-4, 2e-5 * reduction), rel=1e-4)


@st.composite
def generated_models(draw, vocabulary: tuple[str, ...]) -> GeneratedModel:
    """A valid model of 1 to ``MAX_NODES`` ops of `vocabulary` (some of them twins), with a
    second layout when it has a LayerNormalization and the draw says so."""
    g = _Graph()
    drawn: list[str] = []
    # one "more?" before each op but the first, as Hypothesis draws lists: a node's choices are
    # one block, which shrinking deletes whole
    for _ in range(MAX_NODES):
        if drawn and not draw(st.booleans(), label="more"):
            break
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
        initializer=g.constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    layouts: tuple[Mapping[str, Any], ...] = ()
    norms = [n for n in g.nodes if n.op_type == "LayerNormalization"]
    if norms and draw(st.booleans(), label="second layout"):
        first = next(a.f for a in norms[0].attribute if a.name == "epsilon")
        epsilon = draw(st.sampled_from([e for e in EPSILONS if e != first]), label="layout eps")
        layouts = ({"label": "default"}, {"label": f"eps-{epsilon:g}", "values": {"eps": epsilon}})
    ops = tuple(n.op_type for n in g.nodes)
    return GeneratedModel(model.SerializeToString(), ops, layouts, tolerance(g.reduction))


def without_bystanders(generated: GeneratedModel, culprit: str) -> GeneratedModel | None:
    """`generated` without the nodes the node named `culprit` neither reads from nor feeds,
    their outputs, inputs and constants gone with them; None when every node is one of those it
    reads or feeds (or no node has that name). A second layout stays where a LayerNormalization
    does."""
    model = onnx.load_from_string(generated.model)
    graph = model.graph
    nodes = list(graph.node)
    found = [n for n in nodes if n.name == culprit]
    if not found:
        return None
    producers = {out: n for n in nodes for out in n.output}
    reads = set()  # the culprit and every node it reads from
    pending = list(found)
    while pending:
        node = pending.pop()
        if node.name not in reads:
            reads.add(node.name)
            pending += [producers[name] for name in node.input if name in producers]
    feeds, values = set(), set(found[0].output)  # every node fed by the culprit's outputs
    for node in nodes:  # topological
        if values & set(node.input):
            feeds.add(node.name)
            values.update(node.output)
    kept = [n for n in nodes if n.name in reads | feeds]
    if len(kept) == len(nodes):
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
    return GeneratedModel(pruned_model.SerializeToString(), ops, layouts, generated.tolerance)


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
