"""Gather along one axis: one output element per invocation; indices are i32 on the device.

``strides[0]`` holds (index count, inner size, axis length, 0); negative indices count from
the end, as in ONNX, and out-of-range ones clamp rather than read past the buffer.
"""

from __future__ import annotations

from runner.backends.wgpu.kernels import Kernel
from runner.backends.wgpu.uniforms import Field

_BODY = """  let g = params.strides[0];
  let inner = u32(g.y);
  let count = u32(g.x);
  let j = (index / inner) % count;
  let outer = index / (inner * count);
  var i = in1[j];
  if (i < 0) { i += g.z; }
  i = clamp(i, 0, g.z - 1);
  out[index] = in0[(outer * u32(g.z) + u32(i)) * inner + index % inner];
"""


def gather_kernel(data: str) -> Kernel:
    fields = (Field("size", "u32"), Field("strides", "vec4i", 1))
    return Kernel(f"Gather[{data}]", (data, "i32"), data, fields, "size", _BODY)


def gather_values(size: int, indices: int, inner: int, axis_length: int) -> dict[str, object]:
    return {"size": size, "strides": [indices, inner, axis_length, 0]}
