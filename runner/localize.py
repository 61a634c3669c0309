"""Point at the first node whose output went wrong, and say what it computes.

For a failing case, the model is rewritten with every floating-point intermediate exposed as a
graph output and run again on the same backend, in a layout-change sequence of its own: first the
capture cases that preceded it in its sequence (so that whatever went stale is stale again), then
the case itself eager and with capture. Walking the nodes in topological order, the first output
that diverges names the node: capture against eager for a capture bug, eager against the oracle
for a kernel bug.

A node whose output holds an earlier value unchanged (a view or a copy: a Reshape, an Identity,
a Transpose that moves no element, two Transposes that cancel) is told by those values on
onnxruntime CPU, of an op that moves elements and computes none (``MOVERS``): an Or with false
computes its input again, but runs a kernel that writes its output. One made a graph output only
by this rewrite is never named: onnxruntime's WebGPU builds replay a copy's graph output stale
under capture (suites/bugs/ort-reshape-output-stale.yaml), so exposing it would name that, not
the bug. One the model outputs itself is named, marked a copy. Exposing may also hide a capture
bug (a copy's output went stale only while the value it copies was no graph output: JSEP's
Identity beside a Mul; an Or onnxruntime runs on the CPU beside a Mul), and so may a kernel bug
of a fusion (a Conv and the Tanh onnxruntime fuses into it: its output exposed, the Conv is no
longer fused): when the rerun passes, the model is rerun as it ran, and its own outputs are
walked, the node found marked ``hidden_by_exposing`` (its inputs went unchecked: a node before
it may have made the wrong value). A node whose captured output went wrong while it reads a
copy the rewrite left out is run alone too, on onnxruntime CPU's inputs run by run: where it
replays right there, the copy is named (the C++ EP replays any node stale that reads a Reshape
of a graph input).

The first wrong output is where a wrong value shows, not always where it was made: a kernel may
write into a buffer another node's output holds (JSEP's SkipSimplifiedLayerNormalization with a
bias), or a node may turn a tiny difference in its inputs into a large one. So a node named
against onnxruntime CPU is run alone, on inputs onnxruntime CPU computed; if it is right there,
the first node that is wrong alone, a copy the rewrite left out included, is named instead
(``seen_in`` keeps where it showed), and if none is, the named node is kept, marked wrong only
beside the others (``alone: passes``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from runner.backends.base import Backend, CaseWork
from runner.compare import compare
from runner.matrix import Case
from runner.measure import Tolerance
from runner.oracle import ReferenceCache, cpu_session
from runner.schedule import BASE, Feed, Variant
from runner.workload import Workload

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}
# What localization explains: capture bugs against eager, kernel bugs against the oracle.
CAPTURE_VERDICTS = frozenset({"capture-mismatch", "stale-layout", "stale-input"})
LOCALIZED_VERDICTS = CAPTURE_VERDICTS | {"reference-mismatch"}
SHOWN_ELEMENTS = 3  # the worst elements a divergence lists, expected against actual
SHOWN_CONSTANT = 8  # the most elements of a constant input a divergence lists
# ops that move or view elements and compute none: where one's output holds an earlier value,
# onnxruntime may leave it no kernel (a copy, an alias, a node optimized away)
MOVERS = frozenset(
    {
        "Concat", "DepthToSpace", "Dropout", "Expand", "Flatten", "Gather", "GatherElements",
        "Identity", "Pad", "Reshape", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile",
        "Transpose", "Unsqueeze",
    }
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ExposedNode:
    output: str
    op_type: str
    name: str
    inputs: tuple[str, ...]
    attributes: Mapping[str, Any]
    own: bool  # an output of the model itself, not exposed by the rewrite
    copy: bool  # its output holds an earlier value unchanged, on onnxruntime CPU


@dataclasses.dataclass(frozen=True)
class Exposed:
    workload: Workload
    nodes: tuple[ExposedNode, ...]  # topological: the model's outputs and those exposed
    unexposed: tuple[ExposedNode, ...]  # the copies the rewrite leaves alone (run alone still)
    initializers: Mapping[str, np.ndarray]
    inferred: Mapping[str, dict[str, Any]]  # a value's shape and dtype, by shape inference


def expose_intermediates(workload: Workload) -> Exposed:
    """The workload with every float node output that depends on a graph input also a graph
    output, but copies' (a copy the model outputs itself stays one, and is walked as every own
    output is, of any type). Which outputs are copies onnxruntime CPU says, on the model with
    every such output exposed, before the backend sees any."""
    model = onnx.load_from_string(workload.model)
    inferred = onnx.shape_inference.infer_shapes(model)
    values = _every_value(workload, BASE)  # onnxruntime CPU's, which knows the contrib ops
    types = {name: helper.np_dtype_to_tensor_dtype(v.dtype) for name, v in values.items()}
    existing = {o.name for o in model.graph.output}
    varying = _fed_by_inputs(model.graph)
    walked = [
        (node, output)
        for node in model.graph.node
        if node.op_type != "Constant"
        for output in node.output
        if output in varying and (types.get(output) in FLOAT_TYPES or output in existing)
    ]
    moved = {o for node, o in walked if node.op_type in MOVERS}
    copies = _copies(values, list(workload.inputs), [o for _, o in walked], moved)
    every = [
        ExposedNode(
            output,
            node.op_type,
            node.name,
            tuple(node.input),
            {a.name: plain_attribute(helper.get_attribute_value(a)) for a in node.attribute},
            output in existing,
            output in copies,
        )
        for node, output in walked
    ]
    nodes = tuple(node for node in every if node.own or not node.copy)
    unexposed = tuple(node for node in every if not node.own and node.copy)
    exposed = _with_outputs(workload, model, {n.output for n in nodes} - existing, types)
    initializers = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    graph = inferred.graph
    described = {
        v.name: {
            "shape": [d.dim_value if d.HasField("dim_value") else d.dim_param
                      for d in v.type.tensor_type.shape.dim],
            "dtype": helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name,
        }
        for v in (*graph.value_info, *graph.input, *graph.output)
        if v.type.tensor_type.elem_type
    }  # fmt: skip
    return Exposed(exposed, nodes, unexposed, initializers, described)


def _with_outputs(
    workload: Workload, model: onnx.ModelProto, outputs: set[str], types: Mapping[str, int]
) -> Workload:
    """`workload` whose model also outputs `outputs`, sorted by name, so that the variants of
    one model (whose node order a layout may change) expose the same outputs in the same
    order, as the originals share theirs."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for output in sorted(outputs):
        model.graph.output.append(helper.make_tensor_value_info(output, types[output], None))
    return dataclasses.replace(
        workload,
        key=workload.key + "+intermediates",
        model=model.SerializeToString(),
        output_names=tuple(o.name for o in model.graph.output),
    )


def _every_output(model: onnx.ModelProto) -> bytes:
    """`model` with every node output a graph output, those it adds untyped: onnxruntime infers
    their types, where onnx's shape inference does not know the contrib ops (a
    SkipLayerNormalization's output has no type there)."""
    probe = onnx.ModelProto.FromString(model.SerializeToString())
    named = {o.name for o in probe.graph.output}
    for output in (o for node in probe.graph.node for o in node.output):
        if output and output not in named:
            probe.graph.output.add().name = output
            named.add(output)
    return probe.SerializeToString()


def _every_value(workload: Workload, variant: Variant) -> dict[str, np.ndarray]:
    """Every value `workload`'s model holds for `variant`'s inputs on onnxruntime CPU: its
    inputs, initializers and every node's outputs."""
    model = onnx.load_from_string(workload.model)
    session = cpu_session(_every_output(model), workload.shape_of(variant))
    inputs = workload.inputs_of(variant)
    names = [o.name for o in session.get_outputs()]
    computed = dict(zip(names, session.run(names, dict(inputs)), strict=True))
    initializers = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return {**initializers, **inputs, **computed}


def _copies(
    values: Mapping[str, np.ndarray], inputs: list[str], walked: list[str], moved: set[str]
) -> set[str]:
    """The outputs among `walked` (topological) made by a mover (`moved`) that hold the values of
    a graph input or of an earlier output, element for element in order and of one type, in
    onnxruntime CPU's `values`: what a view or a copy computes, whichever mover (or pair that
    cancel) makes it."""
    earlier = [np.ravel(values[name]) for name in inputs]
    copies = set()
    for output in walked:
        value = np.ravel(values[output])
        if output in moved and any(
            v.dtype == value.dtype and np.array_equal(value, v) for v in earlier
        ):
            copies.add(output)
        earlier.append(value)
    return copies


def _fed_by_inputs(graph: onnx.GraphProto) -> set[str]:
    """The values that depend on a graph input. The others are folded into constants before a
    session runs (onnxruntime does), so exposing one only tests how the backend outputs a
    constant, as exposing a copy does."""
    initializers = {t.name for t in graph.initializer}
    varying = {i.name for i in graph.input if i.name not in initializers}
    for node in graph.node:  # topological, as ONNX requires
        if any(name in varying for name in node.input):
            varying.update(name for name in node.output if name)
    return varying


def plain_attribute(value: Any) -> Any:
    """An attribute's value (``helper.get_attribute_value``) as JSON holds it: a string as
    text, a tensor or a graph by its kind."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list):
        return [plain_attribute(v) for v in value]
    if isinstance(value, int | float | str):
        return value
    return type(value).__name__


def first_divergent_node(
    backend: Backend,
    case: Case,
    workload: Workload,
    verdicts: frozenset[str],
    prefix: Sequence[tuple[Case, Workload]] = (),
) -> dict | None:
    """The first node whose output diverges, or None when the rerun does not reproduce it (a
    capture bug the exposed rerun hides is looked for among the model's own outputs, as it ran:
    the module's docstring)."""
    exposed = expose_intermediates(workload)
    hidden = exposed.workload.output_names != workload.output_names  # what exposing may do
    own = [node for node in exposed.nodes if node.own]
    if not (case.capture and verdicts & CAPTURE_VERDICTS):
        found = _rerun(backend, case, exposed, exposed.workload, exposed.nodes, (), capture=False)
        if found is None and hidden:  # a fusion exposing undid (a Conv and its activation)
            found = _rerun(backend, case, exposed, workload, own, (), capture=False)
            found = found and ({**found[0], "hidden_by_exposing": True}, found[1])
        if found is None:
            return None
        return _checked_alone(backend, case.eager_twin(), exposed, found[1], found[0])
    earlier = [(c, expose_intermediates(w).workload) for c, w in prefix]
    found = _rerun(backend, case, exposed, exposed.workload, exposed.nodes, earlier, capture=True)
    if found is not None:
        return _read_copy_replays(backend, case, exposed, found[0]) or found[0]
    if not hidden:
        return None
    found = _rerun(backend, case, exposed, workload, own, prefix, capture=True)
    return {**found[0], "hidden_by_exposing": True} if found else None


def _read_copy_replays(
    backend: Backend, case: Case, exposed: Exposed, found: dict[str, Any]
) -> dict[str, Any] | None:
    """The copy `found` (a node whose captured output went wrong) reads, named in its place,
    where `found` alone, on onnxruntime CPU's inputs run by run, replays right under capture:
    the C++ EP replays a node that reads a Reshape of a graph input stale, whatever the node (a
    Relu, a Gelu, a QuickGelu...), and each would be a root cause of its own. None where it
    reads no copy, or fails alone too (or cannot run alone)."""
    copies = {node.output: node for node in exposed.unexposed}
    read = [copies[i["name"]] for i in found["inputs"] if i["name"] in copies]
    if not read:
        return None
    model = onnx.load_from_string(exposed.workload.model)
    [node] = [n for n in model.graph.node if n.name == found["name"]]
    workload = exposed.workload
    variants = (BASE, *workload.variants)
    values = {variant: _every_value(workload, variant) for variant in variants}
    varying = _fed_by_inputs(model.graph)
    alone = _alone(model, node, varying, values, workload.schedule, workload.preferred_layout)
    eager = backend.run(CaseWork(case.eager_twin(), alone, closes_sequence=False))
    captured = backend.run(CaseWork(case, alone, opens_sequence=False))
    if eager.status != "ok" or captured.status != "ok":
        return None
    for want, got in zip(eager.runs, captured.runs, strict=False):
        if not all(compare(got[o], want[o], case.tolerance).ok for o in alone.output_names):
            return None
    copy = read[0]
    return {
        **found,
        "op_type": copy.op_type,
        "name": copy.name,
        "output": copy.output,
        "copy": True,
        "attributes": dict(copy.attributes),
        "inputs": [_described(name, values[BASE], exposed) for name in copy.inputs],
        "seen_in": f"{found['op_type']} {found['output']}",
        "alone": "replays",
    }


def _rerun(
    backend: Backend,
    case: Case,
    exposed: Exposed,
    workload: Workload,
    nodes: Sequence[ExposedNode],
    earlier: Sequence[tuple[Case, Workload]],
    capture: bool,
) -> tuple[dict[str, Any], Variant] | None:
    """`workload` run eager and, for a capture bug, after the `earlier` captures and with
    capture: the first of `nodes` that diverges in the first run that went wrong (capture
    against eager, or eager against onnxruntime CPU), and that run's input variant."""
    works = [*earlier, (case.eager_twin(), workload)] + ([(case, workload)] if capture else [])
    ran = [
        backend.run(CaseWork(c, w, opens_sequence=i == 0, closes_sequence=i == len(works) - 1))
        for i, (c, w) in enumerate(works)
    ]
    eager, suspect = ran[len(earlier)], ran[-1]
    if eager.status != "ok" or suspect.status != "ok":
        return None
    feeds = workload.feeds(len(suspect.runs))
    references = ReferenceCache(None).references(workload)  # one CPU session a shape
    for index, outputs in enumerate(suspect.runs):
        variant = feeds[min(index, len(feeds) - 1)].variant
        cpu = references[variant]
        if capture:
            if index >= len(eager.runs):
                break
            want, against = eager.runs[index], "eager"
        else:
            want, against = cpu, "onnxruntime CPU"
        values = {**workload.inputs_of(variant), **cpu}
        divergent = _first_divergence(exposed, nodes, outputs, want, values, case.tolerance)
        if divergent is not None:
            return {**divergent, "against": against, "run": index + 1}, variant
    return None


def _checked_alone(
    backend: Backend, case: Case, exposed: Exposed, variant: Variant, found: dict[str, Any]
) -> dict[str, Any]:
    """`found`, a node wrong against onnxruntime CPU, run alone on onnxruntime CPU's inputs:
    marked ``alone: fails`` if it is wrong there too; else the first node, in topological
    order, that is wrong alone, with ``seen_in`` naming where the wrong values showed; else
    `found` marked ``alone: passes`` (module docstring). The copies exposing left out are run
    alone too (eager: no stale replay to fear), since a copy's kernel may write wrong values
    that only its readers show (JSEP's rank-1 Transpose). A node that cannot run alone (the
    backend errs on it) tells nothing."""
    values = _every_value(exposed.workload, variant)
    model = onnx.load_from_string(exposed.workload.model)
    producer = {out: i for i, node in enumerate(model.graph.node) for out in node.output}
    walked: dict[int, list[ExposedNode]] = {}  # a node's walked outputs, by its index
    for node in (*exposed.nodes, *exposed.unexposed):
        walked.setdefault(producer[node.output], []).append(node)
    named = producer[found["output"]]
    varying = _fed_by_inputs(model.graph)
    for index in sorted(walked, key=lambda i: i != named):  # the named node first
        node = model.graph.node[index]
        wrong = _wrong_alone(backend, case, model, node, varying, walked[index], values, exposed)
        if index == named and wrong is None:
            return found  # it cannot run alone
        if wrong:
            if index == named:
                return {**found, "alone": "fails"}
            seen_in = f"{found['op_type']} {found['output']}"
            return {**wrong, "against": found["against"], "run": found["run"], "alone": "fails",
                    "seen_in": seen_in}  # fmt: skip
    return {**found, "alone": "passes"}


def _wrong_alone(
    backend: Backend,
    case: Case,
    model: onnx.ModelProto,
    node: onnx.NodeProto,
    varying: set[str],
    outputs: Sequence[ExposedNode],
    values: Mapping[str, np.ndarray],
    exposed: Exposed,
) -> dict[str, Any] | None:
    """How `node` of `model`, run alone on `backend` on onnxruntime CPU's `values` for its
    inputs (those not `varying` as constants), differs from onnxruntime CPU in its walked
    `outputs`: {} when it does not, None when the backend could not run it."""
    workload = _alone(
        model, node, varying, {BASE: values}, preferred_layout=exposed.workload.preferred_layout
    )
    # a sequence of its own: where sequences start afresh (explore's ort-web pages), nothing
    # the failing model compiled serves it (on JSEP 1.17.0, a Relu run alone after a model with
    # a rank-1 Transpose was wrong in the same instance and right in a new one)
    ran = backend.run(CaseWork(case, workload))
    if ran.status != "ok" or not ran.runs:
        return None
    divergent = _first_divergence(exposed, outputs, ran.runs[0], values, values, case.tolerance)
    return divergent or {}


def _alone(
    model: onnx.ModelProto,
    node: onnx.NodeProto,
    varying: set[str],
    values: Mapping[Variant, Mapping[str, np.ndarray]],
    schedule: tuple[Feed, ...] = (),
    preferred_layout: str | None = None,
) -> Workload:
    """`node` of `model` alone: its inputs that vary (`varying`) graph inputs holding
    onnxruntime CPU's `values` for each input variant (BASE's first), the others constants;
    run by `schedule`, in sessions preferring the failing case's data layout."""
    base = values[BASE]
    names = list(dict.fromkeys(name for name in node.input if name))
    fed = [name for name in names if name in varying]

    def described(name: str) -> onnx.ValueInfoProto:
        value = np.asarray(base[name])
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape
        )

    graph = helper.make_graph(
        [node],
        "alone",
        [described(name) for name in fed],
        [described(name) for name in node.output if name],
        [numpy_helper.from_array(np.asarray(base[n]), n) for n in names if n not in varying],
    )
    alone = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    data = alone.SerializeToString()
    return Workload(
        key=hashlib.sha256(data).hexdigest() + "+alone",
        model=data,
        inputs={name: base[name] for name in fed},
        output_names=tuple(o.name for o in graph.output),
        shape={},
        preferred_layout=preferred_layout,
        schedule=schedule,
        variants={
            variant: {name: held[name] for name in fed}
            for variant, held in values.items()
            if variant != BASE
        },
    )


def _first_divergence(
    exposed: Exposed,
    nodes: Sequence[ExposedNode],
    got: Mapping[str, Any],
    want: Mapping[str, Any],
    values: Mapping[str, np.ndarray],
    tolerance: Tolerance,
) -> dict[str, Any] | None:
    """The first of `nodes` (topological) whose output in `got` differs from `want`."""
    for node in nodes:
        if node.output not in got or node.output not in want:
            continue
        result = compare(got[node.output], want[node.output], tolerance)
        if not result.ok:
            return {
                "op_type": node.op_type,
                "name": node.name,
                "output": node.output,
                "max_abs": result.max_abs if result.max_abs != float("inf") else None,
                "mismatched": result.mismatched,
                "total": result.total,
                "copy": node.copy,
                "attributes": dict(node.attributes),
                "inputs": [_described(name, values, exposed) for name in node.inputs],
                "elements": _worst_elements(got[node.output], want[node.output]),
            }
    return None


def _described(name: str, values: Mapping[str, np.ndarray], exposed: Exposed) -> dict[str, Any]:
    """An input's name, shape and type; a small constant's values too (a Slice's steps)."""
    if name in values:
        value = np.asarray(values[name])
        return {"name": name, "shape": list(value.shape), "dtype": value.dtype.name}
    if name not in exposed.initializers:  # a value the rewrite does not expose (a copy)
        return {"name": name, **exposed.inferred.get(name, {})}
    constant = exposed.initializers[name]
    return {
        "name": name,
        "shape": list(constant.shape),
        "dtype": constant.dtype.name,
        "constant": constant.tolist() if constant.size <= SHOWN_CONSTANT else True,
    }


def _worst_elements(actual: Any, expected: Any) -> list[dict[str, Any]]:
    """The elements furthest apart (flat index, expected, actual), the worst first."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape or not expected.size:
        return []
    a = actual.astype(np.float64).ravel()
    e = expected.astype(np.float64).ravel()
    with np.errstate(invalid="ignore"):
        gap = np.where(np.isnan(a) != np.isnan(e), np.inf, np.nan_to_num(np.abs(a - e)))
    worst = np.argsort(-gap, kind="stable")[:SHOWN_ELEMENTS]
    return [
        {"index": int(i), "expected": float(e[i]), "actual": float(a[i])}
        for i in worst
        if gap[i] > 0
    ]
