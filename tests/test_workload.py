"""The builtin encoder, layout variants, inputs and ``materialize``, run in onnxruntime CPU."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from runner.matrix import Case
from runner.schedule import BASE
from runner.suite.spec import (
    BackendTarget,
    EncoderParams,
    InputSpec,
    Layout,
    ModelSpec,
    Shape,
    Suite,
    Tolerance,
)
from runner.workload import Feed, input_schedule, materialize
from runner.workload.encoder import build_encoder
from runner.workload.inputs import make_inputs, vary_given
from runner.workload.variants import apply_layout

WGPU_OPS = {
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Tanh", "Relu", "Gelu",
    "Softmax", "LayerNormalization", "ReduceMean", "Transpose", "Reshape", "Gather", "Where",
    "Cast", "Expand", "Unsqueeze", "Squeeze", "Concat", "Slice", "Equal", "Constant", "Shape",
}  # fmt: skip
COMPACT = EncoderParams(style="compact")
EXPORTED = EncoderParams(style="exported")
FORWARD = ("eps", "heads", "scale", "hidden")
BACKWARD = tuple(reversed(FORWARD))


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def feeds_for(params: EncoderParams, batch: int, sequence: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    if params.style == "compact":
        return {"x": rng.uniform(-1, 1, (batch, sequence, params.hidden)).astype(np.float32)}
    return {
        "input_ids": rng.integers(0, params.vocab, (batch, sequence)),
        "attention_mask": np.ones((batch, sequence), np.int64),
    }


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


# --- encoder -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        COMPACT,
        EncoderParams(style="compact", activation="gelu-tanh"),
        EncoderParams(style="compact", activation="relu", layers=1),
        EXPORTED,
    ],
    ids=["compact-gelu", "compact-gelu-tanh", "compact-relu", "exported"],
)
@pytest.mark.parametrize(("batch", "sequence"), [(1, 16), (2, 7)])
def test_encoder_is_valid_and_runs(params: EncoderParams, batch: int, sequence: int):
    model = build_encoder(params)
    onnx.checker.check_model(model, full_check=True)
    assert {node.op_type for node in model.graph.node} <= WGPU_OPS
    dims = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim[:2]]
    assert dims == ["batch", "sequence"]

    outputs = run(model, feeds_for(params, batch, sequence))

    expected = [(batch, sequence, params.hidden)]
    if params.style == "exported":
        expected.append((batch, params.hidden))
    assert [o.shape for o in outputs] == expected
    for output in outputs:
        assert np.isfinite(output).all()
        assert 0.1 < float(np.abs(output).max()) < 10  # O(1), not vanishing or exploding


def test_encoder_is_deterministic_and_seeded():
    feeds = feeds_for(COMPACT, 1, 8)
    assert build_encoder(COMPACT).SerializeToString() == build_encoder(COMPACT).SerializeToString()
    other_seed = EncoderParams(style="compact", seed=1)
    assert max_diff(run(build_encoder(COMPACT), feeds), run(build_encoder(other_seed), feeds)) > 0.1


def test_exported_encoder_looks_exported():
    model = build_encoder(EXPORTED)
    assert model.opset_import[0].version == 17 and model.opset_import[0].domain == ""
    names = {node.name for node in model.graph.node}
    assert "/encoder/layer.0/attention/self/query/MatMul" in names
    assert "/pooler/dense/Gemm" in names
    producers = {out: node for node in model.graph.node for out in node.output}
    reshapes = [node for node in model.graph.node if node.op_type == "Reshape"]
    assert len(reshapes) == 4 * EXPORTED.layers  # q, k, v split and the context merge
    # head shapes are computed from the input's shape, not constant
    assert {producers[r.input[1]].op_type for r in reshapes} == {"Concat"}


@pytest.mark.parametrize("params", [COMPACT, EXPORTED], ids=["compact", "exported"])
def test_eps_value_changes_outputs(params: EncoderParams):
    feeds = feeds_for(params, 1, 16)
    default = run(build_encoder(params), feeds)
    changed = run(build_encoder(params, {"eps": 1e-2}), feeds)
    assert max_diff(default, changed) > 1e-2


@pytest.mark.parametrize("params", [COMPACT, EXPORTED], ids=["compact", "exported"])
def test_heads_value_changes_outputs_but_not_weights(params: EncoderParams):
    feeds = feeds_for(params, 1, 16)
    two_heads = build_encoder(params, {"heads": 2})
    assert max_diff(run(build_encoder(params), feeds), run(two_heads, feeds)) > 1e-3
    weights = {
        i.name: onnx.numpy_helper.to_array(i) for i in build_encoder(params).graph.initializer
    }
    for init in two_heads.graph.initializer:
        if init.name.endswith((".weight", ".bias")) or init.name.startswith("onnx::MatMul"):
            assert np.array_equal(onnx.numpy_helper.to_array(init), weights[init.name])


def test_heads_must_divide_hidden():
    with pytest.raises(ValueError, match="heads=3 does not divide hidden=32"):
        build_encoder(COMPACT, {"heads": 3})


def test_exported_mask_hides_masked_positions():
    params = EXPORTED
    model = build_encoder(params)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, params.vocab, (2, 10))
    mask = np.ones((2, 10), np.int64)
    mask[:, 6:] = 0
    other_ids = ids.copy()
    other_ids[:, 6:] = (ids[:, 6:] + 1 + rng.integers(0, params.vocab - 1, (2, 4))) % params.vocab

    hidden, pooled = run(model, {"input_ids": ids, "attention_mask": mask})
    other_hidden, other_pooled = run(model, {"input_ids": other_ids, "attention_mask": mask})

    assert np.isfinite(hidden).all()
    np.testing.assert_array_equal(hidden[:, :6], other_hidden[:, :6])
    np.testing.assert_array_equal(pooled, other_pooled)
    # The same change without the mask reaches every position: the mask is what hid it.
    ones = np.ones_like(mask)
    unmasked = run(model, {"input_ids": ids, "attention_mask": ones})[0]
    other_unmasked = run(model, {"input_ids": other_ids, "attention_mask": ones})[0]
    assert float(np.abs(unmasked[:, :6] - other_unmasked[:, :6]).min()) > 0


def test_fully_masked_rows_stay_finite():
    model = build_encoder(EXPORTED)
    ids = np.arange(8).reshape(1, 8)
    outputs = run(model, {"input_ids": ids, "attention_mask": np.zeros((1, 8), np.int64)})
    assert all(np.isfinite(o).all() for o in outputs)


# --- variants ------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [COMPACT, EXPORTED], ids=["compact", "exported"])
def test_orders_reorder_nodes_and_keep_outputs(params: EncoderParams):
    model = build_encoder(params)
    forward = apply_layout(model, Layout("forward", order=FORWARD))
    backward = apply_layout(model, Layout("backward", order=BACKWARD))
    for variant in (forward, backward):
        onnx.checker.check_model(variant, full_check=True)
        assert variant.graph.input == model.graph.input
        assert variant.graph.output == model.graph.output
        assert sorted(n.name for n in variant.graph.node) == sorted(
            n.name for n in model.graph.node
        )

    assert [n.name for n in forward.graph.node] != [n.name for n in backward.graph.node]
    feeds = feeds_for(params, 2, 7)
    reference = run(model, feeds)
    assert max_diff(run(forward, feeds), reference) <= 1e-6
    assert max_diff(run(backward, feeds), reference) <= 1e-6


def test_reorder_sees_values_read_inside_subgraphs():
    """The If's branches read ``r``: Relu must stay first though Softmax pulls the If ahead."""
    helper = onnx.helper

    def branch(op_type: str) -> onnx.GraphProto:
        node = helper.make_node(op_type, ["r", "one"], ["b"])
        return helper.make_graph([node], op_type, [], [helper.make_tensor_value_info("b", 1, [2])])

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node(
                "If", ["cond"], ["o"], then_branch=branch("Add"), else_branch=branch("Sub")
            ),
            helper.make_node("Softmax", ["o"], ["y"]),
        ],
        "if",
        [helper.make_tensor_value_info("x", 1, [2]), helper.make_tensor_value_info("cond", 9, [])],
        [helper.make_tensor_value_info("y", 1, [2])],
        [onnx.numpy_helper.from_array(np.array(1.0, np.float32), "one")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    variant = apply_layout(model, Layout("scale", order=("scale",)))

    assert [n.op_type for n in variant.graph.node] == ["Relu", "If", "Softmax"]
    onnx.checker.check_model(variant, full_check=True)


def test_initializers_follow_their_first_consumer():
    variant = apply_layout(build_encoder(EXPORTED), Layout("backward", order=BACKWARD))
    position = {}
    for index, node in enumerate(variant.graph.node):
        for name in node.input:
            position.setdefault(name, index)
    firsts = [position[init.name] for init in variant.graph.initializer]
    assert firsts == sorted(firsts)


def test_empty_layout_is_the_model_itself():
    model = build_encoder(EXPORTED)
    same = apply_layout(model, Layout("default"))
    assert same.SerializeToString() == model.SerializeToString()
    assert same is not model


@pytest.mark.parametrize("params", [COMPACT, EXPORTED], ids=["compact", "exported"])
def test_eps_rewrite_matches_built_eps(params: EncoderParams):
    """A path model's eps rewrite gives what the builder gives for that eps."""
    rewritten = apply_layout(build_encoder(params), Layout("eps", values=(("eps", 1e-2),)))
    feeds = feeds_for(params, 1, 16)
    assert max_diff(run(rewritten, feeds), run(build_encoder(params, {"eps": 1e-2}), feeds)) == 0
    assert max_diff(run(rewritten, feeds), run(build_encoder(params), feeds)) > 1e-2


def test_eps_rewrite_leaves_shared_constants_alone():
    model = build_encoder(EXPORTED)
    producers = {out: node for node in model.graph.node for out in node.output}
    eps_add = next(
        n
        for n in model.graph.node
        if n.op_type == "Add" and producers.get(n.input[0], n).op_type == "ReduceMean"
    )
    shared = eps_add.input[1]
    user = onnx.helper.make_node("Add", ["last_hidden_state", shared], ["shifted"], name="user")
    model.graph.node.append(user)
    model.graph.output.append(onnx.helper.make_tensor_value_info("shifted", 1, None))

    variant = apply_layout(model, Layout("eps", values=(("eps", 0.5),)))
    hidden, _, shifted = run(variant, feeds_for(EXPORTED, 1, 4))
    np.testing.assert_allclose(shifted, hidden + 1e-5, rtol=0, atol=1e-6)


def test_heads_cannot_change_on_a_model():
    with pytest.raises(ValueError, match="only the builtin encoder"):
        apply_layout(build_encoder(COMPACT), Layout("h", values=(("heads", 2),)))


def test_eps_needs_a_layer_norm():
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["a"], ["b"])],
        "relu",
        [onnx.helper.make_tensor_value_info("a", 1, [2])],
        [onnx.helper.make_tensor_value_info("b", 1, [2])],
    )
    with pytest.raises(ValueError, match="no LayerNormalization"):
        apply_layout(onnx.helper.make_model(graph), Layout("eps", values=(("eps", 0.1),)))


# --- inputs --------------------------------------------------------------------------------


def test_inputs_follow_specs_and_shape():
    model = build_encoder(EXPORTED)
    specs = {"input_ids": InputSpec(low=5, high=9), "attention_mask": InputSpec(fill=1)}
    inputs = make_inputs(model, specs, {"batch": 3, "sequence": 50}, seed=0)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    assert ids.shape == mask.shape == (3, 50) and ids.dtype == mask.dtype == np.int64
    assert ids.min() == 5 and ids.max() == 8  # [5, 9), every value drawn among 150
    assert (mask == 1).all()


def test_inputs_defaults_dtypes_and_determinism():
    model = build_encoder(COMPACT)
    shape = {"batch": 2, "sequence": 64}
    x = make_inputs(model, {}, shape, seed=0)["x"]
    assert x.dtype == np.float32 and x.shape == (2, 64, 32)
    assert -1 <= x.min() < -0.9 and 0.9 < x.max() < 1
    np.testing.assert_array_equal(x, make_inputs(model, {}, shape, seed=0)["x"])
    assert not np.array_equal(x, make_inputs(model, {}, shape, seed=1)["x"])
    own_seed = {"x": InputSpec(seed=0)}
    np.testing.assert_array_equal(
        make_inputs(model, own_seed, shape, seed=0)["x"],
        make_inputs(model, own_seed, shape, seed=5)["x"],
    )
    half = make_inputs(model, {"x": InputSpec(dtype="float16", low=2, high=3)}, shape, seed=0)["x"]
    assert half.dtype == np.float16 and 2 <= half.min() and half.max() <= 3
    flags = make_inputs(model, {"x": InputSpec(dtype="bool")}, shape, seed=0)["x"]
    assert flags.dtype == np.bool_ and flags.any() and not flags.all()


def test_inputs_from_npy(tmp_path: Path):
    model = build_encoder(COMPACT)
    shape = {"batch": 1, "sequence": 4}
    array = np.arange(128, dtype=np.float32).reshape(1, 4, 32)
    np.save(tmp_path / "x.npy", array)
    loaded = make_inputs(model, {"x": InputSpec(npy=tmp_path / "x.npy")}, shape, seed=0)["x"]
    np.testing.assert_array_equal(loaded, array)
    with pytest.raises(
        ValueError, match=r"holds float32\[1, 4, 32\], expected float32\[1, 5, 32\]"
    ):
        make_inputs(model, {"x": InputSpec(npy=tmp_path / "x.npy")}, {**shape, "sequence": 5}, 0)
    with pytest.raises(ValueError, match="cannot load"):
        make_inputs(model, {"x": InputSpec(npy=tmp_path / "missing.npy")}, shape, 0)


def test_inputs_errors_name_the_problem():
    model = build_encoder(COMPACT)
    with pytest.raises(ValueError, match="symbolic dim 'sequence'"):
        make_inputs(model, {}, {"batch": 1}, seed=0)
    with pytest.raises(ValueError, match=r"\['y'\] are not inputs"):
        make_inputs(model, {"y": InputSpec(fill=0)}, {"batch": 1, "sequence": 2}, seed=0)
    with pytest.raises(ValueError, match="is empty"):
        make_inputs(model, {"x": InputSpec(low=1, high=1)}, {"batch": 1, "sequence": 2}, seed=0)


# --- materialize ---------------------------------------------------------------------------


def make_case(model: ModelSpec, layout: Layout, dims=(("batch", 1), ("sequence", 16))) -> Case:
    shape = Shape(dims)
    suite = Suite(
        "test", Path("suite.yaml"), (model,), (shape,), (layout,), (BackendTarget("wgpu"),)
    )
    return Case(suite, model, shape, layout, BackendTarget("wgpu"), False, Tolerance())


EXPORTED_SPEC = ModelSpec("bert", builtin="encoder", encoder=EXPORTED)


def test_materialize_builtin():
    layout = Layout("forward", order=FORWARD)
    workload = materialize(make_case(EXPORTED_SPEC, layout))

    assert workload.output_names == ("last_hidden_state", "pooler_output")
    assert workload.shape == {"batch": 1, "sequence": 16}
    assert workload.uniform_order == FORWARD
    ids = workload.inputs["input_ids"]
    assert ids.min() >= 0 and ids.max() < EXPORTED.vocab and ids.max() >= 2  # [0, vocab)
    assert (workload.inputs["attention_mask"] == 1).all()
    model = onnx.load_from_string(workload.model)
    assert model.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "sequence"
    outputs = run(model, dict(workload.inputs))
    assert outputs[0].shape == (1, 16, 32)


def test_materialize_keys():
    forward = make_case(EXPORTED_SPEC, Layout("forward", order=FORWARD))
    key = materialize(forward).key
    assert materialize(make_case(EXPORTED_SPEC, Layout("again", order=FORWARD))).key == key
    others = [
        make_case(EXPORTED_SPEC, Layout("backward", order=BACKWARD)),
        make_case(EXPORTED_SPEC, Layout("eps", order=FORWARD, values=(("eps", 1e-3),))),
        make_case(
            EXPORTED_SPEC, Layout("forward", order=FORWARD), (("batch", 2), ("sequence", 16))
        ),
        make_case(
            ModelSpec(
                "bert", builtin="encoder", encoder=EXPORTED, inputs={"input_ids": InputSpec(seed=9)}
            ),
            Layout("forward", order=FORWARD),
        ),
    ]
    keys = {materialize(case).key for case in others}
    assert key not in keys and len(keys) == len(others)


def test_materialize_builtin_values_reach_the_model():
    spec = ModelSpec("enc", builtin="encoder", encoder=COMPACT)
    workload = materialize(make_case(spec, Layout("h2", values=(("heads", 2), ("eps", 1e-3)))))
    model = onnx.load_from_string(workload.model)
    shape = next(i for i in model.graph.initializer if i.name == "shape.heads")
    assert onnx.numpy_helper.to_array(shape).tolist() == [0, 0, 2, 16]
    epsilons = [
        a.f for n in model.graph.node if n.op_type == "LayerNormalization" for a in n.attribute
        if a.name == "epsilon"
    ]  # fmt: skip
    assert len(epsilons) == 2 * COMPACT.layers + 1
    assert epsilons == pytest.approx([1e-3] * len(epsilons))


def test_materialize_path_model(tmp_path: Path):
    path = tmp_path / "encoder.onnx"
    onnx.save(build_encoder(EXPORTED), str(path))
    spec = ModelSpec("file", path=path, inputs={"input_ids": InputSpec(low=0, high=100)})
    eps = materialize(make_case(spec, Layout("eps", values=(("eps", 1e-2),))))
    built = materialize(
        make_case(
            ModelSpec("b", builtin="encoder", encoder=EXPORTED),
            Layout("eps", values=(("eps", 1e-2),)),
        )
    )
    assert eps.inputs["input_ids"].max() >= 2
    model = onnx.load_from_string(eps.model)
    feeds = feeds_for(EXPORTED, 1, 16)
    assert max_diff(run(model, feeds), run(onnx.load_from_string(built.model), feeds)) == 0
    with pytest.raises(ValueError, match="only the builtin encoder"):
        materialize(make_case(spec, Layout("h", values=(("heads", 2),))))

    onnx.save(build_encoder(EncoderParams(style="exported", layers=1)), str(path))
    assert materialize(make_case(spec, Layout("eps", values=(("eps", 1e-2),)))).key != eps.key


def test_the_input_schedule_gives_new_inputs_each_round_and_repeats_the_last():
    assert input_schedule(1) == (Feed(0, BASE),)
    assert [f.variant for f in input_schedule(2)] == [BASE, (0, 1)]
    assert [f.variant for f in input_schedule(4)] == [BASE, (0, 1), (0, 2), (0, 2)]
    assert input_schedule(3, graphs=2) == (
        Feed(0, BASE), Feed(1, (1, 0)),  # every graph has inputs of its own
        Feed(0, (0, 1)), Feed(1, (1, 1)),
        Feed(0, (0, 1)), Feed(1, (1, 1)),  # the determinism check's repeat
    )  # fmt: skip


def test_every_run_draws_new_inputs_within_the_specs():
    spec = ModelSpec(
        "bert",
        builtin="encoder",
        encoder=EXPORTED,
        inputs={"input_ids": InputSpec(low=3, high=7), "attention_mask": InputSpec(fill=1)},
    )
    case = dataclasses.replace(make_case(spec, Layout("x")), graphs=2)
    workload = materialize(case, runs=3)
    assert workload.schedule == input_schedule(3, 2)
    variants = workload.all_variants()
    assert set(variants) == {BASE, (0, 1), (1, 0), (1, 1)}
    np.testing.assert_array_equal(
        variants[BASE]["input_ids"], materialize(case).inputs["input_ids"]
    )
    ids = [v["input_ids"] for v in variants.values()]
    assert all(3 <= i.min() and i.max() < 7 for i in ids), "token ids stay in their range"
    assert len({i.tobytes() for i in ids}) == 4, "each run has its own"
    assert all((v["attention_mask"] == 1).all() for v in variants.values()), "fills stay"
    again = materialize(case, runs=3)
    assert again.key == workload.key == materialize(case).key  # the oracle keys variants apart
    for variant, inputs in variants.items():
        np.testing.assert_array_equal(inputs["input_ids"], again.inputs_of(variant)["input_ids"])


def test_given_data_varies_only_where_it_cannot_break():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    shuffled = vary_given("x", data, (0, 1))
    assert sorted(shuffled.ravel()) == sorted(data.ravel()) and not np.array_equal(shuffled, data)
    np.testing.assert_array_equal(vary_given("x", data, (0, 1)), shuffled)  # deterministic
    np.testing.assert_array_equal(vary_given("x", data, BASE), data)
    scales = np.array([1, 1, 2, 2], np.float32)  # Resize scales: rank 1 stays
    indices = np.array([[0, 2], [1, 0]], np.int64)  # Gather indices: integers stay
    assert vary_given("s", scales, (0, 1)) is scales and vary_given("i", indices, (0, 1)) is indices


def test_importing_workload_loads_no_backend():
    code = (
        "import sys, runner.workload; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'wgpu', 'playwright'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert result.stdout.strip() == "[]"


def test_a_float16_encoder_is_the_float32_one_rounded():
    """Same weights drawn, stored as float16: every float tensor float16, onnxruntime CPU's
    result within float16's rounding through two layers of the float32 model's."""
    half = build_encoder(dataclasses.replace(COMPACT, dtype="float16"))
    floats = {i.data_type for i in half.graph.initializer} - {onnx.TensorProto.INT64}
    assert floats == {onnx.TensorProto.FLOAT16}
    io = [v.type.tensor_type.elem_type for v in (*half.graph.input, *half.graph.output)]
    assert io == [onnx.TensorProto.FLOAT16] * 2
    x = np.random.default_rng(5).uniform(-1, 1, (1, 16, COMPACT.hidden)).astype(np.float16)
    [y16] = run(half, {"x": x})
    [y32] = run(build_encoder(COMPACT), {"x": x.astype(np.float32)})
    assert y16.dtype == np.float16
    assert 1e-4 < max_diff([y16.astype(np.float32)], [y32]) < 0.05


def test_float16_is_the_compact_style_only():
    with pytest.raises(ValueError, match="float16 in the compact style"):
        build_encoder(dataclasses.replace(EXPORTED, dtype="float16"))
