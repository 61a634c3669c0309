"""Row kernels: one invocation per row of ``cols`` contiguous elements (``rows`` of them; a
softmax's row may be ``inner`` apart).

Softmax, LayerNormalization, the RMS norms (SimplifiedLayerNormalization and its Skip form)
and the reductions over trailing axes all reduce along contiguous rows; a row per invocation
keeps them simple and exact enough (two-pass mean and variance).
"""

from __future__ import annotations

from runner.backends.wgpu.kernels import Kernel
from runner.backends.wgpu.uniforms import Field

_ROWS = (Field("rows", "u32"), Field("cols", "u32"))

# A row here is `cols` elements `inner` apart: the softmax axis need not be the last
_SOFTMAX = """  let base = index / params.inner * params.cols * params.inner + index % params.inner;
  var peak = in0[base];
  for (var j = 1u; j < params.cols; j++) { peak = max(peak, in0[base + j * params.inner]); }
  var total = 0.0;
  for (var j = 0u; j < params.cols; j++) {
    let e = exp(in0[base + j * params.inner] - peak);
    out[base + j * params.inner] = e;
    total += e;
  }
  for (var j = 0u; j < params.cols; j++) {
    out[base + j * params.inner] = out[base + j * params.inner] / total;
  }
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


# The RMS norm of a row of {value}s: x / sqrt(mean(x^2) + eps) * gamma (in{gamma}).
_RMS_NORM = """  let base = index * params.cols;
  var squares = 0.0;
  for (var j = 0u; j < params.cols; j++) {
    let x = {value};
    squares += x * x;
  }
  let inv = 1.0 / sqrt(squares / f32(params.cols) + params.eps);
  for (var j = 0u; j < params.cols; j++) { out[base + j] = {value} * inv * in{gamma}[j]; }
"""

# op -> (initial value, statement folding in0[base + j] into `total`, result from `total`)
_REDUCTIONS = {
    "ReduceSum": ("{zero}", "total += in0[base + j];", "total"),
    "ReduceMean": ("0.0", "total += in0[base + j];", "total / f32(params.cols)"),
    "ReduceMax": ("in0[base]", "total = max(total, in0[base + j]);", "total"),
}


def softmax_kernel(element: str) -> Kernel:
    fields = (*_ROWS, Field("inner", "u32"))
    return Kernel(f"Softmax[{element}]", (element,), element, fields, "rows", _SOFTMAX)


def reduce_kernel(op: str, element: str) -> Kernel:
    """``op`` (a key of _REDUCTIONS) over each row, of f32, f16 or i32 elements."""
    initial, step, result = _REDUCTIONS[op]
    body = (
        "  let base = index * params.cols;\n"
        f"  var total = {initial.format(zero='0' if element == 'i32' else '0.0')};\n"
        f"  for (var j = 0u; j < params.cols; j++) {{ {step} }}\n"
        f"  out[index] = {result};\n"
    )
    return Kernel(f"{op}[{element}]", (element,), element, _ROWS, "rows", body)


def rms_norm_kernel(skip: bool, inputs: tuple[str, ...], output: str) -> Kernel:
    """Inputs x, then skip (same shape), gamma, bias (per column, when ``inputs`` has one more):
    the norm of x + skip + bias."""
    value = "in0[base + j]" + (" + in1[base + j]" if skip else "")
    gamma = 2 if skip else 1
    bias = len(inputs) > gamma + 1
    if bias:
        value += f" + in{gamma + 1}[j]"
    body = _RMS_NORM.replace("{value}", f"({value})").replace("{gamma}", str(gamma))
    form = f"{'skip' if skip else 'noskip'}{',bias' if bias else ''}"
    name = f"RmsNorm[{form};{_types(inputs, output)}]"
    return Kernel(name, inputs, output, (*_ROWS, Field("eps", "f32")), "rows", body)


def layer_norm_kernel(inputs: tuple[str, ...], output: str) -> Kernel:
    """Inputs x, scale and, when ``inputs`` has three, bias."""
    fields = (*_ROWS, Field("eps", "f32"))
    bias = len(inputs) == 3
    body = _LAYER_NORM.replace("{bias}", " + in2[j]" if bias else "")
    name = f"LayerNorm[{'bias' if bias else 'nobias'};{_types(inputs, output)}]"
    return Kernel(name, inputs, output, fields, "rows", body)


def _types(inputs: tuple[str, ...], output: str) -> str:
    return f"{','.join(inputs)}->{output}"
