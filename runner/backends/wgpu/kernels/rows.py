"""Row kernels: one invocation per row of ``cols`` contiguous elements (``rows`` of them).

Softmax, LayerNormalization and ReduceMean over trailing axes all reduce along contiguous
rows; a row per invocation keeps them simple and exact enough (two-pass mean and variance).
"""

from __future__ import annotations

from runner.backends.wgpu.kernels import Kernel
from runner.backends.wgpu.uniforms import Field

_ROWS = (Field("rows", "u32"), Field("cols", "u32"))

_SOFTMAX = """  let base = index * params.cols;
  var peak = in0[base];
  for (var j = 1u; j < params.cols; j++) { peak = max(peak, in0[base + j]); }
  var total = 0.0;
  for (var j = 0u; j < params.cols; j++) {
    let e = exp(in0[base + j] - peak);
    out[base + j] = e;
    total += e;
  }
  for (var j = 0u; j < params.cols; j++) { out[base + j] = out[base + j] / total; }
"""

_MEAN = """  let base = index * params.cols;
  var total = 0.0;
  for (var j = 0u; j < params.cols; j++) { total += in0[base + j]; }
  let mean = total / f32(params.cols);
"""

_LAYER_NORM = (
    _MEAN
    + """  var spread = 0.0;
  for (var j = 0u; j < params.cols; j++) {
    let d = in0[base + j] - mean;
    spread += d * d;
  }
  let inv = 1.0 / sqrt(spread / f32(params.cols) + params.eps);
  for (var j = 0u; j < params.cols; j++) {
    out[base + j] = (in0[base + j] - mean) * inv * in1[j]{bias};
  }
"""
)


def softmax_kernel() -> Kernel:
    return Kernel("Softmax", ("f32",), "f32", _ROWS, "rows", _SOFTMAX)


def reduce_mean_kernel() -> Kernel:
    return Kernel("ReduceMean", ("f32",), "f32", _ROWS, "rows", _MEAN + "  out[index] = mean;\n")


def layer_norm_kernel(bias: bool) -> Kernel:
    fields = (*_ROWS, Field("eps", "f32"))
    body = _LAYER_NORM.replace("{bias}", " + in2[j]" if bias else "")
    inputs = ("f32",) * (3 if bias else 2)
    return Kernel(f"LayerNorm[{'bias' if bias else 'nobias'}]", inputs, "f32", fields, "rows", body)
