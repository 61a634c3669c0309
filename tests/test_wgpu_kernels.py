"""Every WGSL kernel against onnxruntime on the CPU, one small single-op model at a time.

Real wgpu on whatever adapter it finds (lavapipe here). Sizes are deliberately not multiples
of the workgroup size, and broadcasts span ranks 1 to 4.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from runner.backends.base import BackendOptions, BackendRun, CaseWork
from runner.backends.wgpu.kernels import workgroups
from runner.compare import compare
from runner.errors import EnvironmentUnusable
from runner.matrix import Case
from runner.measure import FLOAT16
from runner.oracle import compute_reference
from runner.suite.spec import BackendTarget, Layout, ModelSpec, Shape, Suite, Tolerance
from runner.workload import Workload

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(7)
DEFAULT = Tolerance()


def open_wgpu(**options):
    from runner.backends.wgpu.backend import WgpuBackend

    try:
        return WgpuBackend(BackendOptions(**options))
    except EnvironmentUnusable as error:
        pytest.skip(f"no wgpu adapter: {error}")


@pytest.fixture(scope="module")
def backend():
    opened = open_wgpu(runs=1)
    yield opened
    opened.close()


def make_case(capture: bool = False, adapter: str | None = None) -> Case:
    spec, shape, layout = ModelSpec("m"), Shape(()), Layout("default")
    target = BackendTarget("wgpu", adapter=adapter)
    suite = Suite("wgpu-tests", Path("wgpu-tests.yaml"), (spec,), (shape,), (layout,), (target,))
    return Case(suite, spec, shape, layout, target, capture, Tolerance())


def make_workload(model: onnx.ModelProto, feeds: dict, order: tuple[str, ...] = ()) -> Workload:
    data = model.SerializeToString()
    outputs = tuple(o.name for o in model.graph.output)
    return Workload(hashlib.sha256(data).hexdigest(), data, feeds, outputs, {}, order)


def op_model(
    op: str,
    inputs: dict[str, np.ndarray],
    constants: tuple[str, ...] = (),
    opset: int = 18,
    domain: str = "",
    outputs: tuple[str, ...] = ("y",),
    **attrs,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A one-node model: ``inputs`` in node order; an empty name skips an optional input or
    output (see ``node_model``)."""
    node = helper.make_node(op, list(inputs), list(outputs), domain=domain, **attrs)
    return node_model(node, inputs, constants, opset)


def node_model(
    node: onnx.NodeProto, values: dict[str, np.ndarray], constants: tuple[str, ...], opset: int = 18
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model of ``node`` alone: names in ``constants`` become initializers, the other
    ``values`` graph inputs (fed with their arrays); every named output is a graph output."""
    feeds = {n: v for n, v in values.items() if n and n not in constants}
    graph = helper.make_graph(
        [node],
        node.op_type.lower(),
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
        ],
        [helper.make_empty_tensor_value_info(n) for n in node.output if n],
        [numpy_helper.from_array(values[n], n) for n in constants],
    )
    opsets = [helper.make_opsetid("", opset)]
    if node.domain:
        opsets.append(helper.make_opsetid(node.domain, 1))
    return helper.make_model(graph, opset_imports=opsets), feeds


def assert_matches_onnxruntime(
    backend,
    model: onnx.ModelProto,
    feeds: dict,
    capture: bool = False,
    order=(),
    tolerance: Tolerance = DEFAULT,
) -> BackendRun:
    workload = make_workload(model, feeds, order)
    result = backend.run(CaseWork(make_case(capture), workload))
    assert result.status == "ok", result.message
    expected = compute_reference(workload)
    for name, value in expected.items():
        got = result.outputs[name]
        assert got.dtype == value.dtype, name
        comparison = compare(got, value, tolerance)
        assert comparison.ok, f"{name}: {comparison}"
    return result


def floats(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(np.float32)


def ints(*shape: int, low: int = -50, high: int = 50) -> np.ndarray:
    return RNG.integers(low, high, shape).astype(np.int64)


BROADCASTS = [
    ((67,), (67,)),
    ((3, 70), (70,)),
    ((2, 1, 5), (3, 1)),
    ((2, 3, 4, 65), (3, 1, 65)),
    ((1,), (2, 3, 4, 5)),
]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_arithmetic_broadcasts(backend, op, shapes):
    a, b = floats(*shapes[0]), floats(*shapes[1], low=0.5, high=2.0)
    assert_matches_onnxruntime(backend, *op_model(op, {"a": a, "b": b}))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_integer_arithmetic(backend, op):
    a, b = ints(4, 33), ints(33, low=1, high=9) * RNG.choice([-1, 1], 33)
    assert_matches_onnxruntime(backend, *op_model(op, {"a": a, "b": b}))


@pytest.mark.parametrize(
    "exponent", [np.float32(2.0), np.int64(3), np.float32(0.5)], ids=["sq", "int3", "root"]
)
def test_pow_with_constant_exponent(backend, exponent):
    base = floats(5, 67, low=0.1) if exponent == 0.5 else floats(5, 67)
    model, feeds = op_model("Pow", {"x": base, "e": np.array(exponent)}, constants=("e",))
    assert_matches_onnxruntime(backend, model, feeds)


def test_pow_with_tensor_exponent(backend):
    model, feeds = op_model("Pow", {"x": floats(3, 70, low=0.1), "e": floats(70)})
    assert_matches_onnxruntime(backend, model, feeds)


@pytest.mark.parametrize("op", ["Sqrt", "Erf", "Tanh", "Relu", "Sigmoid"])
def test_unary(backend, op):
    x = floats(3, 5, 71, low=0.0, high=30.0) if op == "Sqrt" else floats(3, 5, 71, low=-20, high=20)
    assert_matches_onnxruntime(backend, *op_model(op, {"x": x}))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_onnx(backend, approximate):
    model, feeds = op_model(
        "Gelu", {"x": floats(2, 129, low=-6, high=6)}, opset=20, approximate=approximate
    )
    assert_matches_onnxruntime(backend, model, feeds)


def test_gelu_microsoft(backend):
    model, feeds = op_model("Gelu", {"x": floats(2, 129, low=-6, high=6)}, domain="com.microsoft")
    assert_matches_onnxruntime(backend, model, feeds)


def test_equal_and_where(backend):
    a, b = ints(2, 3, 67, low=0, high=3), ints(67, low=0, high=3)
    assert_matches_onnxruntime(backend, *op_model("Equal", {"a": a, "b": b}))
    fa = np.round(floats(4, 65))
    assert_matches_onnxruntime(backend, *op_model("Equal", {"a": fa, "b": np.round(floats(65))}))
    cond = RNG.integers(0, 2, (3, 1, 65)).astype(bool)
    where = {"c": cond, "x": floats(2, 65), "other": np.array([-3.0], np.float32)}
    assert_matches_onnxruntime(backend, *op_model("Where", where, constants=("other",)))


@pytest.mark.parametrize("op", ["Greater", "GreaterOrEqual", "Less", "LessOrEqual"])
def test_comparisons(backend, op):
    a, b = ints(2, 3, 67, low=0, high=3), ints(67, low=0, high=3)  # many ties
    assert_matches_onnxruntime(backend, *op_model(op, {"a": a, "b": b}))
    fa, fb = np.round(floats(4, 65)), np.round(floats(4, 1))
    assert_matches_onnxruntime(backend, *op_model(op, {"a": fa, "b": fb}))


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(backend, op):
    a, b = RNG.integers(0, 2, (2, 3, 67)).astype(bool), RNG.integers(0, 2, (3, 1)).astype(bool)
    assert_matches_onnxruntime(backend, *op_model(op, {"a": a, "b": b}))


def test_not(backend):
    assert_matches_onnxruntime(backend, *op_model("Not", {"x": RNG.integers(0, 2, 67) > 0}))


def test_is_nan(backend):
    x = floats(3, 67, low=-1e38, high=1e38)
    x.ravel()[::5] = np.nan
    x.ravel()[1::7] = np.inf
    x.ravel()[2::7] = -np.inf
    x.ravel()[3::11] = -np.nan
    assert_matches_onnxruntime(backend, *op_model("IsNaN", {"x": x}))


@pytest.mark.parametrize(
    "source, target",
    [
        (np.float32, TensorProto.INT64),
        (np.int64, TensorProto.FLOAT),
        (np.float32, TensorProto.BOOL),
        (np.bool_, TensorProto.FLOAT),
        (np.int64, TensorProto.INT32),
        (np.int64, TensorProto.BOOL),
        (np.float32, TensorProto.FLOAT),
    ],
    ids=str,
)
def test_cast(backend, source, target):
    x = (floats(3, 67, low=-5, high=5) * RNG.integers(0, 2, (3, 67))).astype(source)
    assert_matches_onnxruntime(backend, *op_model("Cast", {"x": x}, to=target))


@pytest.mark.parametrize(
    "shape, perm", [((5, 67), None), ((2, 3, 65), [1, 2, 0]), ((2, 3, 4, 17), [0, 2, 1, 3])]
)
def test_transpose(backend, shape, perm):
    attrs = {"perm": perm} if perm else {}
    assert_matches_onnxruntime(backend, *op_model("Transpose", {"x": floats(*shape)}, **attrs))


@pytest.mark.parametrize(
    "shape, target", [((67,), [3, 1, 67]), ((3, 1), [2, 3, 65]), ((1, 1, 1, 5), [2, 3, 1, 5])]
)
def test_expand(backend, shape, target):
    inputs = {"x": floats(*shape), "shape": np.array(target, np.int64)}
    assert_matches_onnxruntime(backend, *op_model("Expand", inputs, constants=("shape",)))


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ([1], [1000], [1], [1]),
        ([-1, 0], [-1000, 5], [2, 0], [-2, 2]),
        ([2, 1], [-1, 60], [-1, 1], None),
    ],
    ids=["clamped", "reversed", "default-steps"],
)
def test_slice(backend, starts, ends, axes, steps):
    inputs = {
        "x": floats(6, 5, 67),
        "starts": np.array(starts, np.int64),
        "ends": np.array(ends, np.int64),
        "axes": np.array(axes, np.int64),
    }
    if steps:
        inputs["steps"] = np.array(steps, np.int64)
    constants = tuple(k for k in inputs if k != "x")
    assert_matches_onnxruntime(backend, *op_model("Slice", inputs, constants=constants))


def test_slice_opset9_attributes(backend):
    model, feeds = op_model("Slice", {"x": floats(4, 67)}, opset=9, starts=[1, 3], ends=[3, 70])
    assert_matches_onnxruntime(backend, model, feeds)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(backend, axis):
    shapes = [[2, 3, 65] for _ in range(3)]
    for i, shape in enumerate(shapes):
        shape[axis] += i
    inputs = {"a": floats(*shapes[0]), "b": floats(*shapes[1]), "c": floats(*shapes[2])}
    model, feeds = op_model("Concat", inputs, constants=("b",), axis=axis)
    assert_matches_onnxruntime(backend, model, feeds)


@pytest.mark.parametrize(
    "shapes, axis, want",
    [
        # an empty input adds its dim along the axis; the non-empty ones are copied from the start
        ([(1, 3), (0, 1), (1, 3)], 1, (1, 7)),
        ([(2, 0, 1), (1, 2, 3)], 0, (3, 2, 3)),
        ([(2, 2), (0, 2), (2, 0)], 1, (2, 4)),
        ([(1, 3), (2, 0), (1, 4)], 1, (1, 7)),
    ],
    ids=str,
)
def test_concat_with_inputs_empty_along_another_axis(backend, shapes, axis, want):
    """As onnxruntime CPU concatenates them (its ConcatBase), checked on what onnxruntime
    defines: the shape and the copied elements (what empty inputs add is left unwritten
    there, zeros here)."""
    names = [f"x{i}" for i in range(len(shapes))]
    feeds, first = {}, 1
    for name, shape in zip(names, shapes, strict=True):
        size = int(np.prod(shape))
        feeds[name] = np.arange(first, first + size, dtype=np.float32).reshape(shape)
        first += size
    node = helper.make_node("Concat", names, ["y"], axis=axis)
    untyped = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names]
    graph = helper.make_graph([node], "concat", untyped, [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    workload = make_workload(model, feeds)
    got = backend.run(CaseWork(make_case(), workload)).outputs["y"]
    expected = compute_reference(workload)["y"]
    assert got.shape == expected.shape == want
    copied = np.moveaxis(got, axis, 0)[: sum(f.shape[axis] for f in feeds.values() if f.size)]
    reference = np.moveaxis(expected, axis, 0)[: len(copied)]
    np.testing.assert_array_equal(copied, reference)
    np.testing.assert_array_equal(np.moveaxis(got, axis, 0)[len(copied) :], 0)
    np.testing.assert_array_equal(np.sort(copied.ravel()), np.arange(1, first, dtype=np.float32))


@pytest.mark.parametrize(
    "op, inputs, attrs, opset",
    [
        ("Reshape", {"x": floats(2, 3, 65), "s": np.array([0, -1, 5], np.int64)}, {}, 18),
        ("Unsqueeze", {"x": floats(3, 65), "axes": np.array([0, -1], np.int64)}, {}, 18),
        ("Unsqueeze", {"x": floats(3, 65)}, {"axes": [1]}, 11),
        ("Squeeze", {"x": floats(1, 65, 1)}, {}, 18),
        ("Squeeze", {"x": floats(1, 65, 1), "axes": np.array([2], np.int64)}, {}, 18),
        ("Identity", {"x": ints(3, 65)}, {}, 18),
        ("Flatten", {"x": floats(2, 3, 5, 7)}, {}, 18),
        ("Flatten", {"x": ints(2, 3, 5, 7).astype(bool)}, {"axis": -2}, 18),
        ("Flatten", {"x": floats(2, 3, 5)}, {"axis": 0}, 18),
    ],
    ids=[
        "reshape",
        "unsqueeze",
        "unsqueeze-opset11",
        "squeeze-all",
        "squeeze-axis",
        "identity",
        "flatten",
        "flatten-negative-axis",
        "flatten-axis0",
    ],
)
def test_relabelling_ops(backend, op, inputs, attrs, opset):
    constants = tuple(k for k in inputs if k != "x")
    result = assert_matches_onnxruntime(
        backend, *op_model(op, inputs, constants=constants, opset=opset, **attrs)
    )
    assert result.trace.dispatches == ()  # a relabelled buffer, no kernel


@pytest.mark.parametrize(
    "data, indices, axis",
    [
        (floats(100, 33), ints(2, 7, low=0, high=100), 0),
        (floats(3, 70, 5), ints(4, low=-70, high=70), 1),
        (ints(10, 67), np.array(-2, np.int64), 0),
    ],
    ids=["embedding", "axis1-negative", "scalar-int"],
)
def test_gather(backend, data, indices, axis):
    model, feeds = op_model("Gather", {"data": data, "idx": indices}, axis=axis)
    assert_matches_onnxruntime(backend, model, feeds)


@pytest.mark.parametrize(
    "a, b",
    [
        ((3, 70), (70, 67)),
        ((2, 3, 5, 33), (33, 6)),
        ((2, 1, 3, 4), (5, 4, 65)),
        ((70,), (70, 3)),
        ((3, 70), (70,)),
    ],
    ids=str,
)
def test_matmul(backend, a, b):
    assert_matches_onnxruntime(backend, *op_model("MatMul", {"a": floats(*a), "b": floats(*b)}))


@pytest.mark.parametrize(
    "trans_a, trans_b, alpha, beta, bias",
    [
        (0, 0, 1.0, 1.0, (67,)),
        (1, 0, 0.5, 1.0, (1, 67)),
        (0, 1, 1.0, 2.0, (5, 1)),
        (1, 1, 2.0, 1.0, None),
    ],
)
def test_gemm(backend, trans_a, trans_b, alpha, beta, bias):
    a = floats(33, 5) if trans_a else floats(5, 33)
    b = floats(67, 33) if trans_b else floats(33, 67)
    inputs = {"a": a, "b": b}
    if bias:
        inputs["c"] = floats(*bias)
    model, feeds = op_model(
        "Gemm",
        inputs,
        constants=("b", "c")[: len(inputs) - 1],
        transA=trans_a,
        transB=trans_b,
        alpha=alpha,
        beta=beta,
    )
    assert_matches_onnxruntime(backend, model, feeds)


@pytest.mark.parametrize("shape", [(67,), (3, 70), (2, 4, 5, 33)], ids=str)
def test_softmax(backend, shape):
    assert_matches_onnxruntime(backend, *op_model("Softmax", {"x": floats(*shape, low=-9, high=9)}))


@pytest.mark.parametrize("axis", [0, 1, -3])
def test_softmax_over_another_axis_than_the_last(backend, axis):
    x = floats(2, 84, 5, low=-9, high=9)
    assert_matches_onnxruntime(backend, *op_model("Softmax", {"x": x}, axis=axis))


def test_softmax_opset11_default_axis(backend):
    model, feeds = op_model("Softmax", {"x": floats(5, 67)}, opset=11)
    assert_matches_onnxruntime(backend, model, feeds)


@pytest.mark.parametrize("axis, bias", [(-1, True), (-2, True), (-1, False)])
def test_layer_normalization(backend, axis, bias):
    x = floats(2, 3, 67, low=-3, high=5)
    normalized = x.shape[axis:]
    inputs = {"x": x, "scale": floats(*normalized)}
    if bias:
        inputs["bias"] = floats(*normalized)
    model, feeds = op_model(
        "LayerNormalization", inputs, constants=tuple(inputs)[1:], axis=axis, epsilon=0.25
    )
    assert_matches_onnxruntime(backend, model, feeds)


@pytest.mark.parametrize(
    "axes, keepdims, opset",
    [([-1], 1, 18), ([1, 2], 0, 18), (None, 1, 18), ([-1], 0, 17)],
    ids=["last", "two-dropped", "all", "opset17-attribute"],
)
def test_reduce_mean(backend, axes, keepdims, opset):
    inputs = {"x": floats(2, 3, 67)}
    attrs = {"keepdims": keepdims}
    if axes is not None and opset >= 18:
        inputs["axes"] = np.array(axes, np.int64)
    elif axes is not None:
        attrs["axes"] = axes
    model, feeds = op_model("ReduceMean", inputs, constants=tuple(inputs)[1:], opset=opset, **attrs)
    assert_matches_onnxruntime(backend, model, feeds)


def test_shape_chain_folds_on_the_host(backend):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write head splits."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0))),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axis0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "tail"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 6, 11])],
        [helper.make_empty_tensor_value_info("y")],
        [
            numpy_helper.from_array(np.array([0], np.int64), "axis0"),
            numpy_helper.from_array(np.array([3, -1], np.int64), "tail"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result = assert_matches_onnxruntime(backend, model, {"x": floats(2, 6, 11)})
    assert [d.node for d in result.trace.dispatches] == ["Relu_6"]


def _mask_model(batch: int, sequence: int) -> onnx.ModelProto:
    """The shape of transformers' padding-mask path as torch.onnx writes it: key positions from
    Range, a ConstantOfShape of trues, GreaterOrEqual and And on those (constant once the shape
    is pinned), then the data-dependent mask through Flatten, Gather, Reshape and And."""
    constant = numpy_helper.from_array
    keys = np.arange(batch * sequence, dtype=np.int64).reshape(batch, 1, sequence)[..., ::-1]
    nodes = [
        helper.make_node("Shape", ["mask"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["length"], axis=0),
        helper.make_node("Range", ["zero", "length", "one"], ["positions"]),
        helper.make_node("GreaterOrEqual", ["positions", "zero"], ["visible"]),
        helper.make_node("ConstantOfShape", ["ones"], ["trues"], value=constant(np.array([True]))),
        helper.make_node("And", ["trues", "visible"], ["allowed"]),
        helper.make_node("Cast", ["mask"], ["padding"], name="cast", to=TensorProto.BOOL),
        helper.make_node("Flatten", ["padding"], ["flat"], axis=2),
        helper.make_node("Gather", ["flat", "keys"], ["picked"], name="gather", axis=0),
        helper.make_node("Reshape", ["picked", "target"], ["reordered"]),
        helper.make_node("And", ["allowed", "reordered"], ["y"], name="mask_and"),
    ]
    graph = helper.make_graph(
        nodes,
        "mask",
        [helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_empty_tensor_value_info("y")],
        [
            constant(np.array(0, np.int64), "zero"),
            constant(np.array(1, np.int64), "one"),
            constant(np.array([1], np.int64), "ones"),
            constant(np.ascontiguousarray(keys), "keys"),
            constant(np.array([batch, 1, sequence], np.int64), "target"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_mask_arithmetic_folds_on_the_host_and_the_mask_runs_on_the_device(backend):
    mask = RNG.integers(0, 2, (2, 67)).astype(np.int64)
    result = assert_matches_onnxruntime(backend, _mask_model(2, 67), {"mask": mask})
    assert [d.node for d in result.trace.dispatches] == ["cast", "gather", "mask_and"]


RANGE = {name: np.array(v, np.int64) for name, v in (("start", 70), ("limit", -3), ("delta", -2))}
SHAPE = {"shape": np.array([3, 67], np.int64)}
FILL = numpy_helper.from_array(np.array([2.5], np.float32))


def test_range_and_constant_of_shape_fold_to_constant_outputs(backend):
    model, feeds = op_model("Range", RANGE, constants=tuple(RANGE))
    assert assert_matches_onnxruntime(backend, model, feeds).trace.dispatches == ()
    model, feeds = op_model("ConstantOfShape", SHAPE, constants=("shape",), value=FILL)
    assert assert_matches_onnxruntime(backend, model, feeds).trace.dispatches == ()


@pytest.mark.parametrize("op, inputs", [("Range", RANGE), ("ConstantOfShape", SHAPE)])
def test_a_shape_computed_on_the_device_is_unsupported(backend, op, inputs):
    result = backend.run(CaseWork(make_case(), make_workload(*op_model(op, inputs))))
    assert result.status == "unsupported-op"
    assert op in result.message and "must be constant" in result.message


@pytest.mark.parametrize(
    "data, indices, axis",
    [
        (ints(1, 512), np.arange(67, dtype=np.int64)[None, :], 1),  # BERT's token-type buffer
        (floats(4, 70, 3), ints(2, 5, 3, low=-70, high=70), -2),
        (floats(90, 2), ints(3, 1, low=0, high=90), 0),
    ],
    ids=["position-table", "negative", "narrower-indices"],
)
def test_gather_elements_folds_past_numpy_choose_limit(backend, data, indices, axis):
    model, feeds = op_model(
        "GatherElements", {"data": data, "idx": indices}, constants=("data", "idx"), axis=axis
    )
    assert assert_matches_onnxruntime(backend, model, feeds).trace.dispatches == ()


def test_scalar_division_fuses_into_matmul(backend):
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["scores"], name="scores"),
        helper.make_node("Div", ["scores", "d"], ["y"], name="scale"),
    ]
    graph = helper.make_graph(
        nodes,
        "fused",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
            for n, s in (("a", [2, 3, 5, 8]), ("b", [2, 3, 8, 5]))
        ],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(np.array(2.828427, np.float32), "d")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result = assert_matches_onnxruntime(
        backend, model, {"a": floats(2, 3, 5, 8), "b": floats(2, 3, 8, 5)}
    )
    assert [d.node for d in result.trace.dispatches] == ["scores+scale"]


def test_scaled_gemm_with_bias_is_not_fused(backend):
    nodes = [
        helper.make_node("Gemm", ["a", "b", "c"], ["t"], name="dense"),
        helper.make_node("Mul", ["t", "s"], ["y"], name="scale"),
    ]
    graph = helper.make_graph(
        nodes,
        "unfused",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [5, 8])],
        [helper.make_empty_tensor_value_info("y")],
        [
            numpy_helper.from_array(floats(8, 6), "b"),
            numpy_helper.from_array(floats(6), "c"),
            numpy_helper.from_array(np.array(0.5, np.float32), "s"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result = assert_matches_onnxruntime(backend, model, {"a": floats(5, 8)})
    assert [d.node for d in result.trace.dispatches] == ["dense", "scale"]


def test_workgroups_spill_into_y_past_the_per_dimension_limit():
    assert workgroups(1) == (1, 1, 1)
    assert workgroups(64 * 65535) == (65535, 1, 1)
    assert workgroups(64 * 65535 + 1) == (65535, 2, 1)


def test_a_dispatch_wider_than_one_dimension(backend):
    x = floats(64 * 65535 + 67)
    result = assert_matches_onnxruntime(backend, *op_model("Relu", {"x": x}))
    assert result.trace.dispatches[0].workgroups == (65535, 2, 1)


@pytest.mark.parametrize(
    "op, x, axes, keepdims",
    [
        ("ReduceSum", ints(2, 67, low=0, high=2), [1], 0),  # a decoder's attention-mask lengths
        ("ReduceSum", floats(3, 4, 33), [-1, -2], 1),
        ("ReduceMax", ints(5, low=-9, high=9).astype(np.int32), None, 0),
        ("ReduceMax", floats(3, 70), [1], 1),
    ],
    ids=["sum-int-mask", "sum-two-axes", "max-all-int32", "max-last"],
)
def test_reduce_sum_and_max(backend, op, x, axes, keepdims):
    inputs = {"x": x} if axes is None else {"x": x, "axes": np.array(axes, np.int64)}
    model, feeds = op_model(op, inputs, constants=tuple(inputs)[1:], keepdims=keepdims)
    assert_matches_onnxruntime(backend, model, feeds)


def test_simplified_layer_normalization(backend):
    """onnxruntime's RMS norm, registered in the ONNX domain (as the genai builder writes it)."""
    inputs = {"x": floats(2, 5, 67, low=-3, high=5), "scale": floats(67)}
    model, feeds = op_model(
        "SimplifiedLayerNormalization", inputs, constants=("scale",), axis=-1, epsilon=0.25
    )
    assert_matches_onnxruntime(backend, model, feeds)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("outputs", [("y", "", "", "sum"), ("y",)], ids=["with-sum", "last-layer"])
def test_skip_simplified_layer_normalization(backend, bias, outputs):
    inputs = {"x": floats(2, 5, 67), "skip": floats(2, 5, 67), "gamma": floats(67)}
    if bias:
        inputs["beta"] = floats(67)
    model, feeds = op_model(
        "SkipSimplifiedLayerNormalization",
        inputs,
        constants=tuple(inputs)[2:],
        domain="com.microsoft",
        outputs=outputs,
        epsilon=1e-6,
    )
    result = assert_matches_onnxruntime(backend, model, feeds)
    assert set(result.outputs) == {n for n in outputs if n}


@pytest.mark.parametrize("skip", [(1, 5, 67), (5, 67)], ids=str)
def test_skip_simplified_layer_normalization_broadcasts_a_constant_skip(backend, skip):
    inputs = {"x": floats(2, 5, 67), "skip": floats(*skip), "gamma": floats(67), "bias": floats(67)}
    model, feeds = op_model(
        "SkipSimplifiedLayerNormalization",
        inputs,
        constants=tuple(inputs)[1:],
        domain="com.microsoft",
        outputs=("y", "", "", "sum"),
        epsilon=1e-6,
    )
    assert_matches_onnxruntime(backend, model, feeds)


def _rotary_caches(length: int, half: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.outer(np.arange(length), 10000.0 ** (-np.arange(half) / half))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _gqa_model(
    batch: int,
    seq: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    past: list[int],
    length: int,
    packed: bool,
    rotary: bool,
    interleaved: int = 0,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One GroupQueryAttention node with caches of ``length`` positions, ``past[b]`` of them
    filled for batch b (the rest zero, as a generation leaves them: onnxruntime without a shared
    buffer zeroes present there too), ``total_sequence_length`` a graph input."""
    feeds = {}
    if packed:
        feeds["qkv"] = floats(batch, seq, (heads + 2 * kv_heads) * head_dim, low=-1, high=1)
        names = ["qkv", "", ""]
    else:
        for name, count in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
            feeds[name] = floats(batch, seq, count * head_dim, low=-1, high=1)
        names = ["q", "k", "v"]
    for name in ("past_key", "past_value"):
        cache = floats(batch, kv_heads, length, head_dim, low=-1, high=1)
        for b, filled in enumerate(past):
            cache[b, :, filled:] = 0.0
        feeds[name] = cache
    total = max(past) + seq
    feeds["seqlens_k"] = np.array([p + seq - 1 for p in past], np.int32)
    feeds["total"] = np.array(total, np.int32)
    names += ["past_key", "past_value", "seqlens_k", "total"]
    if rotary:
        feeds["cos"], feeds["sin"] = _rotary_caches(length, head_dim // 2)
        names += ["cos", "sin"]
    node = helper.make_node(
        "GroupQueryAttention",
        names,
        ["y", "present_key", "present_value"],
        domain="com.microsoft",
        num_heads=heads,
        kv_num_heads=kv_heads,
        do_rotary=int(rotary),
        rotary_interleaved=interleaved,
    )
    return node_model(node, feeds, ("cos", "sin") if rotary else ())


@pytest.mark.parametrize(
    "shape",
    [
        dict(batch=1, seq=5, heads=4, kv_heads=2, head_dim=16, past=[0], packed=True, rotary=True),
        dict(
            batch=1,
            seq=1,
            heads=4,
            kv_heads=1,
            head_dim=32,
            past=[6],
            packed=True,
            rotary=True,
            interleaved=1,
        ),
        dict(batch=1, seq=3, heads=2, kv_heads=2, head_dim=16, past=[4], packed=True, rotary=True),
        dict(
            batch=2, seq=1, heads=6, kv_heads=3, head_dim=8, past=[3, 7], packed=False, rotary=False
        ),
    ],
    ids=["prefill", "decode-interleaved-mqa", "subsequent-prompt", "decode-unpacked-batch2"],
)
def test_group_query_attention(backend, shape):
    """Output and both present caches against onnxruntime's CPU kernel: the first prompt, a
    decode step, a later prompt chunk, and two sequences of different lengths in one batch."""
    model, feeds = _gqa_model(length=12, **shape)
    assert_matches_onnxruntime(backend, model, feeds)


@pytest.mark.parametrize(
    "bits, depth, block, columns, zero_points, bias",
    [
        (4, 70, 32, 67, False, False),
        (4, 64, 32, 66, True, True),
        (8, 45, 16, 65, True, False),
        (2, 64, 32, 67, False, True),
        (2, 40, 16, 3, True, True),
        (8, 200, 64, 1, False, False),
    ],
    ids=[
        "4bit-padded-k",
        "4bit-zero-points-bias",
        "8bit-zero-points",
        "2bit-bias",
        "2bit-block-a-word-fewer-columns-than-a-tile",
        "8bit-one-column",
    ],
)
def test_matmul_nbits(backend, bits, depth, block, columns, zero_points, bias):
    """Dequantized in the kernel, against onnxruntime's CPU kernel at accuracy_level 0 (float
    arithmetic there too, so the default tolerance holds). Levels, scales and zero points are
    random; values pack from the low bits of each byte up, as onnxruntime lays them out. K past
    the last whole block, N past the last whole tile of columns an invocation computes."""
    per_byte = 8 // bits
    blocks = -(-depth // block)

    def packed(levels: np.ndarray) -> np.ndarray:
        """Rows of levels, ``per_byte`` to a byte, the first in the low bits."""
        grouped = levels.reshape(len(levels), -1, per_byte) << (bits * np.arange(per_byte))
        return grouped.sum(axis=2).astype(np.uint8)

    values = {
        "a": floats(2, 3, depth),
        "b": packed(RNG.integers(0, 1 << bits, (columns, blocks * block))).reshape(
            columns, blocks, -1
        ),
        "scales": floats(columns * blocks, low=0.01, high=0.1),
        "zero_points": packed(
            RNG.integers(0, 1 << bits, (columns, -(-blocks // per_byte) * per_byte))
        ),
        "bias": floats(columns),
    }
    names = [
        "a",
        "b",
        "scales",
        "zero_points" if zero_points else "",
        "",
        *(["bias"] if bias else []),
    ]
    node = helper.make_node(
        "MatMulNBits",
        names,
        ["y"],
        domain="com.microsoft",
        K=depth,
        N=columns,
        bits=bits,
        block_size=block,
        accuracy_level=0,
    )
    used = {n: values[n] for n in names if n}
    assert_matches_onnxruntime(backend, *node_model(node, used, tuple(used)[1:]))


def test_matmul_nbits_blocks_not_whole_words_are_unsupported(backend):
    weights = np.zeros((4, 1, 12), np.uint8)
    values = {"a": floats(2, 24), "b": weights, "scales": floats(4)}
    node = helper.make_node(
        "MatMulNBits", list(values), ["y"], domain="com.microsoft", K=24, N=4, bits=4, block_size=24
    )
    model = node_model(node, values, ("b", "scales"))
    result = backend.run(CaseWork(make_case(), make_workload(*model)))
    assert result.status == "unsupported-op"
    assert "block_size=24" in result.message


def halves(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return floats(*shape, low=low, high=high).astype(np.float16)


# Each kernel suites/float16.yaml's MLP uses, and the ones beside them, over float16 tensors of
# odd sizes (a buffer's 2-byte elements padded to 4 bytes), against onnxruntime CPU in float16.
FLOAT16_OPS = {
    "add-broadcast": lambda: op_model("Add", {"a": halves(3, 67), "b": halves(67)}),
    "mul": lambda: op_model("Mul", {"a": halves(2, 3, 33), "b": halves(3, 1)}),
    "gelu": lambda: op_model("Gelu", {"x": halves(2, 129, low=-6, high=6)}, opset=20),
    "gelu-tanh": lambda: op_model(
        "Gelu", {"x": halves(2, 129, low=-6, high=6)}, opset=20, approximate="tanh"
    ),
    "sigmoid": lambda: op_model("Sigmoid", {"x": halves(5, 67, low=-8, high=8)}),
    "matmul": lambda: op_model("MatMul", {"a": halves(3, 70), "b": halves(70, 67)}),
    "matmul-batched": lambda: op_model("MatMul", {"a": halves(2, 3, 5, 33), "b": halves(33, 7)}),
    "layer-norm": lambda: op_model(
        "LayerNormalization",
        {"x": halves(2, 3, 67), "scale": halves(67), "bias": halves(67)},
        constants=("scale", "bias"),
        opset=17,
    ),
    "softmax": lambda: op_model("Softmax", {"x": halves(3, 67, low=-6, high=6)}),
    "reduce-mean": lambda: op_model(
        "ReduceMean", {"x": halves(3, 5, 33), "axes": np.array([-1])}, constants=("axes",)
    ),
    "transpose": lambda: op_model("Transpose", {"x": halves(3, 5, 7)}, perm=[2, 0, 1]),
    "cast-to-float16": lambda: op_model("Cast", {"x": floats(3, 67)}, to=TensorProto.FLOAT16),
    "cast-from-float16": lambda: op_model("Cast", {"x": halves(3, 67)}, to=TensorProto.FLOAT),
}


@pytest.mark.parametrize("case", list(FLOAT16_OPS))
@pytest.mark.parametrize("capture", [False, True], ids=["eager", "capture"])
def test_float16_kernels(backend, case, capture):
    model, feeds = FLOAT16_OPS[case]()
    assert_matches_onnxruntime(backend, model, feeds, capture, tolerance=FLOAT16)  # dtypes too


def test_float16_without_shader_f16_is_unsupported_naming_the_feature():
    """An adapter without shader-f16 (as SwiftShader in Chromium): the kernel is refused before
    WGSL compiles, naming what is missing."""
    from runner.backends.wgpu.device import Device, request_adapter
    from runner.backends.wgpu.kernels import compose
    from runner.backends.wgpu.kernels.elementwise import map_kernel
    from runner.backends.wgpu.tensors import DeviceTypeError

    adapter = request_adapter(None)
    device = Device(adapter, adapter.request_device_sync())  # no feature asked for
    program = compose(map_kernel("Relu", "max(a, 0.0)", ["f16"], "f16", 1), ())
    with pytest.raises(DeviceTypeError, match="float16 needs the adapter's shader-f16, which "):
        device.pipeline(program)
    device.device.destroy()
