"""explore --models generated: drawn models valid by construction and under key pressure, the
tolerance rule, the program-key faults firing on real wgpu (and quiet clean), each canary found
and shrunk by explore, findings that reproduce under `run`, what a target lacks learned, and bad
input refused."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from hypothesis import HealthCheck, find, given, settings
from onnx import TensorProto, helper

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions, CaseWork
from runner.backends.wgpu.backend import WgpuBackend
from runner.errors import InvalidInput
from runner.explore import generated
from runner.explore.generated import generated_models, tolerance
from runner.explore.record import read_record
from runner.explore.space import float_types, learned_lacking, narrowing, vocabulary
from runner.explore.vocabulary import BOUNDARIES, MICROSOFT, OPS, WHOLE_DRAW, unary
from runner.oracle import compute_reference
from runner.suite import load_suite
from runner.suite.spec import BackendTarget
from tests.test_wgpu_kernels import make_case, make_workload

from .conftest import REPO, regress

# what an explore finds within its budget: one such test at a time (tests/conftest.py)
pytestmark = pytest.mark.clock

EVERY_OP = tuple(OPS)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(generated_models(EVERY_OP, tuple(generated.DTYPES), generated.OPSETS))
def test_drawn_models_are_valid_and_onnxruntime_runs_them(drawn):
    model = onnx.load_from_string(drawn.model)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(drawn.model, providers=["CPUExecutionProvider"])
    feeds = {
        i.name: np.zeros(
            [d.dim_value for d in i.type.tensor_type.shape.dim],
            helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type),
        )
        for i in model.graph.input
    }
    outputs = session.run(None, feeds)
    assert len(outputs) == len(model.graph.output) >= 1
    # a Cast brings its scaling Mul, a decomposed LayerNorm is 7 nodes
    assert 1 <= drawn.nodes <= 2 * generated.MAX_NODES
    assert drawn.tolerance.abs >= 1e-4


def _attributes(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _model(drawn) -> onnx.ModelProto:
    return onnx.load_from_string(drawn.model)


def test_the_draw_puts_twins_of_one_op_in_one_graph():
    """Key pressure: twins that differ only in an attribute, or in their operand's rank, and a
    model whose second layout differs only in its layer norm's epsilon (the seed's class)."""

    def attribute_twins(drawn) -> bool:
        casts = [n for n in _model(drawn).graph.node if n.op_type == "Cast"]
        return len({_attributes(n)["to"] for n in casts}) == 2

    def rank_twins(drawn) -> bool:
        model = onnx.shape_inference.infer_shapes(_model(drawn))
        ranks = {
            v.name: len(v.type.tensor_type.shape.dim)
            for v in [*model.graph.input, *model.graph.value_info]
        }
        # a contrib op's outputs have no inferred shape: onnx does not know com.microsoft
        relus = [n for n in model.graph.node if n.op_type == "Relu" and n.input[0] in ranks]
        return len({ranks[n.input[0]] for n in relus}) == 2

    twins = settings(
        max_examples=4000, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    for reached in (attribute_twins, rank_twins, lambda drawn: bool(drawn.layouts)):
        drawn = find(generated_models(EVERY_OP), reached, settings=twins)
        assert drawn.nodes <= 2 * generated.MAX_NODES  # a Cast brings its scaling Mul
    layered = find(generated_models(EVERY_OP), lambda d: bool(d.layouts), settings=twins)
    assert "LayerNormalization" in layered.ops
    assert layered.layouts[0] == {"label": "default"}
    assert set(layered.layouts[1]["values"]) == {"eps"}


def test_the_draw_reaches_each_dimension(tmp_path):
    """Where real WebGPU bugs live: float16, a dim at a size boundary, attributes left to their
    defaults, contrib ops (the attention ops too), a float32 island in a float16 graph,
    operands that both broadcast, either one first, and a second session preferring NCHW
    where the target's sessions take that option."""
    models = generated_models(EVERY_OP, tuple(generated.DTYPES))
    reach = settings(
        max_examples=3000, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )

    def inputs(drawn) -> list:
        return list(_model(drawn).graph.input)

    def dims(drawn) -> list[int]:
        return [d.dim_value for i in inputs(drawn) for d in i.type.tensor_type.shape.dim]

    def both_broadcast(drawn) -> bool:
        model = onnx.shape_inference.infer_shapes(_model(drawn))
        shapes = {
            v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
            for v in [*model.graph.input, *model.graph.value_info, *model.graph.output]
        }
        shapes |= {t.name: tuple(t.dims) for t in model.graph.initializer}
        # a contrib op's output has no inferred shape
        return any(
            n.op_type in ("Add", "And") and {*n.input, *n.output} <= shapes.keys()
            and len({shapes[i] for i in n.input}) == 2
            and all(shapes[n.output[0]] != shapes[i] for i in n.input)
            for n in model.graph.node
        )  # fmt: skip

    half = find(models, lambda d: d.dtype == "float16", settings=reach)
    assert {i.type.tensor_type.elem_type for i in inputs(half)} == {TensorProto.FLOAT16}
    assert half.tolerance.abs >= generated.FLOAT16_ABS
    wide = find(models, lambda d: any(n > 6 for n in dims(d)), settings=reach)
    assert set(dims(wide)) & set(BOUNDARIES)
    assert find(models, lambda d: d.omitted > 0, settings=reach).omitted >= 1
    contrib = find(models, lambda d: "SkipSimplifiedLayerNormalization" in d.ops, settings=reach)
    assert [o.domain for o in _model(contrib).opset_import] == ["", MICROSOFT]
    for attention in ("RotaryEmbedding", "MultiHeadAttention", "GroupQueryAttention"):
        find(models, lambda d, op=attention: op in d.ops, settings=reach)
    mixed = find(models, lambda d: "mixed float16/float32" in generated.buckets(d), settings=reach)
    cast_types = {_attributes(n)["to"] for n in _model(mixed).graph.node if n.op_type == "Cast"}
    assert {TensorProto.FLOAT, TensorProto.FLOAT16} <= cast_types
    find(models, both_broadcast, settings=reach)
    # where the target's sessions take preferredLayout: a second session in NCHW
    both_layouts = find(
        generated_models(EVERY_OP, ("float32",), preferred_layouts=True),
        lambda d: "two data layouts" in generated.buckets(d),
        settings=reach,
    )
    assert generated.DATA_LAYOUT_OPS & set(both_layouts.ops)
    written = generated.write_suite(both_layouts, tmp_path, "ort-web")
    [*_, nchw] = load_suite(written.path, REGISTRY).layouts
    assert (nchw.label, nchw.preferred_layout) == ("NCHW", "NCHW")


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(generated_models(EVERY_OP, tuple(generated.DTYPES)))
def test_only_a_graph_input_is_scaled_to_a_large_magnitude(drawn):
    """A computed value scaled by 300 would scale up what a GPU's Erf may be off by."""
    model = _model(drawn)
    large = {
        t.name for t in model.graph.initializer if np.abs(onnx.numpy_helper.to_array(t)).max() > 88
    }
    inputs = {i.name for i in model.graph.input}
    for node in model.graph.node:
        if node.op_type == "Mul" and large & {*node.input}:
            assert node.input[0] in inputs


def test_the_draw_reaches_the_zoos_triggers():
    """Upstream's bugs the narrow draw could not reach (docs/zoo.md's recall): an opset-18
    AveragePool (#29835; opset 18 draws no Gelu), a rank-1 Transpose (#22997), a Softmax over
    another axis than the last (#22231), a Where whose own condition broadcasts (#19009), a Tanh
    past 88 (#19201)."""
    models = generated_models(EVERY_OP, ("float32",), generated.OPSETS)
    reach = settings(
        max_examples=3000, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )

    def nodes(drawn, op: str) -> list[onnx.NodeProto]:
        return [n for n in _model(drawn).graph.node if n.op_type == op]

    def shapes(drawn) -> dict[str, list[int]]:
        model = onnx.shape_inference.infer_shapes(_model(drawn))
        values = [*model.graph.input, *model.graph.value_info, *model.graph.output]
        return {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}

    def scaled(drawn, op: str) -> bool:
        model = _model(drawn)
        large = {
            t.name for t in model.graph.initializer if onnx.numpy_helper.to_array(t).max() > 88
        }
        made = {n.output[0] for n in model.graph.node if n.op_type == "Mul" and large & {*n.input}}
        return any(n.input[0] in made for n in nodes(drawn, op))

    old = find(models, lambda d: d.opset == 18 and "AveragePool" in d.ops, settings=reach)
    assert [o.version for o in _model(old).opset_import] == [18]
    assert not find(models, lambda d: d.opset == 18, settings=reach).ops.count("Gelu")
    find(models, lambda d: any(len(shapes(d)[n.input[0]]) == 1 for n in nodes(d, "Transpose")),
         settings=reach)  # fmt: skip
    middle = find(
        models,
        lambda d: any(
            _attributes(n).get("axis", -1) not in (-1, len(shapes(d)[n.input[0]]) - 1)
            for n in nodes(d, "Softmax")
        ),
        settings=reach,
    )
    assert "Softmax" in middle.ops
    find(
        models,
        lambda d: any(
            n.input[0] in {i.name for i in _model(d).graph.input}
            and shapes(d)[n.input[0]] == [1]
            and shapes(d)[n.output[0]] != [1]
            for n in nodes(d, "Where")
        ),
        settings=reach,
    )
    find(models, lambda d: scaled(d, "Tanh"), settings=reach)


def test_bystanders_are_the_nodes_the_culprit_neither_reads_nor_feeds():
    """A ReduceSum of x0 beside a Relu of x1 feeding a Reshape: with the Reshape the culprit,
    the ReduceSum goes, with its input and output; the Relu it reads stays. Each graph output
    can go too, with the nodes only it needs (the one way to drop one of two bystanders)."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, 2])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    nodes = [
        helper.make_node("ReduceSum", ["x0", "axes"], ["t0"], name="n0"),
        helper.make_node("Relu", ["x1"], ["t1"], name="n1"),
        helper.make_node("Reshape", ["t1", "shape"], ["t2"], name="n2"),
    ]
    graph = helper.make_graph(
        nodes,
        "generated",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2]) for x in ("x0", "x1")],
        [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("t2", TensorProto.FLOAT, [1, 2])],
        initializer=[shape, axes],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    drawn = generated.GeneratedModel(
        model.SerializeToString(),
        ("ReduceSum", "Relu", "Reshape"),
        ("ReduceSum", "Relu", "Reshape"),
        (),
        tolerance(1),
    )
    pruned = generated.without_bystanders(drawn, "n2")
    assert pruned is not None and pruned.ops == pruned.entries == ("Relu", "Reshape")
    kept = onnx.load_from_string(pruned.model).graph
    assert [i.name for i in kept.input] == ["x1"] and [o.name for o in kept.output] == ["t2"]
    assert [t.name for t in kept.initializer] == ["shape"]
    assert generated.without_bystanders(pruned, "n2") is None  # nothing left to go
    assert generated.without_bystanders(drawn, "n9") is None
    # one graph output at a time: without t2, the Relu and the Reshape go; without t0, the
    # ReduceSum; a lone output stays
    without_t2 = generated.without_output(drawn, "t2")
    assert without_t2 is not None and without_t2.ops == ("ReduceSum",)
    assert [o.name for o in onnx.load_from_string(without_t2.model).graph.output] == ["t0"]
    assert generated.without_output(drawn, "t0").ops == ("Relu", "Reshape")
    assert generated.without_output(without_t2, "t0") is None


def test_coverage_counts_nodes_by_the_vocabulary_entry_that_drew_them():
    """A decomposed LayerNorm's ReduceMean, Pow, Sqrt... are its own nodes, Where's Greater is
    Where's: what a campaign tried is counted as the vocabulary names it."""
    models = generated_models(("DecomposedLayerNorm", "Where"), ("float32",))
    both = find(
        models,
        lambda d: {"DecomposedLayerNorm", "Where"} <= set(d.entries) and "Greater" in d.ops,
        settings=settings(database=None, derandomize=True, max_examples=2000),
    )
    covered = generated.Coverage()
    covered.add(both)
    counted = {op.op: op for op in covered.ops()}
    assert set(counted) == {"DecomposedLayerNorm", "Where"}
    where = sum(op in ("Where", "Greater") for op in both.ops)
    assert counted["Where"].nodes == where >= 2
    assert counted["DecomposedLayerNorm"].nodes == len(both.ops) - where >= 7


def test_half_the_models_start_with_the_op_a_pass_gives_and_shrinking_may_drop_it():
    """A pass's op starts about half its models (the rest start as any model does), so that
    a failure of another op still shrinks to that op alone."""
    starts = collections.Counter()
    models = generated_models(("Relu", "Tanh", "Sigmoid", "Erf"), first="Erf")

    @settings(database=None, derandomize=True, max_examples=300)
    @given(models)
    def drawn(model):
        starts[model.entries[0]] += 1

    drawn()
    assert 0.35 < starts["Erf"] / starts.total() < 0.75, starts
    shrunk = find(models, lambda d: "Tanh" in d.ops, settings=settings(database=None))
    assert shrunk.ops == ("Tanh",)


def test_the_tolerance_follows_the_longest_reduction():
    assert tolerance(1).abs == 1e-4 and tolerance(1).rel == 1e-4
    assert tolerance(5).abs == 1e-4  # a few terms: the floor
    assert tolerance(64).abs == pytest.approx(64 * 2e-5)


def _graph(nodes, inputs, output_shape) -> onnx.ModelProto:
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "twins",
            [
                helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                for name, shape in inputs
            ],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        ),
        opset_imports=[helper.make_opsetid("", generated.OPSET)],
    )
    model.ir_version = generated.IR_VERSION
    return model


def _max_error(model: onnx.ModelProto, feeds: dict, fault: str | None) -> float:
    workload = make_workload(model, feeds)
    backend = WgpuBackend(BackendOptions(inject=frozenset([fault] if fault else [])))
    try:
        run = backend.run(CaseWork(make_case(), workload))
    finally:
        backend.close()
    assert run.status == "ok", run.message
    return float(np.abs(run.outputs["y"] - compute_reference(workload)["y"]).max())


@pytest.mark.gpu
def test_the_program_key_faults_fire_on_their_twins_and_are_quiet_on_a_clean_run():
    rng = np.random.default_rng(0)
    x2, x3 = rng.uniform(-1, 1, (3, 4)).astype(np.float32), rng.uniform(-1, 1, (2, 3, 4))
    casts = _graph(  # two Casts of one input, to int32 and to bool, summed back as floats
        [
            helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32),
            helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BOOL),
            helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["b"], ["fb"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["fi", "fb"], ["y"]),
        ],
        [("x", [3, 4])],
        [3, 4],
    )
    relus = _graph(  # Relu over a rank-2 input, then over a rank-3 one
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Relu", ["z"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["y"]),
        ],
        [("x", [3, 4]), ("z", [2, 3, 4])],
        [2, 3, 4],
    )
    attribute, rank = "program-key-without-attribute", "program-key-without-rank"
    cast_feeds = {"x": 4 * x2}
    relu_feeds = {"x": x2, "z": x3.astype(np.float32)}
    assert _max_error(casts, cast_feeds, None) == 0.0
    assert _max_error(casts, cast_feeds, attribute) >= 1.0  # the bool Cast ran the int one
    assert _max_error(casts, cast_feeds, rank) == 0.0  # one rank: nothing to confuse
    assert _max_error(relus, relu_feeds, None) == 0.0
    assert _max_error(relus, relu_feeds, rank) > 0.1  # rank 3 indexed as rank 2
    assert _max_error(relus, relu_feeds, attribute) == 0.0  # the label holds the rank


def _explore(
    tmp_path: Path, *args: str, budget: str = "40s", process: bool = True
) -> tuple[int, str]:
    """An explore of drawn models on wgpu in a process of its own (seeded draws as a user's run
    gets them), or in this one where it stops before drawing."""
    done = regress(
        "explore",
        "--models",
        "generated",
        "--backend",
        "wgpu",
        "--budget",
        budget,
        "--out",
        str(tmp_path / "found"),
        *args,
        cwd=REPO,
        env={"REGRESS_CACHE_DIR": str(tmp_path / "cache")},
        process=process,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("fault", "verdict", "most_nodes"),
    [
        ("program-key-without-attribute", "reference-mismatch", 4),
        # the same search for the other two faults (50 s each; the fault tests above fire both)
        pytest.param("program-key-without-rank", "reference-mismatch", 3, marks=pytest.mark.slow),
        pytest.param("shape-only-capture-cache", "stale-layout", 1, marks=pytest.mark.slow),
    ],
)
def test_explore_finds_each_program_key_canary_shrunk_and_reproducible(
    tmp_path, fault, verdict, most_nodes
):
    # seed 13 meets the canary after 77 examples; how soon varies with the seed (seeds 7 and
    # 9-13: 77 to 292 examples, 2026-12-07, passes of 10 models each starting with the entry
    # least run), and any change to the draw reshuffles it
    code, printed = _explore(tmp_path, "--inject", fault, "--seed", "13", "--max-findings", "1")
    assert code == 1, printed
    # the first finding is the canary's measure: the explore stops there, its budget unspent
    assert "stopping: 1 finding(s) written (--max-findings)" in printed
    [record] = (tmp_path / "found").glob("explore-*.json")
    [finding] = read_record(record).findings
    path = tmp_path / "found" / finding.yaml
    assert path.name.startswith(verdict), printed
    assert f"{path.name}: reproduced under run" in printed, printed
    issue = (path.with_suffix("") / "ISSUE.md").read_text()  # its repro bundle
    # the culprit inline: its attributes, inputs and the worst elements
    assert "\n- attributes: " in issue and "| element | expected | actual |" in issue
    # shrunk (an op of several nodes, a decomposed LayerNorm, cannot shrink below them)
    [model] = yaml.safe_load(path.read_text())["models"].values()
    assert len(onnx.load(path.parent / model["path"]).graph.node) <= most_nodes, printed
    rerun = regress("run", str(path), "--inject", fault, "--out", str(tmp_path / "rerun"))
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr


@pytest.mark.gpu
@pytest.mark.slow
def test_two_bugs_of_one_verdict_are_both_found_apart_by_their_causes(tmp_path):
    """Two faults failing alike (``reference-mismatch`` at eager): the row mean that skips its
    first element and the program key without attributes. Their culprits differ (a ReduceMean's
    wrong result, another op's), so both are found, written and reproduce."""
    faults = ("row-mean-skips-first", "program-key-without-attribute")
    args = ["--ops", "ReduceMean,Cast,Gelu,Softmax", "--seed", "1"]
    code, printed = _explore(tmp_path, *args, *(f"--inject={fault}" for fault in faults))
    assert code == 1, printed
    [path] = (tmp_path / "found").glob("explore-*.json")
    findings = read_record(path).findings
    assert {(f.verdict, f.action) for f in findings} == {("reference-mismatch", "eager")}
    assert "wrong-result of ReduceMean" in {f.cause for f in findings}
    reductions = [f for f in findings if "ReduceMean" in f.ops]
    keyed = [f for f in findings if "ReduceMean" not in f.ops]
    assert reductions and keyed, printed
    for finding in findings:
        assert f"{Path(finding.yaml).name}: reproduced under run" in printed, printed


@pytest.mark.pypi
def test_explore_runs_generated_models_on_the_cpp_ep_on_lavapipe(tmp_path):
    """ort-native without a GPU (onnxruntime-webgpu on lavapipe): explore judges drawn models on
    ONNX Runtime's C++ EP and finds its stale replay of a view output at once; the backend
    writes no repro bundles, so each finding is its suite file alone, reproduced under run."""
    done = regress(
        "explore", "--models", "generated", "--backend", "ort-native", "--budget", "15s",
        "--ops", "Relu,Reshape", "--dtypes", "float32", "--seed", "1", "--max-findings", "1",
        "--out", tmp_path / "found", "--database", tmp_path / "db",
        process=True,
    )  # fmt: skip
    printed = done.stdout + done.stderr
    assert done.returncode == 1, printed
    assert (
        "reproduced under run (1 failing case(s), as expected), first divergent node n0 "
        "(Reshape); ort-native writes no repro"
    ) in printed
    found = list((tmp_path / "found").glob("*.yaml"))
    assert found and not [p for p in (tmp_path / "found").iterdir() if p.is_dir()]


@pytest.mark.gpu
def test_a_clean_explore_finds_nothing(tmp_path):
    code, printed = _explore(tmp_path, "--seed", "3", budget="20s")
    assert code == 0, printed
    assert "nothing found" in printed
    assert not list((tmp_path / "found").glob("*.yaml"))
    # what it tried: the ops of the models it judged, and their attribute values
    [path] = (tmp_path / "found").glob("explore-*.json")
    record = read_record(path)
    covered = {op.op: op for op in record.covered}
    # counted by the vocabulary's entries: Where's Greater is Where's, a decomposed
    # LayerNorm's Pow and Sqrt its own (their attributes named by their op)
    assert covered and set(covered) <= set(record.vocabulary)
    # spread: each pass starts its models with the entry least run so far
    nodes = [op.nodes for op in record.covered]
    assert min(nodes) >= sum(nodes) / len(nodes) / 5, {op: c.nodes for op, c in covered.items()}
    assert any("=" in value for op in record.covered for value in op.values)  # name=value
    values = sum(len(op.values) for op in record.covered)
    assert f"covered {len(covered)} ops and {values} attribute values (each op's in {path})" in (
        printed
    )


@pytest.mark.gpu
def test_an_op_the_target_lacks_is_learned_and_no_longer_drawn(tmp_path, monkeypatch):
    """wgpu has no Floor kernel: an explore that may draw it learns so, keeps it in the cache
    folder, and the next explore's vocabulary leaves it out (a lone Floor: exit 2)."""
    monkeypatch.setitem(OPS, "Floor", unary("Floor"))
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path / "cache"))
    from runner.cli import main

    code = main(
        ["explore", "--models", "generated", "--backend", "wgpu", "--ops", "Floor,Relu"]
        + ["--dtypes", "float32", "--budget", "10s", "--seed", "1"]
        + ["--out", str(tmp_path / "found")]
    )
    assert code == 0
    lacking = learned_lacking(BackendTarget("wgpu"))
    assert list(lacking) == ["Floor"] and "Floor" in lacking["Floor"]
    assert vocabulary(("Floor", "Relu"), lacking) == ("Relu",)
    assert main(["explore", "--models", "generated", "--backend", "wgpu", "--ops", "Floor"]) == 2


@pytest.mark.parametrize(
    ("args", "budget", "said"),
    [
        (
            ["--ops", "Relu,Nope"],
            "60s",
            "--ops Nope: no such op to draw; expected some of Relu, Add",
        ),
        ([], "5s", "--budget 5s: too short to run one generated model and shrink it"),
        (
            ["--dtypes", "float32,float64"],
            "60s",
            "--dtypes float64: no such float type to draw; expected some of float32, float16",
        ),
        (
            ["--opsets", "20,17"],
            "60s",
            "--opsets 17: no such opset to draw; expected some of 20, 18",
        ),
        (["--max-findings", "0"], "60s", "--max-findings must be at least 1"),
        (
            ["--sizes", "1-6,7-63"],
            "60s",
            "--sizes 7-63: no such size range; expected some of 1-6, 7-64, 65-256, 257-4096",
        ),
        (["--max-ops", "7"], "60s", "--max-ops 7: expected a number of ops from 1 to 6"),
        (
            ["--without", "fusion"],
            "60s",
            "--without fusion: nothing such to leave out; expected some of fusions, defaults, "
            "data-layouts",
        ),
    ],
)
def test_bad_generated_explore_options_exit_2_saying_what_is_expected(tmp_path, args, budget, said):
    code, printed = _explore(tmp_path, *args, budget=budget, process=False)
    assert code == 2, printed
    assert said in printed and "Traceback" not in printed


@pytest.mark.gpu
def test_a_draw_that_can_make_no_model_exits_3_saying_so(tmp_path):
    """A float32 island needs a float16 model: with float32 only, every pass's models are
    rejected, first those starting with it, then any."""
    code, printed = _explore(tmp_path, "--ops", "Float32Island", "--dtypes", "float32")
    assert code == 3, printed
    assert (
        "environment unusable: no model could be drawn from Float32Island: the ops, float types "
        "and sizes asked for leave none that wgpu runs"
    ) in printed and "Traceback" not in printed


@pytest.mark.parametrize("option", [["--ops", "Relu"], ["--sizes", "1-6"], ["--max-ops", "1"]])
def test_draw_options_need_generated_models(option):
    done = regress("explore", "suites/smoke.yaml", "--backend", "wgpu", *option)
    assert done.returncode == 2
    assert f"{option[0]} draws generated models: it needs --models generated" in done.stderr


def test_the_draw_narrows_to_the_sizes_ops_and_dimensions_a_user_names():
    """`--sizes 257-4096 --max-ops 1 --without fusions,defaults`: one op a model, no activation
    or bias after it, every attribute written, each new graph input wide."""
    narrowed = narrowing(("257-4096",), 1, ("fusions", "defaults"))
    widest = collections.Counter()

    @settings(database=None, derandomize=True, max_examples=200)
    @given(generated_models(("Conv", "MatMul", "Gemm"), narrowing=narrowed))
    def drawn(model):
        assert len(model.ops) == 1 and model.omitted == 0, model.ops
        widest.update(b for b in generated.buckets(model) if b.startswith("widest"))

    drawn()
    assert set(widest) == {"widest dim 257-4096"}, widest
    assert narrowing((), None, ()) == WHOLE_DRAW
    # in one order whatever the user's: the example database's key holds it
    assert narrowing((), None, ("defaults", "fusions")).without == ("fusions", "defaults")


def test_float16_is_drawn_until_the_target_is_seen_to_lack_it():
    lacking = {"float16": "the WebGPU adapter lacks shader-f16", "Gelu in float16": "no kernel"}
    assert float_types((), {}) == ("float32", "float16")
    assert float_types((), lacking) == ("float32",)
    with pytest.raises(InvalidInput, match="--dtypes float16: the target lacks it .*shader-f16"):
        float_types(("float16",), lacking)


def test_the_learned_file_is_per_target_and_version(tmp_path, monkeypatch):
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path))
    target = BackendTarget("ort-web", "webgpu", version="1.30.0")
    from runner.explore.space import lacking_file

    path = lacking_file(target)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"Erf": "capture refused: a CPU fallback"}))
    assert learned_lacking(target) == {"Erf": "capture refused: a CPU fallback"}
    assert learned_lacking(BackendTarget("ort-web", "webgpu", version="1.29.0")) == {}


@pytest.mark.gpu
def test_the_bench_measures_wgpu_and_says_what_the_draw_covered():
    bench = subprocess.run(
        [sys.executable, str(REPO / "bench" / "generated.py"), "--models", "8", "--seed", "2"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert bench.returncode == 0, bench.stderr
    [row] = [line for line in bench.stdout.splitlines() if line.startswith("| `wgpu`")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "8" and float(cells[3]) > 0  # models, models per second
    # the pace per dimension: each judged model counted once in its float type's bucket
    types = [line for line in bench.stdout.splitlines() if line.startswith("| dtype ")]
    judged = sum(int(line.split("|")[2].split(",")[0]) for line in types)
    assert types and judged == 8 - int(cells[5])  # all but the discarded ones
    assert "| op | nodes | attribute values |" in bench.stdout


def test_where_programs_outlive_an_example_a_failure_counts_only_if_it_fails_renewed():
    """ort-native keeps its device, and its programs, for its process's life: a failure is run
    again on a renewed backend, and one that passes there is not counted (a program an earlier
    example compiled made it fail)."""
    from runner.explore.explorer import NOT_ALONE, _Examiner

    class Renewing:
        renewed = 0

        def renew(self) -> None:
            self.renewed += 1

    said: list[str] = []
    examiner = _Examiner.__new__(_Examiner)
    examiner.backend, examiner.say, examiner.confirms, examiner.not_alone = (
        Renewing(),
        said.append,
        True,
        0,
    )
    assert examiner._alone_passes(lambda: None)  # passes renewed: not counted
    assert not examiner._alone_passes(lambda: "failed again")
    assert examiner.backend.renewed == 2 and examiner.not_alone == 1 and NOT_ALONE in said[0]
    examiner.confirms = False  # the other backends: a device per example already
    assert not examiner._alone_passes(lambda: None) and examiner.backend.renewed == 2
