"""Point at the first node whose output went wrong.

For a failing case, the model is rewritten with every floating-point intermediate exposed as a
graph output and run again on the same backend: first the capture cases that preceded it in its
layout-change sequence (so that whatever went stale is stale again), then the case itself eager
and with capture. Walking the nodes in topological order, the first output that diverges names
the node: capture against eager for a capture bug, eager against the oracle for a kernel bug.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import onnx
from onnx import TensorProto, helper

from runner.backends.base import Backend, CaseWork
from runner.compare import compare
from runner.matrix import Case
from runner.oracle import compute_reference
from runner.workload import Workload

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}
# Ops whose output is their input's values, reshaped: it diverges only where its input did (an
# earlier node, named first) or where the backend gets a view wrong as a graph output, which is
# what exposing it makes it; onnxruntime's WebGPU builds replay such an output stale under
# capture (suites/bugs/ort-reshape-output-stale.yaml), so naming one would name that, not the bug.
VIEW_OPS = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"}
# What localization explains: capture bugs against eager, kernel bugs against the oracle.
LOCALIZED_VERDICTS = {"capture-mismatch", "stale-layout", "reference-mismatch"}


@dataclasses.dataclass(frozen=True)
class Exposed:
    workload: Workload
    nodes: tuple[tuple[str, str, str], ...]  # (output name, op type, node name), topological


def expose_intermediates(workload: Workload) -> Exposed:
    """The workload with every float node output that depends on a graph input also a graph
    output, but views' (VIEW_OPS: a view the model outputs itself stays one)."""
    model = onnx.load_from_string(workload.model)
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    existing = {o.name for o in model.graph.output}
    varying = _fed_by_inputs(model.graph)
    nodes = [
        (output, node.op_type, node.name)
        for node in model.graph.node
        if node.op_type != "Constant"
        for output in node.output
        if output in varying
        and types.get(output) in FLOAT_TYPES
        and (node.op_type not in VIEW_OPS or output in existing)
    ]
    # Sorted by name, so that the variants of one model (whose node order a layout may change)
    # expose the same outputs in the same order, as the originals share theirs.
    for output in sorted({name for name, _, _ in nodes} - existing):
        model.graph.output.append(helper.make_tensor_value_info(output, types[output], None))
    names = tuple(o.name for o in model.graph.output)
    exposed = dataclasses.replace(
        workload,
        key=workload.key + "+intermediates",
        model=model.SerializeToString(),
        output_names=names,
    )
    return Exposed(exposed, tuple(nodes))


def _fed_by_inputs(graph: onnx.GraphProto) -> set[str]:
    """The values that depend on a graph input. The others are folded into constants before a
    session runs (onnxruntime does), so exposing one only tests how the backend outputs a
    constant, as exposing a view does."""
    initializers = {t.name for t in graph.initializer}
    varying = {i.name for i in graph.input if i.name not in initializers}
    for node in graph.node:  # topological, as ONNX requires
        if any(name in varying for name in node.input):
            varying.update(name for name in node.output if name)
    return varying


def first_divergent_node(
    backend: Backend,
    case: Case,
    workload: Workload,
    verdicts: frozenset[str],
    prefix: Sequence[tuple[Case, Workload]] = (),
) -> dict | None:
    """The first node whose output diverges, or None when the rerun does not reproduce it."""
    exposed = expose_intermediates(workload)
    capture_bug = case.capture and bool(verdicts & {"capture-mismatch", "stale-layout"})
    if capture_bug:
        for earlier_case, earlier_workload in prefix:
            backend.run(CaseWork(earlier_case, expose_intermediates(earlier_workload).workload))
    eager_case = dataclasses.replace(case, capture=False, revisit=False, revisited=False)
    eager = backend.run(CaseWork(eager_case, exposed.workload))
    if eager.status != "ok":
        return None
    if capture_bug:
        suspect = backend.run(CaseWork(case, exposed.workload))
        if suspect.status != "ok":
            return None
        got, want, against = suspect.outputs, eager.outputs, "eager"
    else:
        last = exposed.workload.feeds(len(eager.runs))[len(eager.runs) - 1]
        want = compute_reference(exposed.workload, last.variant)
        got, against = eager.outputs, "onnxruntime CPU"
    for output, op_type, node in exposed.nodes:
        if output not in got or output not in want:
            continue
        result = compare(got[output], want[output], case.tolerance)
        if not result.ok:
            return {
                "op_type": op_type,
                "name": node,
                "output": output,
                "against": against,
                "max_abs": result.max_abs if result.max_abs != float("inf") else None,
                "mismatched": result.mismatched,
                "total": result.total,
            }
    return None
