"""The step (``runner.step``): a case judged on what its sequence ran before it, skipped before
any backend is asked, and recorded; on real wgpu (lavapipe here) with onnxruntime CPU as the
oracle."""

from __future__ import annotations

import pytest

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions, BackendTarget
from runner.backends.wgpu.backend import WgpuBackend
from runner.matrix import LayoutSequence, expand_matrix, select_cases
from runner.oracle import ReferenceCache
from runner.skips import SKIP_PLATFORM
from runner.step import Step
from runner.suite import load_suite
from tests.test_optests import example_cases

from .conftest import REPO

pytestmark = pytest.mark.gpu

CANARY = "stale-cache/batch=1,sequence=12/layout={}/wgpu/{}"


@pytest.fixture(scope="module")
def stale_cache():
    """The stale-layout canary's sequence on wgpu: base eager, capture, then eps-1e-2's, whose
    capture replays the base capture (the fault ``shape-only-capture-cache``)."""
    cases = expand_matrix([load_suite(REPO / "suites" / "canaries.yaml", REGISTRY)])
    return {c.id: c for c in select_cases(cases, ["model=stale-cache", "backend=wgpu"])}


def test_a_capture_is_judged_against_what_its_sequence_ran_before_it(stale_cache):
    ids = [
        CANARY.format(layout, mode)
        for layout in ("base", "eps-1e-2")
        for mode in ("eager", "capture")
    ]
    backend = WgpuBackend(BackendOptions())
    try:
        step = Step(ReferenceCache(None).references, BackendOptions(runs=3))
        cases = tuple(stale_cache[case_id] for case_id in ids)
        stepped = list(step.sequence(LayoutSequence(cases), backend))
        # eps-1e-2's cases as a sequence of their own: the backend opens it afresh, so its
        # capture has no earlier capture to replay
        alone = list(step.sequence(LayoutSequence(cases[2:]), backend))
    finally:
        backend.close()
    assert [s.judgement.verdict for s in stepped] == ["pass", "pass", "pass", "stale-layout"]
    assert stepped[-1].judgement.stale_from == "base"
    assert "matches layout 'base''s reference" in stepped[-1].judgement.message
    assert [s.judgement.verdict for s in alone] == ["pass", "pass"]
    record = stepped[-1].result("R1")
    assert (record.case_id, record.verdict, record.stale_from) == (ids[-1], "stale-layout", "base")
    assert record.model_digest == stepped[-2].model_digest and len(record.model_digest) == 64
    assert record.wall_ms == stepped[-1].wall_ms > 0


def test_a_case_that_cannot_run_here_is_skipped_before_the_backend_is_asked():
    case = next(
        c
        for c in example_cases(BackendTarget("wgpu"))
        if c.model.name == "ort-ops/softmax/Softmax where Linux is not/T[3]" and not c.capture
    )
    backend = WgpuBackend(BackendOptions())
    try:
        stepped = Step(ReferenceCache(None).references, BackendOptions(runs=3)).run(case, backend)
    finally:
        backend.close()
    assert stepped.run.status == "skipped" and stepped.run.timings.runs == 0
    assert stepped.judgement.verdict == "skipped"
    assert stepped.judgement.message == stepped.run.message
    assert stepped.run.message.startswith(f"{SKIP_PLATFORM}: ")
    assert stepped.references == {} and stepped.model_digest is None
