"""The genai-style decoder: its graph, the CPU generation loop, and the loop on wgpu (lavapipe
here) eager and captured, step by step against the CPU.

Tolerances: float32 logits and caches within 1e-4 of the CPU (the same float arithmetic summed in
another order over at most 128 terms; observed 1e-6). Quantized at accuracy_level 0 the same;
at the builder's accuracy_level 4 onnxruntime's CPU MatMulNBits quantizes the activations to
int8 per block of 32 (an error up to max|a|/254 each) while wgpu dequantizes the weights
exactly, so logits of std 1 differ by up to 0.045 here: 0.1.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import pytest

from runner.backends.wgpu.device import Device
from runner.backends.wgpu.executor import Session
from runner.backends.wgpu.faults import Faults
from runner.backends.wgpu.prepare import prepare
from runner.compare import compare
from runner.errors import EnvironmentUnusable
from runner.suite.spec import DecoderParams, Tolerance
from runner.workload.decoder import (
    DecodeStep,
    Generation,
    build_decoder,
    cpu_step_runner,
    generate_reference,
    quantize_blockwise,
)

PROMPT = [3, 17, 42, 8, 29]
STEPS = 3
FLOAT = Tolerance(abs=1e-4, rel=1e-4)
LEVEL4 = Tolerance(abs=0.1, rel=0.0)


class DeviceSteps:
    """A generation loop's steps on one wgpu device, for ``Generation`` to drive with the
    caches fed from the host: the decoder's kernels checked step by step, apart from the
    backend's own loop (which keeps the caches on the device). Each input shape gets a session
    of its own; with ``capture`` its first run records and later runs replay. ``recorded``:
    per capture run, whether that run recorded."""

    def __init__(self, device: Device, model: bytes, capture: bool):
        self.device, self.model, self.capture = device, model, capture
        self.sessions: dict[tuple, Session] = {}
        self.recorded: list[bool] = []

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        shapes = tuple((name, np.shape(value)) for name, value in inputs.items())
        if shapes not in self.sessions:
            plan = prepare(self.model, inputs)
            self.sessions[shapes] = Session(self.device, plan, len(self.device.sessions) + 1)
            self.device.sessions[(self.model, shapes)] = self.sessions[shapes]
        session = self.sessions[shapes]
        if not self.capture:
            return session.run_eager(inputs)[0]
        recording, recorded = session.capture(Faults())
        self.recorded.append(recorded)
        return session.replay(recording, inputs)[0]


def op_types(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node if n.op_type != "Constant"]


def test_the_graph_is_the_builders():
    params = DecoderParams(layers=2)
    model = build_decoder(params)
    layer = ["MatMul", "GroupQueryAttention", "MatMul", "SkipSimplifiedLayerNormalization"]
    layer += ["MatMul", "MatMul", "Sigmoid", "Mul", "Mul", "MatMul"]
    mask = ["ReduceSum", "Sub", "Cast", "Shape", "Gather", "Cast"]
    assert op_types(model) == [
        *mask,
        "Gather",
        "SimplifiedLayerNormalization",
        *layer,
        "SkipSimplifiedLayerNormalization",
        *layer,
        "SkipSimplifiedLayerNormalization",
        "MatMul",
    ]
    assert [i.name for i in model.graph.input] == [
        "input_ids",
        "attention_mask",
        "past_key_values.0.key",
        "past_key_values.0.value",
        "past_key_values.1.key",
        "past_key_values.1.value",
    ]
    assert [o.name for o in model.graph.output] == [
        "logits",
        "present.0.key",
        "present.0.value",
        "present.1.key",
        "present.1.value",
    ]
    attention = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    assert attention.name == "/model/layers.0/attn/GroupQueryAttention"
    assert list(attention.input) == [
        "/model/layers.0/attn/qkv_proj/MatMul/output_0",
        "",
        "",
        "past_key_values.0.key",
        "past_key_values.0.value",
        "/model/attn_mask_reformat/attn_mask_subgraph/Sub/Cast/output_0",
        "/model/attn_mask_reformat/attn_mask_subgraph/Gather/Cast/output_0",
        "cos_cache",
        "sin_cache",
    ]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in attention.attribute}
    assert attrs["do_rotary"] == 1 and attrs["kv_num_heads"] == 2 and attrs["num_heads"] == 4
    cos = next(i for i in model.graph.initializer if i.name == "cos_cache")
    assert list(cos.dims) == [params.max_length, params.head_size // 2]


def test_static_mask_and_quantized_forms():
    static = op_types(build_decoder(DecoderParams(static_mask=True)))
    assert static[:5] == ["Cast", "ReduceSum", "Sub", "ReduceMax", "Gather"]
    assert "Shape" not in static
    quantized = op_types(build_decoder(DecoderParams(quantized=True)))
    assert "MatMul" not in quantized
    assert quantized.count("MatMulNBits") == 2 * 5 + 1


def test_blockwise_quantization_is_within_half_a_step():
    weight = np.random.default_rng(1).normal(0, 1, (70, 5)).astype(np.float32)
    packed, scales = quantize_blockwise(weight, 32)
    assert packed.shape == (5, 3, 16) and packed.dtype == np.uint8 and scales.shape == (15,)
    levels = np.stack([packed & 15, packed >> 4], axis=-1).reshape(5, 96).astype(np.float32)
    restored = ((levels - 8) * np.repeat(scales.reshape(5, 3), 32, axis=1))[:, :70].T
    step = np.repeat(scales.reshape(5, 3), 32, axis=1)[:, :70].T
    assert np.all(np.abs(restored - weight) <= step / 2 + 1e-6)


@pytest.mark.parametrize(
    "params, message",
    [
        (dict(hidden=48, heads=4), "multiple of 16"),
        (dict(heads=4, kv_heads=3), "does not divide heads"),
        (dict(block_size=24), "power of 2"),
    ],
)
def test_bad_parameters_say_what_is_expected(params, message):
    with pytest.raises(ValueError, match=message):
        DecoderParams(**params)


def test_a_loop_longer_than_the_caches_is_refused():
    params = DecoderParams(max_length=8)
    model = build_decoder(params).SerializeToString()
    with pytest.raises(ValueError, match=r"need 9 positions: expected at most max_length \(8\)"):
        generate_reference(model, params, PROMPT, 4)
    with pytest.raises(ValueError, match=r"a prefill of 9 tokens: expected 1 to max_length"):
        Generation(params, cpu_step_runner(model)).prefill(list(range(9)))
    generation = Generation(params, cpu_step_runner(model))
    generation.prefill(list(range(8)))
    with pytest.raises(ValueError, match="decode step at position 8"):
        generation.decode()


@pytest.fixture(scope="module")
def reference() -> tuple[DecoderParams, bytes, tuple[DecodeStep, ...]]:
    params = DecoderParams()
    model = build_decoder(params).SerializeToString()
    return params, model, generate_reference(model, params, PROMPT, STEPS)


def test_the_reference_loop_shares_and_advances_the_caches(reference):
    params, _, steps = reference
    assert [s.inputs["input_ids"].shape for s in steps] == [(1, 5), (1, 1), (1, 1), (1, 1)]
    assert [s.inputs["attention_mask"].shape[1] for s in steps] == [5, 6, 7, 8]
    for before, after in zip(steps, steps[1:], strict=False):
        assert after.inputs["input_ids"][0, 0] == before.token  # greedy: fed the last choice
        np.testing.assert_array_equal(
            after.inputs["past_key_values.1.value"], before.outputs["present.1.value"]
        )
    final = steps[-1].outputs["present.0.key"]
    assert final.shape == (1, params.kv_heads, params.max_length, params.head_size)
    assert np.all(final[:, :, 8:] == 0) and np.all(np.abs(final[:, :, :8]).sum(axis=-1) > 0)
    logits = steps[0].outputs["logits"]
    assert logits.shape == (1, 5, params.vocab) and 0.3 < logits.std() < 3  # well conditioned


def test_the_static_mask_form_generates_the_same(reference):
    params, _, steps = reference
    static = DecoderParams(static_mask=True)
    model = build_decoder(static).SerializeToString()
    other = generate_reference(model, static, PROMPT, STEPS)
    assert [s.inputs["attention_mask"].shape[1] for s in other] == [params.max_length] * 4
    assert [s.token for s in other] == [s.token for s in steps]
    for a, b in zip(other, steps, strict=True):
        assert compare(a.outputs["logits"], b.outputs["logits"], FLOAT).ok


def test_a_rewind_recomputes_the_step_on_cleared_positions(reference):
    params, model, steps = reference
    generation = Generation(params, cpu_step_runner(model))
    generation.prefill(PROMPT)
    first, second = generation.decode(), generation.decode()
    generation.rewind(len(PROMPT))
    again = generation.decode()
    np.testing.assert_array_equal(again.outputs["logits"], first.outputs["logits"])
    assert again.token == first.token == steps[1].token
    # the stale positions are zeroed (an eager present holds zeros there), so the step's
    # present is the first's; the step before the rewind keeps what it returned
    assert not again.inputs["past_key_values.0.value"][:, :, len(PROMPT) :].any()
    np.testing.assert_array_equal(
        again.outputs["present.0.value"], first.outputs["present.0.value"]
    )
    assert second.outputs["present.0.value"][:, :, len(PROMPT) + 1].any()
    with pytest.raises(ValueError, match="rewind to 9"):
        generation.rewind(9)


# --- wgpu -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def device():
    try:
        opened = Device.open(None)
    except EnvironmentUnusable as error:
        pytest.skip(f"no wgpu adapter: {error}")
    yield opened
    opened.device.destroy()


def assert_same_loop(
    got: tuple[DecodeStep, ...], expected: tuple[DecodeStep, ...], tolerance: Tolerance
) -> None:
    assert [s.token for s in got] == [s.token for s in expected]
    for index, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
        assert set(mine.outputs) == set(theirs.outputs)
        for name, value in theirs.outputs.items():
            comparison = compare(mine.outputs[name], value, tolerance)
            assert comparison.ok, f"step {index} {name}: {comparison}"


@pytest.mark.gpu
@pytest.mark.parametrize(
    "params, tolerance",
    [
        (DecoderParams(), FLOAT),
        (DecoderParams(static_mask=True, kv_heads=1), FLOAT),
        (DecoderParams(quantized=True, accuracy_level=0), FLOAT),
        (DecoderParams(quantized=True), LEVEL4),
    ],
    ids=["float", "static-mask-mqa", "int4-level0", "int4-level4"],
)
def test_wgpu_eager_generates_what_the_cpu_does(device, params, tolerance):
    """Prefill and 3 decode steps, each backend feeding its own present caches back."""
    model = build_decoder(params).SerializeToString()
    expected = generate_reference(model, params, PROMPT, STEPS)
    generation = Generation(params, DeviceSteps(device, model, capture=False))
    got = (generation.prefill(PROMPT), *(generation.decode() for _ in range(STEPS)))
    assert_same_loop(got, expected, tolerance)


@pytest.mark.gpu
def test_wgpu_captured_decode_steps_replay_with_each_new_token_and_length(device):
    """With the static mask every decode step has one shape: the first records, the others
    replay the recording with the new token, mask and caches, and still match the CPU."""
    params = DecoderParams(static_mask=True)
    model = build_decoder(params).SerializeToString()
    expected = generate_reference(model, params, PROMPT, STEPS)
    steps = DeviceSteps(device, model, capture=True)
    generation = Generation(params, steps)
    got = (generation.prefill(PROMPT), *(generation.decode() for _ in range(STEPS)))
    assert_same_loop(got, expected, FLOAT)
    assert len(steps.sessions) == 2  # the prefill's shape and the decode steps' shape
    assert steps.recorded == [True, True, False, False]
