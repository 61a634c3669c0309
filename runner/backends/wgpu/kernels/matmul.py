"""Batched matrix product, out = scale * A @ B (+ C): one output element per invocation.

``rows`` (M) and ``cols`` (N) split ``index``; the batch index splits by the batch iteration
strides. ``strides`` holds Vb vec4s each of: batch iteration strides, A's batch strides, B's
batch strides (0 where broadcast); then (K, A row, A column, B row) and (B column, C row,
C column, 0) strides. Strides rather than a fixed layout let Gemm's transA/transB and a
broadcast bias use the same kernel. ``scale`` carries Gemm's alpha, or a scalar Mul/Div fused
into a MatMul (attention's 1/sqrt(head_dim)).
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.backends.wgpu.kernels import Kernel, component, vec4_count
from runner.backends.wgpu.uniforms import Field


def matmul_kernel(batch_rank: int, inputs: tuple[str, ...], output: str) -> Kernel:
    """A, B and, when ``inputs`` has three, the bias C."""
    bias = len(inputs) == 3
    v = vec4_count(batch_rank)
    inner, extra = f"params.strides[{3 * v}]", f"params.strides[{3 * v + 1}]"
    lines = [
        "  let n = i32(index % params.cols);\n",
        "  let m = i32((index / params.cols) % params.rows);\n",
        "  var rem = i32(index / (params.cols * params.rows));\n",
        f"  let g = {inner};\n  let h = {extra};\n",
        "  var pa = m * g.y;\n  var pb = n * h.x;\n",
    ]
    for d in range(batch_rank):
        step = component(0, d)
        lines.append(f"  let c{d} = rem / {step};\n  rem -= c{d} * {step};\n")
        lines.append(f"  pa += c{d} * {component(v, d)};\n  pb += c{d} * {component(2 * v, d)};\n")
    lines += [
        "  var acc = 0.0;\n",
        "  for (var k = 0; k < g.x; k++) {\n",
        "    acc += in0[pa + k * g.z] * in1[pb + k * g.w];\n",
        "  }\n",
        "  var result = params.scale * acc;\n",
    ]
    if bias:
        lines.append("  result += in2[m * h.y + n * h.z];\n")
    lines.append("  out[index] = result;\n")
    fields = (
        Field("size", "u32"),
        Field("rows", "u32"),
        Field("cols", "u32"),
        Field("scale", "f32"),
        Field("strides", "vec4i", 3 * v + 2),
    )
    types = f"{','.join(inputs)}->{output}"
    name = f"MatMul[b{batch_rank}{'+bias' if bias else ''};{types}]"
    return Kernel(name, inputs, output, fields, "size", "".join(lines))


def matmul_values(
    batch: Sequence[int],
    a_batch: Sequence[int],
    b_batch: Sequence[int],
    m: int,
    n: int,
    k: int,
    a_strides: tuple[int, int],
    b_strides: tuple[int, int],
    c_strides: tuple[int, int] = (0, 0),
    scale: float = 1.0,
) -> dict[str, object]:
    """Uniform values: batch shape, A/B batch strides, (row, column) strides of A, B and C."""
    v = vec4_count(len(batch))
    step, batch_steps = 1, []
    for dim in reversed(batch):
        batch_steps.append(step)
        step *= dim
    packed: list[int] = []
    for vector in (batch_steps[::-1], a_batch, b_batch):
        packed += list(vector) + [0] * (4 * v - len(vector))
    packed += [k, a_strides[0], a_strides[1], b_strides[0], b_strides[1], *c_strides, 0]
    return {"size": step * m * n, "rows": m, "cols": n, "scale": scale, "strides": packed}
