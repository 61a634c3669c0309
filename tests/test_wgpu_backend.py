"""WgpuBackend end to end: the builtin encoders in several layouts, eager and capture, against
onnxruntime on the CPU; the binding trace; the fault switch; unsupported ops and errors."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from runner.backends import REGISTRY, open_backend
from runner.backends.base import BackendOptions, BackendRun, CaseWork
from runner.backends.wgpu.backend import WgpuBackend
from runner.compare import compare
from runner.errors import EnvironmentUnusable
from runner.matrix import Case
from runner.oracle import compute_reference
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
from runner.workload import Workload, materialize
from tests.conftest import REPO, continuing, opening
from tests.test_wgpu_kernels import make_case, make_workload, open_wgpu

pytestmark = pytest.mark.gpu

FAULT = "shape-only-capture-cache"
SHAPE = Shape((("batch", 2), ("sequence", 13)))
ORDERS = [(), ("eps", "heads", "scale"), ("cols", "rows", "eps"), ("strides", "size", "scale")]
ENCODERS = {
    "compact": EncoderParams(style="compact", layers=2, hidden=32, heads=4, ffn=64),
    "exported": EncoderParams(style="exported", layers=1, hidden=32, heads=2, ffn=64),
}


@pytest.fixture(scope="module")
def backend():
    opened = open_wgpu()
    yield opened
    opened.close()


def encoder_case(
    style: str, layout: Layout, capture: bool, shape: Shape = SHAPE, inputs=None
) -> tuple[Case, Workload]:
    spec = ModelSpec(
        f"encoder-{style}", builtin="encoder", encoder=ENCODERS[style], inputs=inputs or {}
    )
    target = BackendTarget("wgpu")
    suite = Suite("wgpu-encoder", Path("wgpu.yaml"), (spec,), (shape,), (layout,), (target,))
    case = Case(suite, spec, shape, layout, target, capture, Tolerance())
    return case, materialize(case)


def matches(result: BackendRun, expected: dict[str, np.ndarray]) -> bool:
    return all(compare(result.outputs[k], v, Tolerance()).ok for k, v in expected.items())


@pytest.mark.parametrize("style", sorted(ENCODERS))
@pytest.mark.parametrize("order", ORDERS, ids=lambda order: "-".join(order) or "default")
def test_encoder_layouts_eager_and_capture_match_onnxruntime(backend, style, order):
    layout = Layout("-".join(order) or "default", order=order)
    for capture in (False, True):
        case, workload = encoder_case(style, layout, capture)
        result = backend.run(CaseWork(case, workload))
        assert result.status == "ok", result.message
        assert len(result.runs) == 3
        expected = compute_reference(workload)
        for run in result.runs:
            for name, value in expected.items():
                comparison = compare(run[name], value, Tolerance())
                assert comparison.ok, f"{style} {order} capture={capture} {name}: {comparison}"


def test_exported_encoder_with_padding_in_the_attention_mask(backend):
    mask = {"attention_mask": InputSpec(low=0, high=2, seed=3)}  # zeros: masked keys
    for capture in (False, True):
        case, workload = encoder_case("exported", Layout("mask"), capture, inputs=mask)
        assert 0 in workload.inputs["attention_mask"]
        result = backend.run(CaseWork(case, workload))
        assert result.status == "ok", result.message
        assert matches(result, compute_reference(workload))


def test_layout_order_changes_the_uniform_structs(backend):
    keys = {}
    for order in ORDERS:
        case, workload = encoder_case("compact", Layout("x", order=order), capture=False)
        keys[order] = {d.pipeline for d in backend.run(CaseWork(case, workload)).trace.dispatches}
    assert keys[()] != keys[("eps", "heads", "scale")]  # the layer norm's eps moved first
    assert keys[("eps", "heads", "scale")] != keys[("cols", "rows", "eps")]
    assert keys[("cols", "rows", "eps")] != keys[("strides", "size", "scale")]


def test_capture_replays_without_bind_groups_or_uniform_writes(backend):
    shape = Shape((("batch", 1), ("sequence", 7)))  # a session no other test made
    case, workload = encoder_case("exported", Layout("trace"), capture=False, shape=shape)
    eager = backend.run(opening(case, workload))
    steps = len(eager.trace.dispatches)
    assert steps == eager.details["dispatches"] > 0
    assert eager.trace.replay_bind_groups_created == 2 * steps  # rebuilt on every run
    assert eager.trace.replay_uniform_writes == 2 * steps

    case, workload = encoder_case("exported", Layout("trace"), capture=True, shape=shape)
    captured = backend.run(continuing(case, workload))
    assert captured.details["capture"]["recorded"]
    assert captured.trace.bind_groups_created == steps
    assert captured.trace.replay_bind_groups_created == 0
    assert captured.trace.replay_uniform_writes == 0
    assert [d.node for d in captured.trace.dispatches] == [d.node for d in eager.trace.dispatches]
    roles = {b.role for d in captured.trace.dispatches for b in d.bindings}
    assert roles == {"input", "output", "weight", "intermediate", "uniform"}
    for dispatch in captured.trace.dispatches:  # uniforms bind apart from every tensor slot
        assert [b.slot for b in dispatch.bindings if b.role == "uniform"] == [16]
        assert all(b.slot < 16 for b in dispatch.bindings if b.role != "uniform")

    again = backend.run(continuing(case, workload))  # the same layout again: its capture
    assert not again.details["capture"]["recorded"]
    assert again.trace.bind_groups_created == 0 and again.trace.uniform_writes == 0
    assert again.details["capture"]["key"] == captured.details["capture"]["key"]


@pytest.mark.parametrize("values", [(("eps", 0.5),), (("heads", 2),)], ids=["eps", "heads"])
def test_fault_switch_replays_the_earlier_layouts_capture(values):
    """Layout A eager and capture, then B; the fault injected into B's capture case only."""
    first, second = Layout("a"), Layout("b", values=values)
    fresh = open_wgpu()  # empty device caches: A records the first capture for these shapes
    try:
        results = {}
        for name, layout in (("a", first), ("b", second)):
            for capture in (False, True):
                case, workload = encoder_case("compact", layout, capture)
                if name == "b" and capture:
                    case = dataclasses.replace(case, inject=frozenset({FAULT}))
                work = continuing(case, workload) if results else opening(case, workload)
                results[name, capture] = (
                    fresh.run(work),
                    compute_reference(workload),
                )
        (stale, expected_b), (_, expected_a) = results["b", True], results["a", True]
        assert not matches(results["b", False][0], expected_a)  # the layouts differ
        assert matches(results["b", False][0], expected_b)  # eager is unaffected
        assert matches(stale, expected_a) and not matches(stale, expected_b)
        assert stale.trace.dispatches == results["a", True][0].trace.dispatches
        assert stale.trace.bind_groups_created == 0
        assert not stale.details["capture"]["recorded"]

        case, workload = encoder_case("compact", second, capture=True)  # without the fault
        fixed = fresh.run(continuing(case, workload))
        assert fixed.details["capture"]["recorded"] and matches(fixed, expected_b)
    finally:
        fresh.close()


def test_run_wide_fault_with_an_order_change_binds_the_earlier_programs():
    faulty = open_wgpu(inject=frozenset({FAULT, "some-ort-web-fault"}), runs=2)
    try:
        assert faulty.environment()["faults"] == [FAULT]  # other backends' faults are not ours
        runs = []
        for order in (("eps", "heads", "scale"), ("cols", "rows", "eps")):
            case, workload = encoder_case("compact", Layout("-".join(order), order=order), True)
            runs.append(faulty.run(continuing(case, workload) if runs else opening(case, workload)))
        pipelines = [[d.pipeline for d in run.trace.dispatches] for run in runs]
        assert pipelines[1] == pipelines[0]
        assert runs[1].details["capture"]["key"] == runs[0].details["capture"]["key"]
    finally:
        faulty.close()


def _chain_model(op: str, **attrs):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="first"),
        helper.make_node(op, ["r"], ["y"], name="culprit", **attrs),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_empty_tensor_value_info("y")],
    )
    # opset 11: a reduction's axes an attribute
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


@pytest.mark.parametrize(
    "op, attrs, words",
    [("Sin", {}, "Sin"), ("ReduceSum", {"axes": [0]}, "trailing axes")],
)
def test_unsupported_op_is_a_status_naming_it(backend, op, attrs, words):
    workload = make_workload(_chain_model(op, **attrs), {"x": np.ones((3, 5), np.float32)})
    result = backend.run(CaseWork(make_case(), workload))
    assert result.status == "unsupported-op"
    assert op in result.message and words in result.message and "culprit" in result.message
    assert result.details == {"op": op, "node": "culprit"}


def test_a_failing_case_is_an_error_status_not_an_exception(backend):
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"])],
        "ids",
        [
            helper.make_tensor_value_info("table", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2]),
        ],
        [helper.make_empty_tensor_value_info("y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"table": np.ones((4, 3), np.float32), "ids": np.array([0, 2**40], np.int64)}
    result = backend.run(CaseWork(make_case(), make_workload(model, feeds)))
    assert result.status == "error" and "int32" in result.message

    del feeds["ids"]
    result = backend.run(CaseWork(make_case(), make_workload(model, feeds)))
    assert result.status == "error" and "ids" in result.message


def test_inputs_must_agree_with_the_pinned_shape(backend):
    case, workload = encoder_case("compact", Layout("pins"), capture=False)
    wrong = dataclasses.replace(workload, shape={**workload.shape, "sequence": 99})
    result = backend.run(CaseWork(case, wrong))
    assert result.status == "error" and "pins" in result.message


def test_timings_sessions_and_timeout(backend):
    shape = Shape((("batch", 1), ("sequence", 5)))  # a session no other test made
    case, workload = encoder_case("compact", Layout("timing"), capture=False, shape=shape)
    first = backend.run(opening(case, workload))
    assert first.details["session_created"]
    assert first.timings.runs == 3
    assert first.timings.session_ms > 0 and first.timings.first_run_ms > 0
    assert first.timings.median_run_ms > 0
    second = backend.run(continuing(case, workload))
    assert not second.details["session_created"]
    assert second.details["session"] == first.details["session"]

    hurried = open_wgpu(timeout_s=1e-9)
    try:
        result = hurried.run(CaseWork(case, workload))
        assert result.status == "timeout" and len(result.runs) == 1
    finally:
        hurried.close()


def test_environment_and_adapter_choice(backend):
    environment = backend.environment()
    adapter = environment["adapter"]
    assert adapter["name"] and adapter["backend_type"] and adapter["adapter_type"]
    assert set(adapter) >= {"vendor", "architecture", "driver"}
    assert environment["wgpu"] and environment["faults"] == []

    assert (
        backend.run(CaseWork(make_case(adapter="no-such-adapter"), _identity())).status == "skipped"
    )
    named = open_wgpu(adapter=adapter["name"][:8])
    try:
        assert named.environment()["adapter"]["name"] == adapter["name"]
        # the command line's adapter (options) overrides the suite's (the case's target)
        assert named.run(CaseWork(make_case(adapter="no-such-adapter"), _identity())).status == "ok"
    finally:
        named.close()
    with pytest.raises(EnvironmentUnusable, match="mesa-vulkan-drivers"):
        WgpuBackend(BackendOptions(adapter="no-such-adapter"))


def _identity() -> Workload:
    model = _chain_model("Relu")
    return make_workload(model, {"x": np.ones((3, 5), np.float32)})


def test_no_adapter_is_environment_unusable_with_the_fix():
    """A backend type wgpu-native never has: the constructor must say how to get an adapter."""
    script = (
        "from runner.backends.base import BackendOptions\n"
        "from runner.backends.wgpu.backend import WgpuBackend\n"
        "from runner.errors import EnvironmentUnusable\n"
        "try:\n    WgpuBackend(BackendOptions())\n"
        "except EnvironmentUnusable as error:\n    print('UNUSABLE', error)\n"
    )
    env = {**os.environ, "WGPU_BACKEND_TYPE": "Null"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert "UNUSABLE" in done.stdout and "mesa-vulkan-drivers" in done.stdout, done.stderr


def test_the_registry_opens_it():
    opened = open_backend("wgpu", BackendOptions(runs=1))
    try:
        assert opened.name == "wgpu" and FAULT in REGISTRY["wgpu"].faults
        assert opened.run(CaseWork(make_case(), _identity())).status == "ok"
    finally:
        opened.close()
