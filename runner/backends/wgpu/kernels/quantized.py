"""MatMulNBits: out = A @ dequantize(B) (+ bias), dequantized in the kernel, one output element
per invocation; GatherBlockQuantized: rows of a table quantized alike (a 4-bit embedding),
gathered and dequantized.

B holds N columns of K values in blocks of ``block`` along K, ``bits`` bits a value, packed from
the low bits of each byte up (onnxruntime's layout, [N, blocks, block * bits / 8] bytes); the
planner hands it over as the same bytes in i32 words (WGSL has no 8-bit type), little end first.
A value's weight is (level - zero point) * scale, with a scale and a zero point per (column,
block); the planner expands packed or implied zero points to one f32 each. Bits dividing 8 keep
every value inside one word. ``strides[0]`` = (K, blocks, block, bits).
"""

from __future__ import annotations

from runner.backends.wgpu.kernels import Kernel
from runner.backends.wgpu.uniforms import Field

_BODY = """  let g = params.strides[0];
  let n = index % params.cols;
  let m = index / params.cols;
  let depth = u32(g.x);
  let blocks = u32(g.y);
  let block = u32(g.z);
  let bits = u32(g.w);
  let mask = (1u << bits) - 1u;
  var acc = 0.0;
  for (var k = 0u; k < depth; k++) {
    let group = n * blocks + k / block;
    let bit = (group * block + k % block) * bits;
    let level = f32((bitcast<u32>(in1[bit / 32u]) >> (bit % 32u)) & mask);
    acc += in0[m * depth + k] * (level - in3[group]) * in2[group];
  }
"""


def matmul_nbits_kernel(bias: bool) -> Kernel:
    """Inputs: A, B as words, scales, zero points, [bias]."""
    body = _BODY + ("  out[index] = acc + in4[n];\n" if bias else "  out[index] = acc;\n")
    fields = (
        Field("size", "u32"),
        Field("rows", "u32"),
        Field("cols", "u32"),
        Field("strides", "vec4i", 1),
    )
    inputs = ("f32", "i32", "f32", "f32", *(("f32",) if bias else ()))
    return Kernel(
        f"MatMulNBits[{'bias' if bias else 'nobias'}]", inputs, "f32", fields, "size", body
    )


_GATHER_BODY = """  let g = params.strides[0];
  let cols = u32(g.x);
  let blocks = u32(g.y);
  let block = u32(g.z);
  let bits = u32(g.w);
  let c = index % cols;
  var row = in0[index / cols];
  if (row < 0) { row += i32(params.rows); }
  let r = u32(clamp(row, 0, i32(params.rows) - 1));
  let group = r * blocks + c / block;
  let bit = (r * cols + c) * bits;
  let level = f32((bitcast<u32>(in1[bit / 32u]) >> (bit % 32u)) & ((1u << bits) - 1u));
  out[index] = (level - in3[group]) * in2[group];
"""


def gather_block_quantized_kernel() -> Kernel:
    """Inputs: indices, the table as words, scales, zero points; ``rows``: the table's rows,
    ``strides[0]`` = (columns, blocks a row, block, bits)."""
    fields = (Field("size", "u32"), Field("rows", "u32"), Field("strides", "vec4i", 1))
    inputs = ("i32", "i32", "f32", "f32")
    return Kernel("GatherBlockQuantized", inputs, "f32", fields, "size", _GATHER_BODY)
