"""MatMulNBits: out = A @ dequantize(B) (+ bias), dequantized in the kernel, ``COLUMNS``
consecutive outputs of one row per invocation; GatherBlockQuantized: rows of a table quantized
alike (a 4-bit embedding), gathered and dequantized.

B holds N columns of K values in blocks of ``block`` along K, ``bits`` bits a value, packed from
the low bits of each byte up (onnxruntime's layout, [N, blocks, block * bits / 8] bytes); the
planner hands it over as the same bytes in i32 words (WGSL has no 8-bit type), little end first.
A value's weight is (level - zero point) * scale, with a scale and a zero point per (column,
block); the planner expands packed or implied zero points to one f32 each. Bits dividing 8 keep
every value inside one word. ``strides[0]`` = (K, blocks, block, bits).

MatMulNBits reads each element of A once for its ``COLUMNS`` columns (lavapipe spends most of a
naive kernel's time loading A) and unpacks a word at a time; a block is whole words (onnxruntime
requires a block of 16 or more, a power of 2), the last one's values past K weigh nothing. Each
product and the running sum are as in a loop over K: the result is the naive kernel's.
"""

from __future__ import annotations

from runner.backends.wgpu.kernels import Kernel
from runner.backends.wgpu.uniforms import Field

COLUMNS = 4  # outputs an invocation computes: one vec4

_BODY = """  let g = params.strides[0];
  let depth = u32(g.x);
  let blocks = u32(g.y);
  let bits = u32(g.w);
  let words = u32(g.z) * bits / 32u;
  let mask = vec4((1u << bits) - 1u);
  let tiles = (params.cols + 3u) / 4u;
  let first = (index % tiles) * 4u;
  let m = index / tiles;
  let columns = min(vec4(first) + vec4(0u, 1u, 2u, 3u), vec4(params.cols - 1u));
  var acc = vec4(0.0);
  var k = 0u;
  for (var b = 0u; b < blocks; b++) {
    let group = columns * blocks + b;
    let zero = vec4(in3[group.x], in3[group.y], in3[group.z], in3[group.w]);
    let scale = vec4(in2[group.x], in2[group.y], in2[group.z], in2[group.w]);
    for (var w = 0u; w < words; w++) {
      let at = group * words + w;
      let word = bitcast<vec4<u32>>(vec4(in1[at.x], in1[at.y], in1[at.z], in1[at.w]));
      for (var shift = 0u; shift < 32u; shift += bits) {
        let a = select(0.0, in0[m * depth + k], k < depth);
        acc += a * (vec4<f32>((word >> vec4(shift)) & mask) - zero) * scale;
        k++;
      }
    }
  }
  for (var c = 0u; c < 4u && first + c < params.cols; c++) {
"""


def matmul_nbits_kernel(bias: bool) -> Kernel:
    """Inputs: A, B as words, scales, zero points, [bias]; ``size``: invocations, rows times
    ``COLUMNS``-column tiles."""
    store = "acc[c] + in4[first + c]" if bias else "acc[c]"
    body = _BODY + f"    out[m * params.cols + first + c] = {store};\n  }}\n"
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
