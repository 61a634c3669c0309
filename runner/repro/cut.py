"""Cut a model down to the part that still shows a failure.

The cut ends at an anchor tensor: the first divergent node's output where localization found
one, else the model's first output (capture-not-engaged and nondeterministic name no node).
It starts at the anchor's own inputs and widens by producer levels (0, 1, 2, 4, ... levels of
nodes above the anchor) until it reaches the graph inputs; the tensors where a cut starts
become its graph inputs, fed with their eager values. Tensors computed from initializers
alone are never cut at: the nodes computing them come along. ``onnx.utils.Extractor`` does the
cutting.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.utils
from onnx import helper

from runner.schedule import BASE, Variant
from runner.workload import Workload, workload_key


@dataclass(frozen=True)
class Anchor:
    output: str  # the tensor every cut ends at
    node: str  # the node producing it
    op_type: str
    why: str  # how it was chosen, in words


@dataclass(frozen=True)
class Cut:
    depth: int  # producer levels above the anchor node it keeps
    inputs: tuple[str, ...]  # tensors of the full model that become its graph inputs
    output: str
    nodes: int  # nodes in the cut model


def anchor(model: onnx.ModelProto, divergent: Mapping[str, object] | None) -> Anchor | None:
    """Where cuts end: the divergent node's output if the model has it, else its first output."""
    producers = {out: node for node in model.graph.node for out in node.output if out}
    if divergent and divergent.get("output") in producers:
        node = producers[str(divergent["output"])]
        return Anchor(str(divergent["output"]), node.name, node.op_type, "first divergent node")
    first = model.graph.output[0].name if model.graph.output else ""
    if first not in producers:
        return None
    node = producers[first]
    why = "the model's first output, as the verdict names no divergent node"
    return Anchor(first, node.name, node.op_type, why)


def plan_cuts(model: onnx.ModelProto, anchor: Anchor) -> list[Cut]:
    """The cuts to try, smallest first; each has fewer nodes than the model."""
    graph = model.graph
    constant = _constant_tensors(graph)
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    kept = {producer[anchor.output]}
    level = {producer[anchor.output]}
    cuts: list[Cut] = []
    seen: set[tuple[str, ...]] = set()
    depth, done = 0, 0
    extractor = onnx.utils.Extractor(onnx.shape_inference.infer_shapes(model))
    while True:
        while done < depth:  # one producer level up
            level = {
                producer[name]
                for i in level
                for name in graph.node[i].input
                if name in producer and name not in constant
            } - kept
            kept |= level
            done += 1
        inputs = _frontier(graph, kept, constant)
        if inputs not in seen:
            seen.add(inputs)
            nodes = _node_count(extractor, inputs, anchor.output)
            if nodes is not None and nodes < len(graph.node):
                cuts.append(Cut(depth, inputs, anchor.output, nodes))
        if not level:  # every ancestor is in: wider cuts are all the same
            return cuts
        depth = max(1, depth * 2)


def cut_model(
    model: onnx.ModelProto, cut: Cut, values: Mapping[str, np.ndarray], dims: Mapping[str, int]
) -> bytes:
    """The cut as a model: its inputs typed by their values; a dim keeps its symbolic name
    where the case pins that name (freeDimensionOverrides still apply as the suite gave them)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    extracted = onnx.utils.Extractor(inferred).extract_model(list(cut.inputs), [cut.output])
    typed = []
    for value_info in extracted.graph.input:
        value = values[value_info.name]
        declared = _padded(value_info.type.tensor_type.shape.dim, value.ndim)
        shape = [
            d.dim_param if d.dim_param in dims else size
            for d, size in zip(declared, value.shape, strict=True)
        ]
        elem_type = helper.np_dtype_to_tensor_dtype(value.dtype)
        typed.append(helper.make_tensor_value_info(value_info.name, elem_type, shape))
    del extracted.graph.input[:]
    extracted.graph.input.extend(typed)
    extracted.ir_version = model.ir_version
    return extracted.SerializeToString()


def cut_workload(
    workload: Workload, cut: Cut, values: Mapping[Variant, Mapping[str, np.ndarray]]
) -> Workload:
    """The workload of a cut: its model, and the eager values of its inputs for each input
    variant the workload's runs use (its input sequence kept)."""
    base = values[BASE]
    model = cut_model(onnx.load_from_string(workload.model), cut, base, workload.shape)
    inputs = {name: base[name] for name in cut.inputs}
    return Workload(
        key=workload_key(hashlib.sha256(model).digest(), workload.shape, inputs),
        model=model,
        inputs=inputs,
        output_names=(cut.output,),
        shape=workload.shape,
        uniform_order=workload.uniform_order,
        preferred_layout=workload.preferred_layout,
        schedule=workload.schedule,
        variants={
            variant: {name: values[variant][name] for name in cut.inputs}
            for variant in workload.variants
        },
    )


def exposed(workload: Workload, names: Sequence[str]) -> Workload:
    """The workload with `names` (intermediate tensors) also graph outputs, for their values."""
    model = onnx.load_from_string(workload.model)
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    present = {o.name for o in model.graph.output}
    unknown = sorted(set(names) - present - types.keys())
    if unknown:  # another layout's variant may lack a tensor the cut starts at
        raise ValueError(f"the model has no typed tensor {', '.join(unknown)}")
    for name in names:
        if name not in present:
            model.graph.output.append(helper.make_tensor_value_info(name, types[name], None))
    data = model.SerializeToString()
    outputs = tuple(o.name for o in model.graph.output)
    return Workload(
        key=workload_key(hashlib.sha256(data).digest(), workload.shape, workload.inputs),
        model=data,
        inputs=workload.inputs,
        output_names=outputs,
        shape=workload.shape,
        uniform_order=workload.uniform_order,
        preferred_layout=workload.preferred_layout,
    )


def op_counts(model: bytes) -> dict[str, int]:
    """Nodes per op type, most frequent first."""
    counts: dict[str, int] = {}
    for node in onnx.load_from_string(model).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """Initializers, and what nodes compute from them alone (graph nodes are topological)."""
    constant = {init.name for init in graph.initializer}
    for node in graph.node:
        if all(name in constant for name in node.input if name):
            constant.update(out for out in node.output if out)
    return constant


def _frontier(graph: onnx.GraphProto, kept: set[int], constant: set[str]) -> tuple[str, ...]:
    """Tensors the kept nodes read that nothing kept computes: the cut's inputs, in order."""
    made = {out for i in kept for out in graph.node[i].output}
    reads = [name for i in sorted(kept) for name in graph.node[i].input if name]
    return tuple(dict.fromkeys(n for n in reads if n not in made and n not in constant))


def _node_count(
    extractor: onnx.utils.Extractor, inputs: tuple[str, ...], output: str
) -> int | None:
    """How many nodes the cut holds; None when onnx cannot cut there (an untyped tensor)."""
    try:
        return len(extractor.extract_model(list(inputs), [output]).graph.node)
    except ValueError:
        return None


def _padded(dims, rank: int) -> list:
    """Declared dims, or blanks where shape inference left the rank unknown."""
    blank = onnx.TensorShapeProto.Dimension()
    return list(dims) if len(dims) == rank else [blank] * rank
