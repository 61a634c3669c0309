"""WGSL compute kernels, one module per op family, and how a kernel becomes a program.

A ``Kernel`` is layout-free: element types, the uniform fields it reads (in its default order),
and the WGSL statements run per invocation. ``compose`` binds it to a layout's field order,
which fixes the ``Params`` struct, and so the source and the pipeline key. Bindings: input
tensors at 0..n-1 (read-only storage), the output at n, the uniform struct at ``UNIFORM_SLOT``.
Every kernel runs one invocation per unit of work (an element, a row), ``index``, in 1-D
workgroups of ``WORKGROUP_SIZE``; dispatches wider than the per-dimension limit spill into y.
Kernel bodies compute in f32: an f16 tensor is read into f32 and written back rounded to f16
(as onnxruntime's CPU kernels widen float16), so one body serves both (``_widened``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from runner.backends.wgpu.uniforms import UNIFORM_SLOT, Field, StructLayout

WORKGROUP_SIZE = 64
MAX_WORKGROUPS_PER_DIM = 65535


@dataclass(frozen=True)
class Kernel:
    name: str  # readable; leads the pipeline key
    inputs: tuple[str, ...]  # WGSL element type of each input tensor
    output: str  # WGSL element type of the output tensor
    fields: tuple[Field, ...]  # uniform fields, default order
    bound: str  # the u32 field holding the number of invocations
    body: str  # WGSL statements run for each `index` below the bound
    helpers: str = ""  # WGSL functions the body calls


@dataclass(frozen=True)
class Program:
    """A kernel under one uniform order: the exact source a pipeline is compiled from."""

    key: str
    source: str
    layout: StructLayout
    inputs: int
    kernel: Kernel  # what it was composed from (a fault's edit recomposes it)


def compose(kernel: Kernel, order: Sequence[str]) -> Program:
    layout = StructLayout.of(kernel.fields, order)
    bindings = [
        f"@group(0) @binding({i}) var<storage, read> in{i}: array<{t}>;\n"
        for i, t in enumerate(kernel.inputs)
    ]
    n = len(kernel.inputs)
    output = f"var<storage, read_write> out: array<{kernel.output}>"
    bindings.append(f"@group(0) @binding({n}) {output};\n")
    bindings.append(f"@group(0) @binding({UNIFORM_SLOT}) var<uniform> params: Params;\n")
    source = (
        ("enable f16;\n" if uses_f16(kernel) else "")
        + layout.wgsl()
        + "".join(bindings)
        + kernel.helpers
        + f"""
@compute @workgroup_size({WORKGROUP_SIZE})
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {{
  let index = gid.x + gid.y * groups.x * {WORKGROUP_SIZE}u;
  if (index >= params.{kernel.bound}) {{ return; }}
{_widened(kernel)}}}
"""
    )
    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    return Program(f"{kernel.name}#{digest}", source, layout, n, kernel)


def uses_f16(kernel: Kernel) -> bool:
    return "f16" in (*kernel.inputs, kernel.output)


_ELEMENT = r"\[([^\[\]]*)\]"  # an index expression without brackets of its own


def _widened(kernel: Kernel) -> str:
    """The body with each f16 tensor's element read as f32, and f16 output written rounded."""
    body = kernel.body
    for i, element in enumerate(kernel.inputs):
        if element == "f16":
            body = re.sub(rf"\bin{i}{_ELEMENT}", rf"f32(in{i}[\1])", body)
    if kernel.output == "f16":
        body = re.sub(rf"\bout{_ELEMENT} = ([^;]*);", r"out[\1] = f16(\2);", body)
        body = re.sub(rf"\bout{_ELEMENT}(?! =)", r"f32(out[\1])", body)
    return body


def workgroups(invocations: int) -> tuple[int, int, int]:
    groups = max(1, -(-invocations // WORKGROUP_SIZE))
    if groups <= MAX_WORKGROUPS_PER_DIM:
        return (groups, 1, 1)
    return (MAX_WORKGROUPS_PER_DIM, -(-groups // MAX_WORKGROUPS_PER_DIM), 1)


def vec4_count(rank: int) -> int:
    """vec4<i32> needed to hold one stride per dimension (at least one)."""
    return max(1, -(-rank // 4))


def component(vector: int, dim: int) -> str:
    """WGSL for element ``dim`` of a per-dimension vector stored from ``strides[vector]``."""
    return f"params.strides[{vector + dim // 4}].{'xyzw'[dim % 4]}"
