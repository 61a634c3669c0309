"""Verdict logic on constructed backend runs (the backends' own tests inject real faults)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from runner.backends.base import BackendRun, Timings, Trace
from runner.judge import Evidence, judge, outcome
from runner.matrix import Case
from runner.suite.spec import (
    BackendTarget,
    EncoderParams,
    Layout,
    ModelSpec,
    Shape,
    Suite,
    Tolerance,
)

REF = {"y": np.linspace(-1, 1, 8, dtype=np.float32)}
OTHER = {"y": REF["y"] + 0.5}  # another layout's reference (e.g. another eps)


def case(capture: bool, label: str = "B") -> Case:
    model = ModelSpec("m", builtin="encoder", encoder=EncoderParams())
    suite = Suite("s", Path("s.yaml"), (model,), (), (Layout(label),), (BackendTarget("wgpu"),))
    return Case(
        suite,
        model,
        Shape((("batch", 1),)),
        Layout(label),
        BackendTarget("wgpu"),
        capture,
        Tolerance(),
    )


def run(*outputs, **trace) -> BackendRun:
    return BackendRun(runs=tuple(outputs), timings=Timings(runs=len(outputs)), trace=Trace(**trace))


def verdicts(ev: Evidence) -> set[str]:
    return set(judge(ev).verdicts)


def test_clean_runs_pass():
    eager = run(REF, REF, REF)
    assert verdicts(Evidence(case(False), eager, REF)) == {"pass"}
    ev = Evidence(case(True), run(REF, REF, REF), REF, eager=eager, earlier=(("A", OTHER),))
    judgement = judge(ev)
    assert judgement.verdicts == {"pass"} and judgement.attribution is None
    assert judgement.max_abs == 0.0


def test_reference_mismatch_is_eager_and_follows_to_the_twin():
    bad = {"y": REF["y"] * 2}
    eager = run(bad, bad, bad)
    judgement = judge(Evidence(case(False), eager, REF))
    assert judgement.verdict == "reference-mismatch" and judgement.attribution == "eager too"
    capture = judge(Evidence(case(True), run(bad, bad, bad), REF, eager=eager))
    assert capture.verdicts == {"reference-mismatch"}, "capture agrees with eager: a kernel bug"


def test_capture_mismatch_against_eager():
    eager = run(REF, REF, REF)
    off = {"y": REF["y"] + 0.01}
    judgement = judge(Evidence(case(True), run(REF, off, off), REF, eager=eager))
    assert judgement.verdicts == {"capture-mismatch"}
    assert judgement.attribution == "capture only"
    assert "differs from eager" in judgement.message


def test_stale_layout_names_the_earlier_layout():
    eager = run(REF, REF, REF)
    ev = Evidence(
        case(True),
        run(OTHER, OTHER, OTHER),
        REF,
        eager=eager,
        earlier=(("A", OTHER), ("C", {"y": REF["y"] - 3})),
    )
    judgement = judge(ev)
    assert judgement.verdict == "stale-layout"
    assert judgement.verdicts == {"stale-layout", "capture-mismatch"}
    assert judgement.stale_from == "A"
    assert judgement.attribution == "capture only, after a layout change"


def test_stale_layout_silent_when_no_earlier_layout_explains_it():
    eager = run(REF, REF, REF)
    noise = {"y": REF["y"] + 0.3}
    ev = Evidence(case(True), run(noise, noise, noise), REF, eager=eager, earlier=(("A", OTHER),))
    assert verdicts(ev) == {"capture-mismatch"}


def test_nondeterministic_replays():
    eager = run(REF, REF, REF)
    wobble = {"y": REF["y"] + 1e-7}
    ev = Evidence(case(True), run(REF, REF, wobble), REF, eager=eager)
    assert verdicts(ev) == {"nondeterministic"}
    # the recording run may differ from replays without being nondeterministic
    assert verdicts(Evidence(case(True), run(wobble, REF, REF), REF, eager=eager)) == {"pass"}


def test_capture_not_engaged():
    eager = run(REF, REF, REF)
    lazy = run(REF, REF, REF, replay_bind_groups_created=14, replay_uniform_writes=3)
    judgement = judge(Evidence(case(True), lazy, REF, eager=eager))
    assert judgement.verdicts == {"capture-not-engaged"}
    assert "14 bind groups" in judgement.message
    assert verdicts(Evidence(case(False), lazy, REF)) == {"pass"}, "eager may create them"


@pytest.mark.parametrize("status", ["capture-unsupported", "unsupported-op", "error", "timeout"])
def test_backend_status_is_the_verdict(status):
    failed = BackendRun(status=status, message="why")
    judgement = judge(Evidence(case(True), failed, REF, eager=run(REF, REF)))
    assert judgement.verdicts == {status} and judgement.message == "why"
    assert judgement.max_abs is None


@pytest.mark.parametrize(
    ("got", "expect", "result"),
    [
        ({"pass"}, {"pass"}, "expected"),
        ({"capture-mismatch"}, {"pass"}, "unexpected"),
        ({"stale-layout", "capture-mismatch"}, {"capture-mismatch"}, "expected"),
        ({"pass"}, {"stale-layout"}, "unexpected-pass"),
        ({"error"}, {"stale-layout"}, "unexpected"),
        ({"skipped"}, {"pass"}, "skipped"),
    ],
)
def test_outcome(got, expect, result):
    assert outcome(frozenset(got), frozenset(expect)) == result


def test_a_failing_revisit_is_attributed_to_the_layout_change():
    eager = run(REF, REF, REF)
    off = {"y": REF["y"] + 0.01}
    revisit = dataclasses.replace(case(True), revisit=True)
    judgement = judge(Evidence(revisit, run(REF, off, off), REF, eager=eager))
    assert judgement.verdicts == {"capture-mismatch"}
    assert judgement.attribution == "capture only, after a layout change"
