"""A Llama-style decoder as onnxruntime-genai's model builder writes it; its CPU generation loop.

The graph follows ``src/python/py/models/builders/base.py`` of microsoft/onnxruntime-genai
(``Model`` for ``ep`` cpu or webgpu, float32 or, with ``dtype: float16``, float16 as its fp16
precision writes every float tensor): for those EPs the builder picks
GroupQueryAttention with ``past_present_share_buffer``, a packed QKV MatMul and rotary embedding
inside GQA (``do_rotary=1``, ``cos_cache``/``sin_cache`` initializers of [max_length,
head_size/2]; no ``position_ids`` input, no separate RotaryEmbedding). Per layer:
SimplifiedLayerNormalization (layer 0's input norm, ONNX domain as ORT registers it) or
com.microsoft SkipSimplifiedLayerNormalization (every later norm; its output 3, the residual
sum, feeds the next one), qkv_proj MatMul, GroupQueryAttention, o_proj MatMul, the gated MLP
(gate_proj, up_proj, Sigmoid and Mul for SiLU, Mul, down_proj), then a final
SkipSimplifiedLayerNormalization and the lm_head MatMul writing ``logits``. Names of nodes,
initializers and inputs/outputs are the builder's (``/model/layers.0/attn/qkv_proj/MatMul``,
``past_key_values.0.key``, ``present.0.key``...).

The attention-mask subgraph is the builder's ``make_attention_mask_standard_reformatting_for_gqa``
(ReduceSum - 1, Cast int32 for ``seqlens_k``; Shape, Gather, Cast int32 for
``total_sequence_length``), or with ``static_mask`` its ``enable_webgpu_graph`` form (Cast int32,
ReduceSum, Sub; ReduceMax): there the mask is [batch, max_length], fixed across decode steps, and
no Shape op runs on the CPU, which is what graph capture needs (microsoft/onnxruntime#26384).

``quantized``: every MatMul becomes com.microsoft MatMulNBits (4 bits, symmetric, no zero
points), packed here the way onnxruntime's MatMulNBitsQuantizer (RTN) packs, since that
quantizer needs onnx_ir. ``accuracy_level`` is the builder's ``int4_accuracy_level`` (4 for cpu
and webgpu): at 4 onnxruntime's CPU kernel quantizes the activations to int8 per block, so it
differs from an exact dequantization by about 0.05 on these logits; at 0 it computes in float.

Left out: tied embeddings, biases, rope scaling, sliding windows, softcap, LoRA, the QDQ format,
the genai_config.json and tokenizer files. Dims stay symbolic as the builder writes them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.defs import OpSchema

from runner.suite.spec import DecoderParams, GenerationLoop, Rewind

MS_DOMAIN = "com.microsoft"
OPSET = 21
EPSILON = 1e-6  # the builder's default rms_norm_eps
ROPE_THETA = 10000.0
QUANT_BITS = 4


def build_decoder(params: DecoderParams) -> onnx.ModelProto:
    """The decoder for ``params``, checked by onnx.checker (with ORT's schema for the
    ONNX-domain SimplifiedLayerNormalization, which onnx itself does not define)."""
    graph = _Graph(np.random.default_rng(params.seed), params)
    seqlens_k, total = graph.mask()
    cos, sin = _rotary_caches(params)
    cos_cache, sin_cache = graph.weight("cos_cache", cos), graph.weight("sin_cache", sin)
    embedding = graph.weight(
        "model.embed_tokens.weight", graph.normal((params.vocab, params.hidden), 1.0)
    )
    root = graph.node("Gather", "/model/embed_tokens/Gather", [embedding, "input_ids"])
    skip = ""
    for i in range(params.layers):
        scope = f"/model/layers.{i}"
        normed, root = graph.norm(f"{i}.input", root, skip)
        qkv_size = (params.heads + 2 * params.kv_heads) * params.head_size
        qkv = graph.matmul(f"{scope}/attn/qkv_proj/MatMul", normed, (params.hidden, qkv_size))
        attention = graph.node(
            "GroupQueryAttention",
            f"{scope}/attn/GroupQueryAttention",
            [qkv, "", "", *_cache_names("past_key_values", i), seqlens_k, total],
            extra_inputs=[cos_cache, sin_cache],
            outputs=_cache_names("present", i),
            domain=MS_DOMAIN,
            num_heads=params.heads,
            kv_num_heads=params.kv_heads,
            scale=1.0 / math.sqrt(params.head_size),
            local_window_size=-1,
            softcap=0.0,
            do_rotary=1,
            rotary_interleaved=0,
        )
        skip = graph.matmul(f"{scope}/attn/o_proj/MatMul", attention, (params.hidden,) * 2)
        normed, root = graph.norm(f"{i}.post_attention", root, skip)
        inner = (params.hidden, params.intermediate)
        gate = graph.matmul(f"{scope}/mlp/gate_proj/MatMul", normed, inner)
        up = graph.matmul(f"{scope}/mlp/up_proj/MatMul", normed, inner)
        sigmoid = graph.node("Sigmoid", f"{scope}/mlp/act_fn/Sigmoid", [gate])
        silu = graph.node("Mul", f"{scope}/mlp/act_fn/Mul", [gate, sigmoid])
        product = graph.node("Mul", f"{scope}/mlp/Mul", [silu, up])
        skip = graph.matmul(f"{scope}/mlp/down_proj/MatMul", product, inner[::-1])
    final, _ = graph.norm(f"{params.layers}.final_norm", root, skip, last=True)
    graph.matmul("/lm_head/MatMul", final, (params.hidden, params.vocab), output="logits")
    model = graph.model()
    with _onnx_domain_contrib_schemas():
        onnx.checker.check_model(model)
    return model


def _cache_names(prefix: str, layer: int) -> list[str]:
    return [f"{prefix}.{layer}.key", f"{prefix}.{layer}.value"]


def cache_names(params: DecoderParams) -> list[str]:
    """The past KV-cache inputs, every layer's key and value (``present.*`` the outputs)."""
    return [
        name for layer in range(params.layers) for name in _cache_names("past_key_values", layer)
    ]


def _rotary_caches(params: DecoderParams) -> tuple[np.ndarray, np.ndarray]:
    """The builder's caches from scratch: [max_length, head_size/2] cos and sin."""
    dim = params.head_size
    inv_freq = 1.0 / ROPE_THETA ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    freqs = np.outer(np.arange(params.max_length, dtype=np.float64), inv_freq)
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)


class _Graph:
    """Nodes, initializers and constants named as the builder names them."""

    def __init__(self, rng: np.random.Generator, params: DecoderParams):
        self.rng = rng
        self.params = params
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.constants: set[str] = set()

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        return self.rng.normal(0.0, std, shape).astype(np.float32)

    def weight(self, name: str, array: np.ndarray) -> str:
        """An initializer; a float one in the model's float type (``dtype``)."""
        if array.dtype.kind == "f":
            array = array.astype(self.params.dtype)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def constant(self, dtype: type, value: int | list[int]) -> str:
        """``/model/constants/{TYPE}/{value}``, made by a Constant node once, as the builder
        does."""
        tag = {np.int64: "INT64", np.int32: "INT32"}[dtype]
        name = f"/model/constants/{tag}/{value}"
        if name not in self.constants:
            self.constants.add(name)
            tensor = numpy_helper.from_array(np.array(value, dtype=dtype))
            node_name = name.replace("constants", "constant_nodes")
            self.nodes.append(
                helper.make_node("Constant", [], [name], name=node_name, value=tensor)
            )
        return name

    def node(
        self,
        op_type: str,
        name: str,
        inputs: Sequence[str],
        extra_inputs: Sequence[str] = (),
        outputs: Sequence[str] = (),
        domain: str = "",
        **attrs,
    ) -> str:
        """Add a node; its first output is ``{name}/output_0``, then ``outputs``."""
        first = f"{name}/output_0"
        self.nodes.append(
            helper.make_node(
                op_type,
                [*inputs, *extra_inputs],
                [first, *outputs],
                name=name,
                domain=domain,
                **attrs,
            )
        )
        return first

    def matmul(self, name: str, x: str, shape: tuple[int, int], output: str = "") -> str:
        """``x @ W`` for W of ``shape`` ~ N(0, 1/sqrt(rows)), so activations keep their scale;
        MatMulNBits when quantized."""
        p = self.params
        rows, columns = shape
        weight = self.normal((rows, columns), 1.0 / math.sqrt(rows))
        base = name[1:].replace("/", ".")
        if not p.quantized:
            inputs = [x, self.weight(f"{base}.weight", weight)]
            op, extra = "MatMul", {}
        else:
            packed, scales = quantize_blockwise(weight, p.block_size)
            name = f"{name}NBits"
            base = name[1:].replace("/", ".")
            inputs = [
                x,
                self.weight(f"{base}.qweight", packed),
                self.weight(f"{base}.scales", scales),
            ]
            op = "MatMulNBits"
            extra = dict(
                domain=MS_DOMAIN,
                accuracy_level=p.accuracy_level,
                bits=QUANT_BITS,
                block_size=p.block_size,
                K=rows,
                N=columns,
            )
        if output:
            self.nodes.append(helper.make_node(op, inputs, [output], name=name, **extra))
            return output
        return self.node(op, name, inputs, **extra)

    def norm(self, location: str, root: str, skip: str, last: bool = False) -> tuple[str, str]:
        """The builder's make_layernorm: SimplifiedLayerNormalization without a skip input,
        else SkipSimplifiedLayerNormalization. Returns (normalized, the next root input)."""
        layer, where = location.split(".", 1)
        scope = f"/model/layers.{layer}/{where}_layernorm"
        gamma = self.weight(
            f"model.layers.{layer}.{where}_layernorm.weight",
            (1.0 + self.normal((self.params.hidden,), 0.05)).astype(np.float32),
        )
        output_0 = f"{scope}/output_0"
        if not skip:
            self.nodes.append(
                helper.make_node(
                    "SimplifiedLayerNormalization",
                    [root, gamma],
                    [output_0],
                    name=f"{scope}/LayerNorm",
                    epsilon=EPSILON,
                    axis=-1,
                    stash_type=1,
                )
            )
            return output_0, root
        outputs = [output_0] if last else [output_0, "", "", f"{scope}/output_3"]
        self.nodes.append(
            helper.make_node(
                "SkipSimplifiedLayerNormalization",
                [root, skip, gamma],
                outputs,
                name=f"{scope}/SkipLayerNorm",
                domain=MS_DOMAIN,
                epsilon=EPSILON,
            )
        )
        return output_0, outputs[-1]

    def mask(self) -> tuple[str, str]:
        """seqlens_k and total_sequence_length from attention_mask (the module docstring)."""
        scope = "/model/attn_mask_reformat/attn_mask_subgraph"
        axis = self.constant(np.int64, [1])
        if self.params.static_mask:
            ints = self.node("Cast", f"{scope}/Cast", ["attention_mask"], to=TensorProto.INT32)
            sums = self.node("ReduceSum", f"{scope}/ReduceSum", [ints, axis], keepdims=0)
            one = self.constant(np.int32, [1])
            seqlens_k = self.node("Sub", f"{scope}/Sub", [sums, one])
            total = self.node("ReduceMax", f"{scope}/ReduceMax", [sums], keepdims=0)
            return seqlens_k, total
        sums = self.node("ReduceSum", f"{scope}/ReduceSum", ["attention_mask", axis], keepdims=0)
        lengths = self.node("Sub", f"{scope}/Sub", [sums, axis])
        seqlens_k = self.node("Cast", f"{scope}/Sub/Cast", [lengths], to=TensorProto.INT32)
        shape = self.node("Shape", f"{scope}/Shape", ["attention_mask"])
        width = self.node("Gather", f"{scope}/Gather", [shape, self.constant(np.int64, 1)], axis=0)
        total = self.node("Cast", f"{scope}/Gather/Cast", [width], to=TensorProto.INT32)
        return seqlens_k, total

    def model(self) -> onnx.ModelProto:
        p = self.params
        floats = helper.np_dtype_to_tensor_dtype(np.dtype(p.dtype))
        cache = ["batch_size", p.kv_heads, "past_sequence_length", p.head_size]
        present = ["batch_size", p.kv_heads, "total_sequence_length", p.head_size]
        inputs = [
            helper.make_tensor_value_info(
                "input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]
            ),
            helper.make_tensor_value_info(
                "attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]
            ),
        ]
        outputs = [
            helper.make_tensor_value_info(
                "logits", floats, ["batch_size", "sequence_length", p.vocab]
            )
        ]
        for i in range(p.layers):
            inputs += [
                helper.make_tensor_value_info(n, floats, cache)
                for n in _cache_names("past_key_values", i)
            ]
            outputs += [
                helper.make_tensor_value_info(n, floats, present)
                for n in _cache_names("present", i)
            ]
        graph = helper.make_graph(self.nodes, "main_graph", inputs, outputs, self.initializers)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)],
            producer_name="onnxruntime-genai",
        )
        model.ir_version = 10
        return model


def quantize_blockwise(weight: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """MatMulNBits' B and scales for a [K, N] weight: symmetric 4-bit RTN per block of
    ``block_size`` along K (zero point 8, implied), K padded with zeros to whole blocks.
    B is uint8 [N, blocks, block_size/2], two values a byte, the lower first; scales [N*blocks]."""
    rows, columns = weight.shape
    blocks = -(-rows // block_size)
    padded = np.zeros((blocks * block_size, columns), np.float32)
    padded[:rows] = weight
    grouped = padded.T.reshape(columns, blocks, block_size)
    peak = np.abs(grouped).max(axis=2, keepdims=True)
    scales = np.where(peak > 0, peak / 7.0, 1.0).astype(np.float32)
    levels = np.clip(np.round(grouped / scales) + 8, 0, 15).astype(np.uint8)
    packed = levels[..., 0::2] | (levels[..., 1::2] << 4)
    return packed, scales.reshape(-1)


@contextlib.contextmanager
def _onnx_domain_contrib_schemas() -> Iterator[None]:
    """SimplifiedLayerNormalization's schema in the ONNX domain, as onnxruntime registers it,
    for as long as the block runs (onnx's own registry has none, so its checker would refuse
    every model the genai builder writes)."""
    schema = OpSchema(
        "SimplifiedLayerNormalization",
        "",
        1,
        inputs=[
            OpSchema.FormalParameter("X", "T"),
            OpSchema.FormalParameter("scale", "V"),
        ],
        outputs=[
            OpSchema.FormalParameter("Y", "V"),
            OpSchema.FormalParameter(
                "inv_std_var", "U", param_option=OpSchema.FormalParameterOption.Optional
            ),
        ],
        type_constraints=[
            ("T", ["tensor(float)", "tensor(float16)", "tensor(double)", "tensor(bfloat16)"], ""),
            ("U", ["tensor(float)", "tensor(double)"], ""),
            ("V", ["tensor(float)", "tensor(float16)", "tensor(double)", "tensor(bfloat16)"], ""),
        ],
        attributes=[
            OpSchema.Attribute("axis", OpSchema.AttrType.INT, "", required=False),
            OpSchema.Attribute("epsilon", OpSchema.AttrType.FLOAT, "", required=False),
            OpSchema.Attribute("stash_type", OpSchema.AttrType.INT, "", required=False),
        ],
    )
    onnx.defs.register_schema(schema)
    try:
        yield
    finally:
        onnx.defs.deregister_schema(schema.name, schema.since_version, schema.domain)


# --- the generation loop --------------------------------------------------------------------

# One run of the model: inputs by name to outputs by name (logits and present caches).
StepRunner = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class DecodeStep:
    """One run of the loop: what it was fed, what it returned, and the greedy next token."""

    inputs: Mapping[str, np.ndarray]
    outputs: Mapping[str, np.ndarray]
    token: int  # argmax of the last position's logits: what the next step feeds


class Generation:
    """Greedy generation with batch 1, as onnxruntime-genai drives a past_present_share_buffer
    model: each layer's KV cache is a [1, kv_heads, max_length, head_size] buffer, fed as past
    and returned as present with the step's keys and values written at their positions; the
    total length advances by the tokens fed. ``run`` executes one step (a CPU session, a
    backend), so every backend can be driven through the same loop."""

    def __init__(self, params: DecoderParams, run: StepRunner):
        self.params = params
        self.run = run
        shape = (1, params.kv_heads, params.max_length, params.head_size)
        self.caches = {name: np.zeros(shape, params.cache_dtype) for name in cache_names(params)}
        self.tokens: list[int] = []  # the prompt and every chosen token
        self.cached = 0  # positions the caches hold: the total length so far

    def prefill(self, prompt: Sequence[int]) -> DecodeStep:
        if not 1 <= len(prompt) <= self.params.max_length:
            raise ValueError(
                f"a prefill of {len(prompt)} tokens: expected 1 to max_length "
                f"({self.params.max_length}) tokens"
            )
        if self.cached:
            raise ValueError("prefill starts a generation: this one has already run")
        self.tokens = [int(t) for t in prompt]
        return self._step(self.tokens)

    def decode(self) -> DecodeStep:
        """Feed the newest token at the next position."""
        if not self.cached:
            raise ValueError("decode needs a prefill first")
        if self.cached >= self.params.max_length:
            raise ValueError(
                f"a decode step at position {self.cached}: the caches hold max_length "
                f"({self.params.max_length}) positions"
            )
        return self._step(self.tokens[self.cached :])

    def rewind(self, length: int) -> None:
        """Go back to ``length`` cached positions, as genai's rewind_to: the next decode feeds
        the token at ``length`` again. genai's shared cache keeps the stale positions past it,
        which no kernel may read; they are zeroed here, because a present cache in a buffer of
        its own (an eager run's, onnxruntime's) holds zeros there, and every present is judged
        whole. A replay that still attends past ``length`` reads zeros for the keys it had, and
        its logits differ all the same."""
        if not 1 <= length <= self.cached:
            raise ValueError(f"rewind to {length}: expected 1 to {self.cached} (cached so far)")
        self.cached = length
        del self.tokens[length + 1 :]
        self.caches = {name: cache.copy() for name, cache in self.caches.items()}  # not a step's
        for cache in self.caches.values():
            cache[:, :, length:] = 0

    def _step(self, fed: Sequence[int]) -> DecodeStep:
        total = self.cached + len(fed)
        width = self.params.max_length if self.params.static_mask else total
        mask = np.zeros((1, width), np.int64)
        mask[0, :total] = 1
        inputs = {"input_ids": np.array([fed], np.int64), "attention_mask": mask, **self.caches}
        outputs = dict(self.run(inputs))
        self.caches = {
            past: outputs[past.replace("past_key_values", "present")] for past in self.caches
        }
        token = int(np.argmax(outputs["logits"][0, -1]))
        self.cached = total
        self.tokens.append(token)
        return DecodeStep(inputs, outputs, token)


def cpu_step_runner(model: bytes) -> StepRunner:
    """Steps on onnxruntime's CPU EP with past and present bound to one buffer per cache
    (IOBinding), so the CPU's GroupQueryAttention takes its shared-buffer path, as genai's."""
    import onnxruntime as ort  # not on the import path of `list` and `validate`

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def run(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        binding = session.io_binding()
        binding.bind_output("logits")
        shared = {}
        for name, value in inputs.items():
            buffer = ort.OrtValue.ortvalue_from_numpy(np.array(value))  # a copy the run owns
            binding.bind_ortvalue_input(name, buffer)
            if name.startswith("past_key_values."):
                present = name.replace("past_key_values", "present")
                binding.bind_ortvalue_output(present, buffer)
                shared[present] = buffer
        session.run_with_iobinding(binding)
        logits = binding.copy_outputs_to_cpu()[0]
        return {"logits": logits, **{n: np.array(b.numpy()) for n, b in shared.items()}}

    return run


def generate_reference(
    model: bytes,
    params: DecoderParams,
    prompt: Sequence[int],
    steps: int,
    rewind: Rewind | None = None,
) -> tuple[DecodeStep, ...]:
    """The prefill of ``prompt`` and ``steps`` greedy decode steps on onnxruntime's CPU; with
    ``rewind``, the sequence goes back ``rewind.by`` positions after decode step
    ``rewind.after``."""
    loop = GenerationLoop(len(prompt), steps, rewind)
    if steps < 0 or loop.positions > params.max_length:
        raise ValueError(
            f"a prefill of {len(prompt)} tokens and {steps} decode steps need "
            f"{loop.positions} positions: expected at most max_length ({params.max_length})"
        )
    generation = Generation(params, cpu_step_runner(model))
    done = [generation.prefill(prompt)]
    for step in range(1, steps + 1):
        done.append(generation.decode())
        if rewind is not None and step == rewind.after:
            generation.rewind(generation.cached - rewind.by)
    return tuple(done)
