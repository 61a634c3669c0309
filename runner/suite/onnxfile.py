"""What loading a suite reads off an ONNX file: its graph's inputs and outputs, read once.

A run loads its suites more than once (selection, then again after fetching packages), and a
packaged decoder weighs 80 MB without its external data: its facts are kept per version of the
file (path, modification time, size), not its parsed graph.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

Dims = list[int | str]  # a fixed size, or a symbolic dim's name


@dataclass(frozen=True)
class OnnxFile:
    inputs: Mapping[str, Dims]  # the graph's inputs that are not initializers
    input_types: Mapping[str, int]  # their TensorProto element types
    outputs: Mapping[str, Dims]
    empty: bool  # no node or no output: nothing to run
    rotary_head_size: int | None  # a genai decoder's, from its GroupQueryAttention's cos_cache


def read_onnx(path: Path) -> OnnxFile:
    """Raises what ``onnx.load`` raises for bytes that are not ONNX (DecodeError, ValueError)."""
    stat = path.stat()
    return _read(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int, size: int) -> OnnxFile:
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    return OnnxFile(
        inputs={i.name: _dims(i) for i in inputs},
        input_types={i.name: i.type.tensor_type.elem_type for i in inputs},
        outputs={o.name: _dims(o) for o in graph.output},
        empty=not graph.node or not graph.output,
        rotary_head_size=_rotary_head_size(graph),
    )


def _dims(value) -> Dims:
    return [
        d.dim_param if d.HasField("dim_param") else d.dim_value
        for d in value.type.tensor_type.shape.dim
    ]


def _rotary_head_size(graph) -> int | None:
    """A decoder's head size from its first GroupQueryAttention's cos_cache, [positions,
    head_size / 2] (rotary inside attention, as genai's builder writes it), or None."""
    weights = {tensor.name: tensor.dims for tensor in graph.initializer}
    for node in graph.node:
        if node.op_type == "GroupQueryAttention" and len(node.input) > 7:
            dims = weights.get(node.input[7])
            return 2 * dims[1] if dims is not None and len(dims) == 2 else None
    return None
