"""Each injectable wgpu fault makes the real judge give its verdict, and only where injected.

Real wgpu (lavapipe here), the builtin encoders, onnxruntime on the CPU as the oracle: a cell
runs eager then capture, as the pipeline runs it, and ``runner.judge`` names the verdicts.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

import numpy as np
import pytest

from runner.backends import REGISTRY
from runner.backends.base import BackendRun, CaseWork
from runner.backends.wgpu.backend import WgpuBackend
from runner.backends.wgpu.faults import (
    CACHE_FROZEN_AT_CAPTURE,
    CAPTURE_FALLS_BACK_TO_EAGER,
    FAULTS,
    GRAPHS_SHARE_INPUTS,
    INPUT_SNAPSHOT_AT_CAPTURE,
    LENGTHS_FROZEN_AT_CAPTURE,
    PROGRAM_KEYS,
    RACY_REPLAY,
    REVERSED_SUM,
    ROW_MEAN_SKIPS_FIRST,
    SHAPE_ONLY_CAPTURE_CACHE,
    SKIP_FIRST_IN_MEAN,
    STALE_INPUT_BINDING,
    TANH_THROUGH_EXP,
)
from runner.backends.wgpu.kernels.matmul import matmul_kernel
from runner.backends.wgpu.kernels.rows import layer_norm_kernel, softmax_kernel
from runner.compare import compare_outputs
from runner.judge import Evidence, Twin, judge
from runner.measure import worst
from runner.oracle import compute_reference
from runner.suite.spec import Layout, Tolerance
from runner.workload import materialize
from tests.test_wgpu_backend import encoder_case
from tests.test_wgpu_kernels import open_wgpu

pytestmark = pytest.mark.gpu

STYLES = ("compact", "exported")
# fault -> (verdicts of the eager case, verdicts of its capture twin)
EXPECTED = {
    ROW_MEAN_SKIPS_FIRST: ({"reference-mismatch"}, {"reference-mismatch"}),
    CAPTURE_FALLS_BACK_TO_EAGER: ({"pass"}, {"capture-not-engaged"}),
    RACY_REPLAY: ({"pass"}, {"nondeterministic"}),
    STALE_INPUT_BINDING: ({"pass"}, {"capture-mismatch"}),
    INPUT_SNAPSHOT_AT_CAPTURE: ({"pass"}, {"stale-input", "capture-mismatch"}),
    GRAPHS_SHARE_INPUTS: ({"pass"}, {"wrong-graph", "capture-mismatch"}),
}
GRAPHS = {GRAPHS_SHARE_INPUTS: 2}  # graphs a fault's cell records (one otherwise)
# A decoder's faults, proved on the decoder's loop (tests/test_decoder_suite.py)
DECODER_FAULTS = {LENGTHS_FROZEN_AT_CAPTURE, CACHE_FROZEN_AT_CAPTURE}


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell run eager then capture, and the judge's verdicts on both."""

    eager: BackendRun
    capture: BackendRun
    reference: dict[str, np.ndarray]  # for the last run's inputs
    eager_verdicts: frozenset[str]
    capture_verdicts: frozenset[str]


def run_cell(
    backend: WgpuBackend, style: str, faults: frozenset[str] = frozenset(), opens: bool = True
) -> Cell:
    """The cell eager then capture, three rounds of new inputs (graphs as the fault needs); a
    layout-change sequence of its own, or (not `opens`) one continuing the backend's."""
    runs, evidence = {}, {}
    graphs = max((GRAPHS.get(fault, 1) for fault in faults), default=1)
    for capture in (False, True):
        case, _ = encoder_case(style, Layout("default"), capture)
        case = dataclasses.replace(case, inject=faults, graphs=graphs)
        workload = materialize(case, runs=3)
        references = {v: compute_reference(workload, v) for v in workload.all_variants()}
        work = CaseWork(case, workload, opens and not capture, closes_sequence=False)
        runs[capture] = backend.run(work)
        assert runs[capture].status == "ok", runs[capture].message
        feeds = workload.feeds(3)
        twin = Twin(runs[False], feeds) if capture else None
        evidence[capture] = Evidence(case, runs[capture], references, feeds=feeds, eager=twin)
    return Cell(
        runs[False],
        runs[True],
        references[feeds[-1].variant],
        judge(evidence[False]).verdicts,
        judge(evidence[True]).verdicts,
    )


def max_abs(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> float:
    return worst(compare_outputs(dict(actual), dict(expected), Tolerance()))[0]


@pytest.fixture(scope="module")
def backend():
    opened = open_wgpu()
    yield opened
    opened.close()


def test_every_fault_is_declared_once_and_described():
    assert REGISTRY["wgpu"].faults is FAULTS
    # the program-key faults are proven on generated twins (tests/test_generated.py), the Tanh's
    # by its canary (tests/test_detectors.py)
    proven_elsewhere = {*DECODER_FAULTS, *PROGRAM_KEYS, TANH_THROUGH_EXP}
    assert set(FAULTS) == {SHAPE_ONLY_CAPTURE_CACHE, *EXPECTED, *proven_elsewhere}
    for name, description in FAULTS.items():
        assert re.fullmatch(r"[a-z]+(-[a-z]+)+", name), name
        assert len(description) > 60


def test_kernel_edits_change_only_the_kernels_they_name():
    layer_norm = layer_norm_kernel(("f32",) * 3, "f32")
    edited = SKIP_FIRST_IN_MEAN(layer_norm)
    assert edited.name == f"{layer_norm.name}!{ROW_MEAN_SKIPS_FIRST}"
    assert "var j = 1u; j < params.cols; j++) { total +=" in edited.body
    softmax = softmax_kernel("f32")
    assert SKIP_FIRST_IN_MEAN(softmax) == softmax  # its max loop is right
    assert "k >= 0; k--" in REVERSED_SUM(matmul_kernel(1, ("f32",) * 2, "f32")).body
    with pytest.raises(ValueError, match="no 'for"):  # a kernel rewritten under the fault
        gemm = matmul_kernel(0, ("f32",) * 3, "f32")
        REVERSED_SUM(dataclasses.replace(gemm, body="out[index] = 0.0;"))


@pytest.mark.parametrize("style", STYLES)
def test_clean_cells_pass(backend, style):
    cell = run_cell(backend, style)
    assert cell.eager_verdicts == cell.capture_verdicts == {"pass"}


@pytest.mark.parametrize("style", STYLES)
def test_row_mean_skips_first_is_a_reference_mismatch_in_both_modes(backend, style):
    cell = run_cell(backend, style, frozenset({ROW_MEAN_SKIPS_FIRST}))
    assert (cell.eager_verdicts, cell.capture_verdicts) == EXPECTED[ROW_MEAN_SKIPS_FIRST]
    assert max_abs(cell.eager.outputs, cell.reference) > 0.05  # far beyond abs 1e-3
    assert max_abs(cell.capture.outputs, cell.eager.outputs) == 0  # the same wrong kernel
    assert any(ROW_MEAN_SKIPS_FIRST in d.pipeline for d in cell.eager.trace.dispatches)


@pytest.mark.parametrize("style", STYLES)
def test_capture_falls_back_to_eager_is_capture_not_engaged(backend, style):
    cell = run_cell(backend, style, frozenset({CAPTURE_FALLS_BACK_TO_EAGER}))
    assert (cell.eager_verdicts, cell.capture_verdicts) == EXPECTED[CAPTURE_FALLS_BACK_TO_EAGER]
    steps = len(cell.capture.trace.dispatches)
    assert cell.capture.trace.replay_bind_groups_created == 2 * steps  # every replay rebuilt
    assert cell.capture.trace.replay_uniform_writes == 2 * steps
    assert "capture" not in cell.capture.details
    assert max_abs(cell.capture.outputs, cell.reference) < 1e-5  # outputs stay right


@pytest.mark.parametrize("style", STYLES)
def test_racy_replay_is_nondeterministic(backend, style):
    cell = run_cell(backend, style, frozenset({RACY_REPLAY}))
    assert (cell.eager_verdicts, cell.capture_verdicts) == EXPECTED[RACY_REPLAY]
    _, second, third = cell.capture.runs
    assert any(not np.array_equal(second[k], third[k]) for k in second)  # replays disagree...
    assert max(np.abs(second[k] - third[k]).max() for k in second) < 1e-4  # ...in the last bits
    assert all(np.array_equal(third[k], v) for k, v in cell.eager.outputs.items())
    assert cell.capture.trace.replay_bind_groups_created == 0


@pytest.mark.parametrize("style", STYLES)
def test_stale_input_binding_is_a_capture_mismatch(backend, style):
    cell = run_cell(backend, style, frozenset({STALE_INPUT_BINDING}))
    assert (cell.eager_verdicts, cell.capture_verdicts) == EXPECTED[STALE_INPUT_BINDING]
    assert max_abs(cell.capture.outputs, cell.eager.outputs) > 1.0
    first, *replays = cell.capture.runs
    assert all(np.array_equal(first[k], r[k]) for r in replays for k in first)  # deterministic
    inputs = {
        b.buffer for d in cell.capture.trace.dispatches for b in d.bindings if b.role == "input"
    }
    assert inputs and all("capture-input" in buffer for buffer in inputs)  # the trace shows it


@pytest.mark.parametrize("style", STYLES)
def test_input_snapshot_at_capture_replays_the_recording_runs_inputs(backend, style):
    cell = run_cell(backend, style, frozenset({INPUT_SNAPSHOT_AT_CAPTURE}))
    assert (cell.eager_verdicts, cell.capture_verdicts) == EXPECTED[INPUT_SNAPSHOT_AT_CAPTURE]
    first, *replays = cell.capture.runs
    assert all(np.array_equal(first[k], r[k]) for r in replays for k in first)  # all run 1's
    assert max_abs(cell.eager.runs[0], first) == 0  # the recording run itself is right
    assert cell.capture.trace.replay_bind_groups_created == 0


def test_graphs_record_apart_and_sharing_inputs_returns_the_first_graphs_result(backend):
    clean = run_cell(backend, "compact", frozenset())  # graphs: 1
    two = dataclasses.replace(encoder_case("compact", Layout("default"), True)[0], graphs=2)
    workload = materialize(two, runs=3)
    run = backend.run(CaseWork(two, workload))
    assert run.status == "ok" and len(run.runs) == 6 and run.details["graphs"] == 2
    assert run.trace.replay_bind_groups_created == 0  # graph 1's first run records, no replay
    for outputs, feed in zip(run.runs, workload.feeds(3), strict=True):
        assert max_abs(outputs, compute_reference(workload, feed.variant)) < 1e-4
    crossed = run_cell(backend, "compact", frozenset({GRAPHS_SHARE_INPUTS}))
    assert crossed.capture_verdicts == EXPECTED[GRAPHS_SHARE_INPUTS][1]
    runs = crossed.capture.runs  # g0, g1, g0, g1, ...: graph 1 returns graph 0's result
    assert all(max_abs(runs[i + 1], runs[i]) == 0 for i in range(0, 6, 2))
    assert clean.capture_verdicts == {"pass"}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_a_faulted_cell_leaves_a_later_clean_cell_passing(fault):
    """On a fresh device, the faulted cell runs first and fills every cache; the same cell
    clean, then with the shape-only cache fault (same layout, so honestly a pass), passes, each
    continuing the sequence on that device."""
    fresh = open_wgpu()
    try:
        faulted = run_cell(fresh, "compact", frozenset({fault}))
        assert (faulted.eager_verdicts, faulted.capture_verdicts) == EXPECTED[fault]
        clean = run_cell(fresh, "compact", opens=False)
        assert clean.eager_verdicts == clean.capture_verdicts == {"pass"}
        assert clean.capture.details["capture"]["recorded"]  # nothing faulted was reused
        by_shape = run_cell(fresh, "compact", frozenset({SHAPE_ONLY_CAPTURE_CACHE}), opens=False)
        assert by_shape.eager_verdicts == by_shape.capture_verdicts == {"pass"}
        assert by_shape.capture.details["capture"] == {
            **clean.capture.details["capture"],
            "recorded": False,
        }
    finally:
        fresh.close()


def test_a_run_wide_fault_applies_to_every_case():
    faulty = open_wgpu(inject=frozenset({RACY_REPLAY}))
    try:
        assert faulty.environment()["faults"] == [RACY_REPLAY]
        assert run_cell(faulty, "compact").capture_verdicts == {"nondeterministic"}
    finally:
        faulty.close()
