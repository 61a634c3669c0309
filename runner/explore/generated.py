"""Models explore draws itself: small ONNX graphs from an op vocabulary, by Hypothesis strategies.

A drawn model is valid by construction (each op builder of ``runner.explore.vocabulary`` picks
operands whose shapes and types it takes, and computes what it makes; ``onnx.checker`` with full
shape inference confirms it), and puts pressure on purpose on what a WebGPU EP keys its caches
by:

- key pressure: a later node takes, as often as not, an op the graph already has, with its
  attributes and operands drawn again, so twins of one op that differ only in an attribute
  (Gelu's ``approximate``, Cast's ``to``, a reduction's ``keepdims``), an operand's rank or a
  broadcast share one graph, one session and one device's program cache;
- layout pressure (the seed's class): a model with a LayerNormalization may come with a second
  layout of other epsilon, the same shapes and another constant, which the case matrix runs
  back to back under capture on one device (``runner.workload.variants``);
- data-layout pressure: where the target's sessions take the EP option ``preferredLayout``, a
  model with an op the EP runs transposed in NHWC (``DATA_LAYOUT_OPS``) may come with a layout
  whose sessions ask for NCHW: twins of one op, in both data layouts, in two live sessions
  sharing one device's program cache.

A drawn model is written as a suite of its own (``GeneratedSuite``): the model file, its layouts,
the one target and the tolerance its ops and sizes call for (``tolerance``). Its cases are
judged exactly as a suite's are (``runner.step``).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import yaml
from hypothesis import reject
from hypothesis import strategies as st
from onnx import helper

from runner.explore.vocabulary import (
    ELEMENTS,
    EPSILONS,
    FLOAT,
    FLOAT16,
    MAX_NODES,
    MICROSOFT,
    OPS,
    WHOLE_DRAW,
    Graph,
    Narrowing,
    NotHere,
)
from runner.measure import Tolerance

OPSET = 20  # Gelu's; ReduceMean and ReduceMax take axes as an input, LayerNormalization exists
# The opsets a drawn model may import, the first what shrinking goes to: 18 is the last before
# AveragePool's and Pad's 19, and an op's kernel may differ by opset (the C++ EP registered
# AveragePool up to 18 only until 1.29.0: 19 and later ran on the CPU); no Gelu before 20
OPSETS = (OPSET, 18)
IR_VERSION = 9  # what onnxruntime 1.16 and later read
SIZE_BUCKETS = (6, 64, 256, ELEMENTS)  # what coverage counts a model's widest input dim in
FLOAT16_ABS = 2.0**-7  # a float16 model's tolerance, absolute and relative (``tolerance``)

# Ops the WebGPU EPs run in NHWC, between Transposes, unless a session prefers NCHW
DATA_LAYOUT_OPS = frozenset(
    {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "InstanceNormalization"}
)
OTHER_DATA_LAYOUT = {"label": "NCHW", "preferred_layout": "NCHW"}  # the builds' default: NHWC

# The float type a model's float tensors take, by the name `--dtypes` spells it: the first is
# what shrinking goes towards
DTYPES = {"float32": FLOAT, "float16": FLOAT16}


@dataclass(frozen=True)
class GeneratedModel:
    """A drawn model: its ONNX bytes, the ops it holds, its layouts and its tolerance."""

    model: bytes
    ops: tuple[str, ...]  # of its nodes, in node order (the Mul before a Cast included)
    # the vocabulary entry each node was drawn as, in node order: a DecomposedLayerNorm's
    # ReduceMean, Sub, Pow... are its, and coverage counts them so
    entries: tuple[str, ...]
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
    """One op of the vocabulary in the models drawn: how many nodes were drawn as it, and every
    attribute value they held (``name=value``; ``Op.name=value`` for a node of another op type,
    as in a DecomposedLayerNorm), what twins of the op differed by."""

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
    if any(layout.get("preferred_layout") for layout in generated.layouts):
        found.append("two data layouts")
    if generated.dtype == "float16" and any(
        node.op_type == "Cast" and helper.get_attribute_value(node.attribute[0]) == FLOAT
        for node in graph.node
    ):
        found.append("mixed float16/float32")
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
        for node, entry in zip(graph.node, generated.entries, strict=True):
            self.nodes[entry] += 1
            own = "" if node.op_type == entry else f"{node.op_type}."
            self.values[entry].update(
                f"{own}{a.name}={helper.get_attribute_value(a)!r}" for a in node.attribute
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
    preferred_layouts: bool = False,
    first: str | None = None,
    narrowing: Narrowing = WHOLE_DRAW,
) -> GeneratedModel:
    """A valid model of 1 to ``MAX_NODES`` ops of `vocabulary` (some of them twins), half of
    them starting with the op `first` where one is given, its float tensors of one of
    `dtypes`, importing one of `opsets`, with a second layout when it has a LayerNormalization
    and the draw says so, and, with `preferred_layouts` (the target's sessions take that
    option), one whose sessions prefer NCHW when it has an op of ``DATA_LAYOUT_OPS`` and the
    draw says so; within what `narrowing` leaves."""
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    opset = draw(st.sampled_from(opsets), label="opset")
    g = Graph(DTYPES[dtype], opset, narrowing)
    drawn: list[str] = []
    entries: list[str] = []  # each node's
    # one "more?" before each op but the first, as Hypothesis draws lists: a node's choices are
    # one block, which shrinking deletes whole. Yes three times in four (2.9 nodes a model, 1.9
    # at one in two): a bug of two ops in one graph (twin Ands, a Conv then Tanh) comes 4 times
    # sooner, and each model, which costs a session, tries more of the vocabulary.
    for attempt in range(MAX_NODES):
        if len(g.nodes) >= MAX_NODES or len(drawn) >= narrowing.max_ops:
            break  # an op of several nodes (a decomposed LayerNorm's 7) leaves less room
        if drawn and not draw(st.integers(0, 3), label="more"):
            break
        # half the models start with `first`; shrinking may still draw the first op instead
        if attempt == 0 and first is not None and draw(st.booleans(), label="first given"):
            op = first
        else:
            again = drawn and draw(st.booleans(), label="twin")
            op = draw(st.sampled_from(drawn if again else vocabulary), label="op")
        try:
            OPS[op](draw, g)
        except NotHere:  # the graph has no room for it: one node fewer
            continue
        finally:  # a builder refused part way keeps the nodes it added
            entries += [op] * (len(g.nodes) - len(entries))
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
        own = next((a.f for a in norms[0].attribute if a.name == "epsilon"), 1e-5)
        epsilon = draw(st.sampled_from([e for e in EPSILONS if e != own]), label="layout eps")
        layouts = ({"label": "default"}, {"label": f"eps-{epsilon:g}", "values": {"eps": epsilon}})
    ops = tuple(n.op_type for n in g.nodes)
    if (
        preferred_layouts
        and DATA_LAYOUT_OPS & set(ops)
        and draw(st.booleans(), label="other data layout")
    ):
        layouts = (*(layouts or ({"label": "default"},)), OTHER_DATA_LAYOUT)
    return GeneratedModel(
        model.SerializeToString(),
        ops,
        tuple(entries),
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
    entries = tuple(
        entry
        for node, entry in zip(graph.node, generated.entries, strict=True)
        if node.name in kept_names
    )
    layouts = generated.layouts if "LayerNormalization" in ops else ()
    return dataclasses.replace(
        generated,
        model=pruned_model.SerializeToString(),
        ops=ops,
        entries=entries,
        layouts=layouts,
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
