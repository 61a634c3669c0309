"""The builtin encoder (``builtin: encoder``): a small transformer encoder built with onnx.helper.

Two styles exercise the two ways encoders reach a WebGPU backend:

- ``compact``: fused ops (LayerNormalization, Gelu), constant reshape shapes, opset 20; input
  ``x`` and output ``y``, both float32 (or, with ``dtype: float16``, float16 throughout)
  [batch, sequence, hidden].
- ``exported``: what ``torch.onnx.export`` writes for a BERT-like encoder, opset 17: embedding
  Gathers, decomposed layer norm, Erf GELU, attention-mask arithmetic, head reshapes whose shapes
  come from Shape->Gather->Unsqueeze->Concat chains, torch-like node names and a Gemm+Tanh
  pooler. Inputs ``input_ids`` and ``attention_mask`` (int64 [batch, sequence]); outputs
  ``last_hidden_state`` [batch, sequence, hidden] and ``pooler_output`` [batch, hidden].

``batch`` and ``sequence`` stay symbolic; each case pins them. Weights come from
``numpy.random.default_rng(params.seed)`` drawn in a fixed order that does not depend on ``eps``
or ``heads``, so a layout changing those constants keeps every weight.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from runner.suite.spec import EncoderParams

STYLES = ("compact", "exported")
ACTIVATIONS = ("gelu", "gelu-tanh", "relu")
# dtype -> the numpy and ONNX element types of the compact style's float tensors
FLOAT_TYPES = {
    "float32": (np.float32, TensorProto.FLOAT),
    "float16": (np.float16, TensorProto.FLOAT16),
}
DIMS = ("batch", "sequence")

# A finite "minus infinity" for masked scores, as recent exporters write (torch.finfo.min):
# softmax gives exactly 0 to masked keys and a fully masked row stays finite.
MASKED_SCORE = float(np.finfo(np.float32).min)


def build_encoder(params: EncoderParams, values: Mapping[str, float] = {}) -> onnx.ModelProto:
    """The encoder for ``params`` with a layout's changed constants (``eps``, ``heads``)."""
    unknown = sorted(set(values) - {"eps", "heads"})
    if unknown:
        raise ValueError(f"encoder values {unknown} are not changeable; expected eps or heads")
    eps = float(values.get("eps", params.eps))
    heads = values.get("heads", params.heads)
    if heads != int(heads) or int(heads) < 1:
        raise ValueError(f"heads must be a positive integer, got {heads}")
    heads = int(heads)
    if params.hidden % heads:
        raise ValueError(f"heads={heads} does not divide hidden={params.hidden}")
    if params.style not in STYLES:
        raise ValueError(f"encoder style {params.style!r}; expected one of {STYLES}")
    if params.activation not in ACTIVATIONS:
        raise ValueError(f"encoder activation {params.activation!r}; expected one of {ACTIVATIONS}")
    if params.dtype not in FLOAT_TYPES or (params.dtype != "float32" and params.style != "compact"):
        raise ValueError(
            f"encoder dtype {params.dtype!r}: float32, or float16 in the compact style"
        )
    weights = _Weights(params)
    if params.style == "compact":
        return _compact(params, weights, eps, heads)
    return _exported(params, weights, eps, heads)


class _Weights:
    """Deterministic small weights: projections ~N(0, 0.1), biases ~N(0, 0.02), gamma ~1."""

    def __init__(self, params: EncoderParams):
        self._rng = np.random.default_rng(params.seed)

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        return self._rng.normal(0.0, std, shape).astype(np.float32)

    def matrix(self, rows: int, cols: int) -> np.ndarray:
        return self.normal((rows, cols), 0.1)

    def bias(self, size: int) -> np.ndarray:
        return self.normal((size,), 0.02)

    def gamma(self, size: int) -> np.ndarray:
        return (1.0 + self.normal((size,), 0.05)).astype(np.float32)


class _Graph:
    """Collects nodes and initializers; names nodes the way torch.onnx does.

    A node is ``{scope}/{op}`` with ``_1``, ``_2``... for repeats within a scope, and its output
    is ``{node}_output_0`` unless given a name.
    """

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._uses: Counter[str] = Counter()

    def weight(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def op(
        self, scope: str, op_type: str, inputs: list[str], output: str | None = None, **attrs
    ) -> str:
        base = f"{scope}/{op_type}"
        count = self._uses[base]
        self._uses[base] += 1
        name = f"{base}_{count}" if count else base
        output = output or f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=name, **attrs))
        return output

    def constant(self, scope: str, value: float | int | list, dtype=np.float32) -> str:
        """A Constant node, as torch writes for literals (scalars stay 0-d)."""
        tensor = numpy_helper.from_array(np.array(value, dtype=dtype))
        return self.op(scope, "Constant", [], value=tensor)


def _model(graph: _Graph, name: str, inputs, outputs, opset: int, ir_version: int):
    model = helper.make_model(
        helper.make_graph(graph.nodes, name, inputs, outputs, graph.initializers),
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="runner.workload.encoder",
    )
    model.ir_version = ir_version
    onnx.checker.check_model(model, full_check=True)
    return model


# --- compact -------------------------------------------------------------------------------


def _compact(params: EncoderParams, w: _Weights, eps: float, heads: int) -> onnx.ModelProto:
    hidden, ffn = params.hidden, params.ffn
    head_dim = hidden // heads
    floats, element = FLOAT_TYPES[params.dtype]
    g = _Graph()

    def weight(name: str, array: np.ndarray) -> str:
        """A float weight in the encoder's element type (drawn in float32 whatever it is)."""
        return g.weight(name, array.astype(floats))

    heads_shape = g.weight("shape.heads", np.array([0, 0, heads, head_dim], np.int64))
    hidden_shape = g.weight("shape.hidden", np.array([0, 0, hidden], np.int64))
    scale = weight("attention.scale", np.array(1.0 / math.sqrt(head_dim)))

    def layer_norm(scope: str, x: str, output: str | None = None) -> str:
        gamma = weight(f"{scope}.weight", w.gamma(hidden))
        beta = weight(f"{scope}.bias", w.bias(hidden))
        return g.op(
            f"/{scope}", "LayerNormalization", [x, gamma, beta], output, axis=-1, epsilon=eps
        )

    def linear(name: str, x: str, rows: int = hidden, cols: int = hidden) -> str:
        matrix = weight(f"{name}.weight", w.matrix(rows, cols))
        bias = weight(f"{name}.bias", w.bias(cols))
        return g.op(f"/{name}", "Add", [g.op(f"/{name}", "MatMul", [x, matrix]), bias])

    def project_heads(name: str, x: str, perm: list[int]) -> str:
        """Linear, then [b, s, hidden] -> [b, heads, s, head_dim] (perm [0, 2, 3, 1]: keys^T)."""
        split = g.op(f"/{name}", "Reshape", [linear(name, x), heads_shape])
        return g.op(f"/{name}", "Transpose", [split], perm=perm)

    x = "x"
    for i in range(params.layers):
        scope = f"layers.{i}"
        normed = layer_norm(f"{scope}.norm1", x)
        q = project_heads(f"{scope}.q", normed, [0, 2, 1, 3])
        k = project_heads(f"{scope}.k", normed, [0, 2, 3, 1])
        v = project_heads(f"{scope}.v", normed, [0, 2, 1, 3])
        att = f"/{scope}/attention"
        scores = g.op(att, "Mul", [g.op(att, "MatMul", [q, k]), scale])
        context = g.op(att, "MatMul", [g.op(att, "Softmax", [scores], axis=-1), v])
        context = g.op(att, "Transpose", [context], perm=[0, 2, 1, 3])
        context = g.op(att, "Reshape", [context, hidden_shape])
        x = g.op(f"/{scope}", "Add", [x, linear(f"{scope}.out", context)])
        inner = linear(f"{scope}.ffn1", layer_norm(f"{scope}.norm2", x), cols=ffn)
        if params.activation == "relu":
            inner = g.op(f"/{scope}", "Relu", [inner])
        else:
            approximate = "tanh" if params.activation == "gelu-tanh" else "none"
            inner = g.op(f"/{scope}", "Gelu", [inner], approximate=approximate)
        x = g.op(f"/{scope}", "Add", [x, linear(f"{scope}.ffn2", inner, rows=ffn)])
    layer_norm("norm", x, output="y")

    io_shape = [*DIMS, hidden]
    return _model(
        g,
        "compact_encoder",
        [helper.make_tensor_value_info("x", element, io_shape)],
        [helper.make_tensor_value_info("y", element, io_shape)],
        opset=20,
        ir_version=9,
    )


# --- exported ------------------------------------------------------------------------------


def _exported(params: EncoderParams, w: _Weights, eps: float, heads: int) -> onnx.ModelProto:
    hidden, ffn = params.hidden, params.ffn
    head_dim = hidden // heads
    g = _Graph()
    matmuls = itertools.count(1000)  # torch names transposed Linear weights onnx::MatMul_<n>

    def dims(scope: str, tensor: str, axes: tuple[int, ...]) -> list[str]:
        """Shape->Gather->Unsqueeze per axis: 1-d int64 dims for a Concat."""
        out = []
        for axis in axes:
            shape = g.op(scope, "Shape", [tensor])
            dim = g.op(scope, "Gather", [shape, g.constant(scope, axis, np.int64)], axis=0)
            out.append(g.op(scope, "Unsqueeze", [dim, g.constant(scope, [0], np.int64)]))
        return out

    def layer_norm(scope: str, name: str, x: str, output: str | None = None) -> str:
        gamma = g.weight(f"{name}.weight", w.gamma(hidden))
        beta = g.weight(f"{name}.bias", w.bias(hidden))
        mean = g.op(scope, "ReduceMean", [x], axes=[-1], keepdims=1)
        centered = g.op(scope, "Sub", [x, mean])
        square = g.op(scope, "Pow", [centered, g.constant(scope, 2.0)])
        variance = g.op(scope, "ReduceMean", [square], axes=[-1], keepdims=1)
        std = g.op(scope, "Sqrt", [g.op(scope, "Add", [variance, g.constant(scope, eps)])])
        normed = g.op(scope, "Mul", [g.op(scope, "Div", [centered, std]), gamma])
        return g.op(scope, "Add", [normed, beta], output)

    def linear(scope: str, name: str, x: str, rows: int = hidden, cols: int = hidden) -> str:
        weight = g.weight(f"onnx::MatMul_{next(matmuls)}", w.matrix(rows, cols))
        bias = g.weight(f"{name}.bias", w.bias(cols))
        return g.op(scope, "Add", [bias, g.op(scope, "MatMul", [x, weight])])

    def split_heads(scope: str, projection: str, transposed: bool) -> str:
        """[b, s, hidden] -> [b, heads, s, head_dim], or [b, heads, head_dim, s] for keys."""
        shape = g.op(
            scope,
            "Concat",
            [
                *dims(scope, projection, (0, 1)),
                g.constant(scope, [heads], np.int64),
                g.constant(scope, [head_dim], np.int64),
            ],
            axis=0,
        )
        perm = [0, 2, 3, 1] if transposed else [0, 2, 1, 3]
        return g.op(scope, "Transpose", [g.op(scope, "Reshape", [projection, shape])], perm=perm)

    # Embeddings: token rows plus position rows [0, sequence).
    word_table = g.weight(
        "embeddings.word_embeddings.weight", w.normal((params.vocab, hidden), 0.02)
    )
    position_table = g.weight(
        "embeddings.position_embeddings.weight", w.normal((params.max_positions, hidden), 0.02)
    )
    words = g.op("/embeddings/word_embeddings", "Gather", [word_table, "input_ids"])
    (sequence,) = dims("/embeddings", "input_ids", (1,))
    positions = g.op(
        "/embeddings",
        "Slice",
        [
            position_table,
            g.constant("/embeddings", [0], np.int64),
            sequence,
            g.constant("/embeddings", [0], np.int64),
        ],
    )
    x = g.op("/embeddings", "Add", [words, positions])
    x = layer_norm(
        "/embeddings/LayerNorm",
        "embeddings.LayerNorm",
        x,
        "last_hidden_state" if params.layers == 0 else None,
    )

    # Additive mask [batch, 1, sequence, sequence]: 0 where attended, MASKED_SCORE elsewhere.
    mask = g.op("", "Unsqueeze", ["attention_mask", g.constant("", [1, 2], np.int64)])
    mask = g.op("", "Cast", [mask], to=TensorProto.FLOAT)
    batch, query_len = dims("", "input_ids", (0, 1))
    score_shape = g.op(
        "", "Concat", [batch, g.constant("", [1], np.int64), query_len, query_len], axis=0
    )
    mask = g.op("", "Expand", [mask, score_shape])
    inverted = g.op("", "Sub", [g.constant("", 1.0), mask])
    attended = g.op("", "Equal", [inverted, g.constant("", 0.0)])
    mask_bias = g.op("", "Where", [attended, inverted, g.constant("", MASKED_SCORE)])

    for i in range(params.layers):
        layer, name = f"/encoder/layer.{i}", f"encoder.layer.{i}"
        attn = f"{layer}/attention/self"

        q = split_heads(attn, linear(f"{attn}/query", f"{name}.attention.self.query", x), False)
        k = split_heads(attn, linear(f"{attn}/key", f"{name}.attention.self.key", x), True)
        v = split_heads(attn, linear(f"{attn}/value", f"{name}.attention.self.value", x), False)
        scores = g.op(
            attn, "Div", [g.op(attn, "MatMul", [q, k]), g.constant(attn, math.sqrt(head_dim))]
        )
        probs = g.op(attn, "Softmax", [g.op(attn, "Add", [scores, mask_bias])], axis=-1)
        context = g.op(attn, "Transpose", [g.op(attn, "MatMul", [probs, v])], perm=[0, 2, 1, 3])
        merged = g.op(
            attn,
            "Concat",
            [*dims(attn, context, (0, 1)), g.constant(attn, [hidden], np.int64)],
            axis=0,
        )
        context = g.op(attn, "Reshape", [context, merged])

        out = f"{layer}/attention/output"
        dense = linear(f"{out}/dense", f"{name}.attention.output.dense", context)
        x = layer_norm(
            f"{out}/LayerNorm", f"{name}.attention.output.LayerNorm", g.op(out, "Add", [dense, x])
        )

        inner = linear(f"{layer}/intermediate/dense", f"{name}.intermediate.dense", x, cols=ffn)
        act = f"{layer}/intermediate/intermediate_act_fn"
        erf = g.op(act, "Erf", [g.op(act, "Div", [inner, g.constant(act, math.sqrt(2.0))])])
        gate = g.op(act, "Add", [erf, g.constant(act, 1.0)])
        gelu = g.op(act, "Mul", [g.op(act, "Mul", [inner, gate]), g.constant(act, 0.5)])

        out = f"{layer}/output"
        dense = linear(f"{out}/dense", f"{name}.output.dense", gelu, rows=ffn)
        last = i == params.layers - 1
        x = layer_norm(
            f"{out}/LayerNorm",
            f"{name}.output.LayerNorm",
            g.op(out, "Add", [dense, x]),
            "last_hidden_state" if last else None,
        )

    first_token = g.op("/pooler", "Gather", [x, g.constant("/pooler", 0, np.int64)], axis=1)
    pooler_weight = g.weight("pooler.dense.weight", w.matrix(hidden, hidden))  # [out, in]
    pooler_bias = g.weight("pooler.dense.bias", w.bias(hidden))
    pooled = g.op(
        "/pooler/dense",
        "Gemm",
        [first_token, pooler_weight, pooler_bias],
        alpha=1.0,
        beta=1.0,
        transB=1,
    )
    g.op("/pooler/activation", "Tanh", [pooled], "pooler_output")

    return _model(
        g,
        "main_graph",
        [
            helper.make_tensor_value_info(n, TensorProto.INT64, list(DIMS))
            for n in ("input_ids", "attention_mask")
        ],
        [
            helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*DIMS, hidden]),
            helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", hidden]),
        ],
        opset=17,
        ir_version=8,
    )
