"""The first divergent node: neither a copy the model does not output itself (its values are
its input's, told by onnxruntime CPU's values, not by its op) nor a node fed constants only
(folded before the session runs) is named: exposing one as a graph output only tests how the
backend outputs a copy or a constant, and onnxruntime's WebGPU builds replay such outputs stale
(found on Silero VAD). The backend is a fake answering like one with that trait and a real
capture bug further on: pure logic, no device."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from runner.backends.base import BackendRun, CaseWork
from runner.localize import expose_intermediates, first_divergent_node
from runner.matrix import Case
from runner.measure import Tolerance
from runner.schedule import BASE, Feed
from runner.suite.spec import STATIC_SHAPE, BackendTarget, Layout, ModelSpec, Suite
from runner.workload import Workload
from tests.conftest import REPO, regress


def one_case(target: BackendTarget, capture: bool) -> Case:
    """The one case of a one-model suite on `target`, captured or not."""
    spec, layout = ModelSpec("m"), Layout("default")
    suite = Suite("s", Path("s.yaml"), (spec,), (STATIC_SHAPE,), (layout,), (target,))
    return Case(suite, spec, STATIC_SHAPE, layout, target, capture, Tolerance())


def relu_view_sigmoid() -> bytes:
    """x - bias -> Relu -> Unsqueeze -> Sigmoid -> Squeeze -> y, -bias a constant Neg."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    nodes = [
        helper.make_node("Neg", ["bias"], ["folded"], name="constant"),  # fed constants only
        helper.make_node("Add", ["x", "folded"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Unsqueeze", ["r", "axes"], ["u"], name="view"),
        helper.make_node("Sigmoid", ["u"], ["s"], name="sigmoid"),
        helper.make_node("Squeeze", ["s", "axes"], ["y"], name="squeeze"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [axes, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


class StaleViewsAndAWrongSigmoid:
    """Eager is right. Under capture an exposed view output holds the recording run's values,
    and the Sigmoid is wrong (the bug a localization should name)."""

    def __init__(self, x: np.ndarray):
        folded = -np.arange(1, 5, dtype=np.float32)
        r = np.maximum(x + folded, 0)
        self.right = {"folded": folded, "a": x + folded, "r": r, "u": r[None]}
        self.right["s"] = 1 / (1 + np.exp(-r[None]))
        self.right["y"] = self.right["s"][0]

    def run(self, work: CaseWork) -> BackendRun:
        names = work.workload.output_names
        outputs = {name: self.right[name] for name in names}
        if work.case.capture:
            stale = {"u": np.zeros_like(self.right["u"]), "folded": np.zeros(4, np.float32)}
            outputs.update({name: value for name, value in stale.items() if name in names})
            outputs["s"] = self.right["s"] + 0.5
            outputs["y"] = outputs["s"][0]
        return BackendRun(runs=(outputs,))


def test_a_view_is_not_named_the_compute_node_after_it_is():
    x = np.array([-1.0, 2.5, 5.0, 7.0], dtype=np.float32)
    workload = Workload("k", relu_view_sigmoid(), {"x": x}, ("y",), {})
    exposed = expose_intermediates(workload)
    assert exposed.workload.output_names == ("y", "a", "r", "s")  # no copy, no constant
    assert [(n.op_type, n.copy) for n in exposed.nodes] == [
        ("Add", False),
        ("Relu", False),
        ("Sigmoid", False),
        ("Squeeze", True),  # the model's own output, a copy of the Sigmoid's
    ]
    case = one_case(BackendTarget("ort-web", "webgpu"), capture=True)
    node = first_divergent_node(
        StaleViewsAndAWrongSigmoid(x), case, workload, frozenset({"capture-mismatch"})
    )
    assert node is not None
    assert (node["op_type"], node["name"], node["against"]) == ("Sigmoid", "sigmoid", "eager")
    assert node["mismatched"] == 4 and node["max_abs"] == pytest.approx(0.5)
    assert not node["copy"] and node["attributes"] == {}
    assert node["inputs"] == [{"name": "u", "shape": [1, 4], "dtype": "float32"}]
    worst = node["elements"][0]
    assert worst["actual"] - worst["expected"] == pytest.approx(0.5)


def test_an_output_that_copies_its_input_is_named_a_copy_whatever_its_op():
    """A Transpose that moves no element is a copy as a Reshape is: told by its values."""
    x = np.array([[1.5], [-2.0]], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], name="moves-nothing", perm=[1, 0])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    workload = Workload("t", model.SerializeToString(), {"x": x}, ("y",), {})
    case = one_case(BackendTarget("ort-web", "webgpu"), capture=True)

    class StaleCopy:
        def run(self, work: CaseWork) -> BackendRun:
            y = x.reshape(1, 2) + (1.0 if work.case.capture else 0.0)
            return BackendRun(runs=({"y": y},))

    node = first_divergent_node(StaleCopy(), case, workload, frozenset({"stale-input"}))
    assert node is not None
    assert (node["op_type"], node["copy"]) == ("Transpose", True)
    assert node["attributes"] == {"perm": [1, 0]}


def identity_beside_mul() -> bytes:
    """Identity(x0) -> t0 beside Mul(x1, 300) -> t1 -> Identity -> t2: explore's finding on JSEP
    1.20.1, whose t0 goes stale under capture only while t1 is no graph output."""
    c = helper.make_tensor("c", TensorProto.FLOAT, [], [300.0])
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["x0"], ["t0"], name="n0"),
            helper.make_node("Mul", ["x1", "c"], ["t1"], name="n1"),
            helper.make_node("Identity", ["t1"], ["t2"], name="n2"),
        ],
        "g",
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, [1]) for v in ("x0", "x1")],
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, [1]) for v in ("t0", "t2")],
        [c],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()


@pytest.mark.parametrize("stale", [True, False])
def test_a_stale_copy_that_exposing_hides_is_found_among_the_models_own_copies(stale):
    """The rerun with every intermediate exposed passes; the model as it ran is rerun, and its
    first own output that is a copy and diverges is named. Where none does, nothing is."""
    x0, x1 = np.array([0.25], np.float32), np.array([-0.5], np.float32)
    workload = Workload("w", identity_beside_mul(), {"x0": x0, "x1": x1}, ("t0", "t2"), {})
    case = one_case(BackendTarget("ort-web", "jsep"), capture=True)

    class StaleUnlessExposed:
        def run(self, work: CaseWork) -> BackendRun:
            names = work.workload.output_names
            right = {"t0": x0, "t1": x1 * 300, "t2": x1 * 300}
            outputs = {name: right[name] for name in names}
            if stale and work.case.capture and "t1" not in names:
                outputs["t0"] = x0 + 0.0611
            return BackendRun(runs=(outputs,))

    verdicts = frozenset({"capture-mismatch"})
    node = first_divergent_node(StaleUnlessExposed(), case, workload, verdicts)
    if not stale:
        assert node is None
        return
    assert node is not None
    assert (node["name"], node["output"], node["copy"], node["against"]) == (
        "n0",
        "t0",
        True,
        "eager",
    )
    assert node["max_abs"] == pytest.approx(0.0611)


def or_beside_mul_cast(c1: tuple[bool, ...] = (True, False)) -> bytes:
    """Mul(x0, 4) -> t0 -> Cast to int32 -> t1 beside Or(x1[1], c1) -> t2: explore's finding
    on onnxruntime-web 1.30.0's webgpu build, whose Or (run on the CPU) replays wrong under
    capture only while t0 is no graph output."""
    constants = [
        helper.make_tensor("c0", TensorProto.FLOAT, [], [4.0]),
        helper.make_tensor("c1", TensorProto.BOOL, [len(c1)], list(c1)),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x0", "c0"], ["t0"], name="n0"),
            helper.make_node("Cast", ["t0"], ["t1"], name="n1", to=TensorProto.INT32),
            helper.make_node("Or", ["x1", "c1"], ["t2"], name="n2"),
        ],
        "g",
        [
            helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("x1", TensorProto.BOOL, [1]),
        ],
        [
            helper.make_tensor_value_info("t1", TensorProto.INT32, [1]),
            helper.make_tensor_value_info("t2", TensorProto.BOOL, [len(c1)]),
        ],
        constants,
    )
    opsets = [helper.make_opsetid("", 20)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


@pytest.mark.parametrize("c1", [(True, False), (False,)])
def test_a_wrong_replay_that_exposing_hides_is_found_among_the_models_own_outputs(c1):
    """The rerun with the Mul's output exposed passes; the model as it ran is rerun, and its
    first own output that diverges, of any type, names its node, marked found hidden by
    exposing. An Or with false holds its input's values but is no copy: it computes them."""
    x0, x1 = np.array([0.25], np.float32), np.array([False])
    model = or_beside_mul_cast(c1)
    workload = Workload("w", model, {"x0": x0, "x1": x1}, ("t1", "t2"), {})
    case = one_case(BackendTarget("ort-web", "webgpu"), capture=True)

    class WrongOrUnlessExposed:
        def run(self, work: CaseWork) -> BackendRun:
            names = work.workload.output_names
            right = {"t0": x0 * 4, "t1": np.array([1], np.int32), "t2": np.array(c1)}
            outputs = {name: right[name] for name in names}
            if work.case.capture and "t0" not in names:
                outputs["t2"] = np.array([True] * len(c1))
            return BackendRun(runs=(outputs,))

    verdicts = frozenset({"capture-mismatch"})
    node = first_divergent_node(WrongOrUnlessExposed(), case, workload, verdicts)
    assert node is not None
    assert (node["op_type"], node["output"], node["copy"], node["mismatched"]) == (
        "Or",
        "t2",
        False,
        1,
    )
    assert node["hidden_by_exposing"] is True


@pytest.mark.browser
def test_jseps_stale_identity_beside_a_mul_is_localized_as_a_stale_copy(tmp_path):
    """Explore's Identity+Mul finding on JSEP 1.20.1, at the pinned build: its cause, declared
    stale-copy-output in ort-reshape-output-stale.yaml, is what localization finds (`run` checks
    it), so explore-report merges it with the Reshape's."""
    suite = REPO / "suites/bugs/ort-reshape-output-stale.yaml"
    done = regress(
        "run", suite, "--filter", "model=identity-beside-mul", "--filter", "backend=ort-web:jsep",
        "--filter", "capture=capture", "--out", tmp_path, "-q",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = [json.loads(line) for line in next(tmp_path.rglob("results.jsonl")).open()]
    assert result["verdict"] == "capture-mismatch"
    node = result["divergent_node"]
    assert (node["op_type"], node["output"], node["copy"]) == ("Identity", "t0", True)


def neg_beside_abs() -> bytes:
    """Two nodes that share nothing: Neg(x) -> n, Abs(y) -> m, both graph outputs."""
    graph = helper.make_graph(
        [
            helper.make_node("Neg", ["x"], ["n"], name="neg"),
            helper.make_node("Abs", ["y"], ["m"], name="abs"),
        ],
        "g",
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, [4]) for v in ("x", "y")],
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, [4]) for v in ("n", "m")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


class WrongBeside:
    """Right on every node alone but those in `wrong_alone` (1 too high); beside each other,
    the Abs's values also land in the Neg's output, as JSEP's SkipSimplifiedLayerNormalization
    writes into another node's buffer."""

    def __init__(self, wrong_alone: set[str]):
        self.wrong_alone, self.alone = wrong_alone, []

    def run(self, work: CaseWork) -> BackendRun:
        inputs, names = work.workload.inputs, work.workload.output_names
        right = {"n": lambda: -inputs["x"], "m": lambda: np.abs(inputs["y"])}
        outputs = {name: right[name]() for name in names}
        if set(names) == {"n"} or set(names) == {"m"}:
            self.alone.append(names[0])
            return BackendRun(runs=({k: v + (k in self.wrong_alone) for k, v in outputs.items()},))
        outputs["m"] = outputs["m"] + 1.0
        outputs["n"] = outputs["m"]
        return BackendRun(runs=(outputs,))


@pytest.mark.parametrize(
    ("wrong_alone", "named", "alone", "seen_in"),
    [
        ({"m"}, "abs", "fails", "Neg n"),  # the Abs wrote the wrong values: it is named
        (set(), "neg", "passes", None),  # neither is wrong alone: the first wrong output stays
        ({"n"}, "neg", "fails", None),
    ],
)
def test_a_node_right_alone_hands_the_blame_to_the_one_wrong_alone(
    wrong_alone, named, alone, seen_in
):
    x, y = np.arange(4, dtype=np.float32), -np.arange(4, dtype=np.float32)
    workload = Workload("w", neg_beside_abs(), {"x": x, "y": y}, ("n", "m"), {})
    case = one_case(BackendTarget("ort-web", "jsep"), capture=False)
    backend = WrongBeside(wrong_alone)
    node = first_divergent_node(backend, case, workload, frozenset({"reference-mismatch"}))
    assert node is not None
    assert (node["name"], node["against"], node["alone"]) == (named, "onnxruntime CPU", alone)
    assert node.get("seen_in") == seen_in
    assert backend.alone == (["n"] if named == "neg" and alone == "fails" else ["n", "m"])
    if seen_in:  # the culprit's own divergence, from its run alone
        assert node["output"] == "m" and node["max_abs"] == pytest.approx(1.0)


@pytest.mark.browser
def test_jseps_wrong_values_in_a_bystanders_output_are_blamed_on_the_node_wrong_alone(tmp_path):
    """JSEP's SkipSimplifiedLayerNormalization misses its bias (#28424) and its wrong values
    also land in an Add of another input beside it, whose output comes first: the Add is right
    alone, the SkipSimplifiedLayerNormalization is not, so it is named (the zoo's rule declares
    that cause, and `run` checks it)."""
    suite = REPO / "suites/bugs/upstream/ort-28424-skip-simplified-layernorm-bias.yaml"
    done = regress(
        "run", suite, "--backend", "ort-web:jsep", "--filter", "model=*beside-add",
        "--out", tmp_path, "-q",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = [json.loads(line) for line in next(tmp_path.rglob("results.jsonl")).open()]
    node = result["divergent_node"]
    assert result["verdict"] == "reference-mismatch"
    assert (node["op_type"], node["alone"], node["seen_in"]) == (
        "SkipSimplifiedLayerNormalization",
        "fails",
        "Add sum",
    )


def transpose_then_relu() -> bytes:
    """x -> Transpose (rank 1: it moves nothing) -> Relu -> r."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], name="transpose", perm=[0]),
        helper.make_node("Relu", ["t"], ["r"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


class WrongCopy:
    """A Transpose that moves nothing, its output 1 too high when `copy_wrong`, which the Relu
    reading it shows: the Transpose is a copy, never exposed, so only its run alone tells."""

    def __init__(self, copy_wrong: bool):
        self.copy_wrong, self.alone = copy_wrong, []

    def run(self, work: CaseWork) -> BackendRun:
        names, x = work.workload.output_names, work.workload.inputs
        if names == ("t",):  # the Transpose alone
            self.alone.append("t")
            return BackendRun(runs=({"t": x["x"] + self.copy_wrong},))
        if names == ("r",) and "t" in x:  # the Relu alone, fed onnxruntime CPU's t
            self.alone.append("r")
            return BackendRun(runs=({"r": np.maximum(x["t"], 0)},))
        return BackendRun(runs=({"r": np.maximum(x["x"], 0) + 1},))


@pytest.mark.parametrize(
    ("copy_wrong", "named", "alone", "seen_in"),
    [(True, "transpose", "fails", "Relu r"), (False, "relu", "passes", None)],
)
def test_a_copy_wrong_alone_is_named_where_its_reader_shows_it(copy_wrong, named, alone, seen_in):
    """JSEP 1.17.0's rank-1 Transpose: its wrong values show in whichever node reads them, each
    right alone; the Transpose, left out of the rerun as a copy, is run alone too, and named."""
    x = np.arange(4, dtype=np.float32)
    workload = Workload("w", transpose_then_relu(), {"x": x}, ("r",), {})
    assert [n.output for n in expose_intermediates(workload).unexposed] == ["t"]
    case = one_case(BackendTarget("ort-web", "jsep"), capture=False)
    backend = WrongCopy(copy_wrong)
    node = first_divergent_node(backend, case, workload, frozenset({"reference-mismatch"}))
    assert (node["name"], node["alone"], node.get("seen_in")) == (named, alone, seen_in)
    assert backend.alone == ["r", "t"]


def reshape_then_relu_beside_a_reshape() -> bytes:
    """Reshape(x0) -> t0 -> Relu -> t1, beside Reshape(x0) -> t2: explore's finding on
    onnxruntime-webgpu 1.27.0 (a QuickGelu, a Gelu, a Tanh... in the Relu's place)."""
    shapes = [helper.make_tensor(f"c{i}", TensorProto.INT64, [2], [1, 3]) for i in (0, 1)]
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x0", "c0"], ["t0"], name="n0"),
            helper.make_node("Relu", ["t0"], ["t1"], name="n1"),
            helper.make_node("Reshape", ["x0", "c1"], ["t2"], name="n2"),
        ],
        "g",
        [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [3])],
        [
            helper.make_tensor_value_info("t1", TensorProto.FLOAT, [1, 3]),
            helper.make_tensor_value_info("t2", TensorProto.FLOAT, [1, 3]),
        ],
        shapes,
    )
    opsets = [helper.make_opsetid("", 20)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


@pytest.mark.parametrize("relu_alone", ["replays", "stale too"])
def test_a_node_that_replays_stale_only_after_a_copy_hands_the_blame_to_the_copy(relu_alone):
    """Under capture the Relu returns the recording run's values only where it reads the
    Reshape of a graph input: run alone on its inputs it replays right, so the Reshape (a copy,
    never exposed) is named, a stale copy, and where the Relu shows it is kept. Where the Relu
    replays stale alone too, it stays named."""
    first, second = np.array([1.0, -2.0, 3.0], np.float32), np.array([4.0, 5.0, -6.0], np.float32)
    workload = Workload(
        "w",
        reshape_then_relu_beside_a_reshape(),
        {"x0": first},
        ("t1", "t2"),
        {},
        schedule=(Feed(0, BASE), Feed(0, (0, 1))),
        variants={(0, 1): {"x0": second}},
    )
    case = one_case(BackendTarget("ort-native"), capture=True)

    class StaleAfterAReshape:
        def run(self, work: CaseWork) -> BackendRun:
            ran = []
            for feed in work.workload.feeds(2):
                inputs = work.workload.inputs_of(feed.variant)
                x = inputs.get("x0", inputs.get("t0"))
                right = {"t0": x.reshape(1, 3), "t1": np.maximum(x, 0).reshape(1, 3)}
                right["t2"] = right["t0"]
                ran.append({name: right[name] for name in work.workload.output_names})
            reads_a_reshape = "x0" in work.workload.inputs
            if work.case.capture and (reads_a_reshape or relu_alone == "stale too"):
                ran[1]["t1"] = ran[0]["t1"]  # the recording run's
            return BackendRun(runs=tuple(ran))

    verdicts = frozenset({"stale-input"})
    node = first_divergent_node(StaleAfterAReshape(), case, workload, verdicts)
    assert node is not None and node["run"] == 2
    if relu_alone == "stale too":
        assert (node["op_type"], node["copy"]) == ("Relu", False) and "seen_in" not in node
        return
    assert (node["op_type"], node["name"], node["output"], node["copy"]) == (
        "Reshape",
        "n0",
        "t0",
        True,
    )
    assert (node["seen_in"], node["alone"]) == ("Relu t1", "replays")


def conv_then_tanh() -> bytes:
    """x[1, 1, 3] -> Conv (a 1-wide kernel of 2) -> t0 -> Tanh -> t1."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [1, 1, 1], [2.0])
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["t0"], name="n0"),
            helper.make_node("Tanh", ["t0"], ["t1"], name="n1"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3])],
        [helper.make_tensor_value_info("t1", TensorProto.FLOAT, [1, 1, 3])],
        [weight],
    )
    opsets = [helper.make_opsetid("", 17)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def test_a_fused_kernels_wrong_result_that_exposing_undoes_is_named_by_the_models_output():
    """JSEP 1.17.0 fuses a Conv and its Tanh and gets it wrong; with the Conv's output exposed
    there is no fusion, and the rerun is right. The model as it ran names its own output's
    node, the Tanh, found hidden by exposing; right alone, as the Conv is, it stays named."""
    x = np.array([[[0.1, -0.2, 0.3]]], np.float32)
    workload = Workload("w", conv_then_tanh(), {"x": x}, ("t1",), {})
    case = one_case(BackendTarget("ort-web", "jsep"), capture=False)

    class FusedWrong:
        def run(self, work: CaseWork) -> BackendRun:
            inputs, names = work.workload.inputs, work.workload.output_names
            conv = inputs["x"] * 2 if "x" in inputs else inputs["t0"]
            right = {"t0": conv, "t1": np.tanh(inputs.get("t0", conv))}
            outputs = {name: right[name] for name in names}
            if {"x"} == set(inputs) and names == ("t1",):  # fused: the whole model as it is
                outputs["t1"] = right["t1"] + 0.0025
            return BackendRun(runs=(outputs,))

    node = first_divergent_node(FusedWrong(), case, workload, frozenset({"reference-mismatch"}))
    assert node is not None
    assert (node["op_type"], node["output"], node["against"]) == ("Tanh", "t1", "onnxruntime CPU")
    assert node["hidden_by_exposing"] is True and node["alone"] == "passes"
