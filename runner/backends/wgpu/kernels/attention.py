"""GroupQueryAttention as onnxruntime's CPU kernel computes it, in two kernel shapes.

``cache_write``: one invocation per element of a present cache [batch, kv_heads, max_length,
head_size]: the step's keys (rotated) or values land at positions ``start .. start + seq``, every
other position is the past's, so present equals the past buffer with the step written into it
(what past_present_share_buffer leaves in the one buffer). ``attention``: one invocation per
(batch, position, head) row of the output: scores against the present keys of its kv head
(``heads / kv_heads`` query heads share one), causal up to its own position, softmax, and the
weighted present values.

``start`` is 0 for a first prompt (sequence length equal to ``total_sequence_length``), else
``seqlens_k[b] + 1 - seq``, as in onnxruntime; a token's rotary position is its cache position.
Rotary embedding (``do_rotary``) rotates pairs (h, h + half) or, interleaved, (2i, 2i + 1) by
cos/sin caches of [max_length, half]; dims past 2 * half are left as they are.

Uniforms: ``size`` or ``rows`` (invocations), ``heads``, ``head_dim``, ``seq``, ``scale``; and
``strides[0]`` = (kv_heads, max_length, source row stride, source offset): the source is the
packed QKV (or a separate Q, K, V) as [batch, seq, row], a head's slice at offset + head *
head_dim; ``strides[1]`` = (rotary half, interleaved, 0, 0).
"""

from __future__ import annotations

from runner.backends.wgpu.kernels import Kernel
from runner.backends.wgpu.uniforms import Field

_GEOMETRY = Field("strides", "vec4i", 2)


def _rotary(cos: str, sin: str) -> str:
    """WGSL: element h of the head starting at in0[base], rotated to ``position``."""
    return f"""
fn rotated(base: u32, h: u32, position: u32) -> f32 {{
  let half = u32(params.strides[1].x);
  let x = in0[base + h];
  if (h >= 2u * half) {{ return x; }}
  var i = h % half;
  var leading = h < half;
  var partner = select(h - half, h + half, leading);
  if (params.strides[1].y != 0) {{
    i = h / 2u;
    leading = h % 2u == 0u;
    partner = select(h - 1u, h + 1u, leading);
  }}
  let c = {cos}[position * half + i];
  let s = {sin}[position * half + i];
  return select(x * c + in0[base + partner] * s, x * c - in0[base + partner] * s, leading);
}}
"""


def _start(seqlens: str, total: str) -> str:
    """WGSL: ``start``, the cache position of the step's first token, for batch ``b``."""
    return (
        f"  let first = i32(params.seq) == {total}[0];\n"
        f"  let start = u32(select({seqlens}[b] + 1 - i32(params.seq), 0, first));\n"
    )


def _bindings(rotary: bool, rest: tuple[str, ...]) -> tuple[dict[str, str], tuple[str, ...]]:
    """Binding names by role (source first, cos and sin when rotating, then ``rest``) and the
    WGSL element types of the inputs in order."""
    roles = ("source", *(("cos", "sin") if rotary else ()), "seqlens", "total", *rest)
    names = {role: f"in{i}" for i, role in enumerate(roles)}
    types = {"seqlens": "i32", "total": "i32"}
    return names, tuple(types.get(role, "f32") for role in roles)


def cache_write_kernel(rotary: bool) -> Kernel:
    """Inputs: source, [cos, sin], seqlens_k, total_sequence_length, past."""
    names, inputs = _bindings(rotary, ("past",))
    new = "rotated(row, h, t)" if rotary else "in0[row + h]"
    body = (
        "  let g = params.strides[0];\n"
        "  let h = index % params.head_dim;\n"
        "  let t = (index / params.head_dim) % u32(g.y);\n"
        "  let j = (index / (params.head_dim * u32(g.y))) % u32(g.x);\n"
        "  let b = index / (params.head_dim * u32(g.y) * u32(g.x));\n"
        + _start(names["seqlens"], names["total"])
        + "  if (t >= start && t < start + params.seq) {\n"
        "    let row = (b * params.seq + t - start) * u32(g.z) + u32(g.w) + j * params.head_dim;\n"
        f"    out[index] = {new};\n"
        "  } else {\n"
        f"    out[index] = {names['past']}[index];\n"
        "  }\n"
    )
    fields = (Field("size", "u32"), Field("head_dim", "u32"), Field("seq", "u32"), _GEOMETRY)
    helpers = _rotary(names["cos"], names["sin"]) if rotary else ""
    name = f"KvCacheWrite[{'rotary' if rotary else 'plain'}]"
    return Kernel(name, inputs, "f32", fields, "size", body, helpers)


def attention_kernel(rotary: bool) -> Kernel:
    """Inputs: query source, [cos, sin], seqlens_k, total_sequence_length, present key, present
    value; the output is [batch, seq, heads * head_dim]."""
    names, inputs = _bindings(rotary, ("keys", "values"))
    query = "rotated(qbase, h, position)" if rotary else "in0[qbase + h]"
    keys, values = names["keys"], names["values"]
    score = (
        "    var dot = 0.0;\n"
        "    for (var h = 0u; h < params.head_dim; h++) {\n"
        f"      dot += {query} * {keys}[kbase + t * params.head_dim + h];\n"
        "    }\n"
        "    let score = params.scale * dot;\n"
    )
    body = (
        "  let g = params.strides[0];\n"
        "  let n = index % params.heads;\n"
        "  let s = (index / params.heads) % params.seq;\n"
        "  let b = index / (params.heads * params.seq);\n"
        + _start(names["seqlens"], names["total"])
        + "  let position = start + s;\n"
        "  let kv = n / (params.heads / u32(g.x));\n"
        "  let qbase = (b * params.seq + s) * u32(g.z) + u32(g.w) + n * params.head_dim;\n"
        "  let kbase = (b * u32(g.x) + kv) * u32(g.y) * params.head_dim;\n"
        "  let obase = index * params.head_dim;\n"
        "  var peak = -3.4028235e38;\n"
        "  for (var t = 0u; t <= position; t++) {\n" + score + "    peak = max(peak, score);\n"
        "  }\n"
        "  for (var h = 0u; h < params.head_dim; h++) { out[obase + h] = 0.0; }\n"
        "  var total = 0.0;\n"
        "  for (var t = 0u; t <= position; t++) {\n" + score + "    let p = exp(score - peak);\n"
        "    total += p;\n"
        "    for (var h = 0u; h < params.head_dim; h++) {\n"
        f"      out[obase + h] += p * {values}[kbase + t * params.head_dim + h];\n"
        "    }\n"
        "  }\n"
        "  for (var h = 0u; h < params.head_dim; h++) { out[obase + h] /= total; }\n"
    )
    fields = (
        Field("rows", "u32"),
        Field("heads", "u32"),
        Field("head_dim", "u32"),
        Field("seq", "u32"),
        Field("scale", "f32"),
        _GEOMETRY,
    )
    helpers = _rotary(names["cos"], names["sin"]) if rotary else ""
    name = f"GroupQueryAttention[{'rotary' if rotary else 'plain'}]"
    return Kernel(name, inputs, "f32", fields, "rows", body, helpers)
