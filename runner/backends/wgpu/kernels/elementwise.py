"""Element-wise kernels: one output element per invocation, every operand addressed by strides.

The iteration space has the output's rank R, padded to V = ceil(R/4) vec4s per vector. The
``strides`` field holds, in order: the iteration strides (to split ``index`` into
coordinates), the output's strides, each input's strides (0 along a broadcast dimension,
negative for a reversed slice), and a last vec4 of base offsets (output, in0, in1, in2). So one
kernel shape covers math with broadcasting, comparisons and logic, Where, Cast, and the data
movement of Transpose, Expand, Slice and each part of a Concat (the identity expression ``a``).
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.backends.wgpu.kernels import Kernel, component, vec4_count
from runner.backends.wgpu.uniforms import Field

MATH_HELPERS = """
fn erf_approx(x: f32) -> f32 {
  // Abramowitz & Stegun 7.1.26: absolute error below 1.5e-7.
  let t = 1.0 / (1.0 + 0.3275911 * abs(x));
  let poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
              + 0.254829592) * t;
  let y = 1.0 - poly * exp(-x * x);
  return select(-y, y, x >= 0.0);
}
fn tanh_safe(x: f32) -> f32 {
  return tanh(clamp(x, -15.0, 15.0));
}
fn pow_onnx(x: f32, y: f32) -> f32 {
  // WGSL's pow is undefined for x < 0; ONNX (like C's pow) defines it for integral y.
  if (y == 2.0) { return x * x; }
  if (y == 1.0) { return x; }
  if (y == 0.0) { return 1.0; }
  if (x < 0.0 && y == round(y)) {
    let magnitude = pow(-x, y);
    return select(magnitude, -magnitude, abs(y % 2.0) == 1.0);
  }
  return pow(x, y);
}
"""

# ONNX op -> WGSL expression over the loaded operands a, b, c (f32 unless said otherwise).
UNARY_F32 = {
    "Sqrt": "sqrt(a)",
    "Erf": "erf_approx(a)",
    "Tanh": "tanh_safe(a)",
    "Relu": "max(a, 0.0)",
    "Sigmoid": "1.0 / (1.0 + exp(-a))",
    "Gelu": "0.5 * a * (1.0 + erf_approx(a * 0.70710678118654752))",
    "GeluTanh": "0.5 * a * (1.0 + tanh_safe(0.7978845608028654 * (a + 0.044715 * a * a * a)))",
}
BINARY = {  # valid for f32 and i32 operands alike, except Pow (f32 only)
    "Add": "a + b",
    "Sub": "a - b",
    "Mul": "a * b",
    "Div": "a / b",
    "Pow": "pow_onnx(a, b)",
}
# Bool tensors are i32 0/1 on the device: comparisons write 0/1, logic reads any nonzero as true.
COMPARE = {
    "Equal": "select(0, 1, a == b)",
    "Greater": "select(0, 1, a > b)",
    "GreaterOrEqual": "select(0, 1, a >= b)",
    "Less": "select(0, 1, a < b)",
    "LessOrEqual": "select(0, 1, a <= b)",
}
LOGIC = {
    "And": "select(0, 1, a != 0 && b != 0)",
    "Or": "select(0, 1, a != 0 || b != 0)",
    "Xor": "select(0, 1, (a != 0) != (b != 0))",
    "Not": "select(0, 1, a == 0)",
}
# By the bits: WGSL lets compilers assume floats are never NaN, so `a != a` may fold to false.
IS_NAN = "select(0, 1, (bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u)"
WHERE = "select(c, b, a != 0)"
COPY = "a"


def cast_expression(source: str, target: str, to_bool: bool) -> str:
    """Cast between the device types f32 and i32; ``to_bool`` normalizes to 0/1."""
    if to_bool:
        zero = "0.0" if source == "f32" else "0"
        return f"select(0, 1, a != {zero})"
    return COPY if source == target else f"{target}(a)"


def map_kernel(name: str, expression: str, inputs: Sequence[str], output: str, rank: int) -> Kernel:
    v = vec4_count(rank)
    n = len(inputs)
    offsets = f"params.strides[{(n + 2) * v}]"
    pointers = ["o"] + [f"p{i}" for i in range(n)]
    lines = ["  var rem = i32(index);\n"]
    lines += [f"  var {p} = {offsets}.{'xyzw'[k]};\n" for k, p in enumerate(pointers)]
    for d in range(rank):
        step = component(0, d)
        lines.append(f"  let c{d} = rem / {step};\n  rem -= c{d} * {step};\n")
        lines += [f"  {p} += c{d} * {component((k + 1) * v, d)};\n" for k, p in enumerate(pointers)]
    lines += [f"  let {'abc'[i]} = in{i}[p{i}];\n" for i in range(n)]
    lines.append(f"  out[o] = {expression};\n")
    fields = (Field("size", "u32"), Field("strides", "vec4i", (n + 2) * v + 1))
    helpers = MATH_HELPERS if any(f in expression for f in ("erf_", "tanh_", "pow_")) else ""
    label = f"{name}[{','.join(inputs)}->{output};r{rank}]"
    return Kernel(label, tuple(inputs), output, fields, "size", "".join(lines), helpers)


def map_values(
    shape: Sequence[int],
    output: tuple[Sequence[int], int],
    operands: Sequence[tuple[Sequence[int], int]],
) -> dict[str, object]:
    """Uniform values for ``map_kernel``: iteration ``shape``, (strides, offset) per operand."""
    v = vec4_count(len(shape))
    vectors = [contiguous_strides(shape), output[0], *(strides for strides, _ in operands)]
    packed: list[int] = []
    for vector in vectors:
        packed += list(vector) + [0] * (4 * v - len(vector))
    packed += [output[1], *(offset for _, offset in operands)]
    size = 1
    for dim in shape:
        size *= dim
    return {"size": size, "strides": packed}


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return strides[::-1]


def broadcast_strides(shape: Sequence[int], rank: int) -> list[int]:
    """Strides reading a row-major tensor of ``shape`` broadcast to ``rank`` dims (numpy rules)."""
    strides = [
        0 if dim == 1 else s for dim, s in zip(shape, contiguous_strides(shape), strict=True)
    ]
    return [0] * (rank - len(shape)) + strides
