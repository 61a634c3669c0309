"""Verdict logic on constructed backend runs (the backends' own tests inject real faults)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from runner.backends.base import BackendRun, Timings, Trace
from runner.judge import Evidence, Twin, judge, outcome
from runner.matrix import Case
from runner.schedule import BASE
from runner.suite.spec import (
    BackendTarget,
    EncoderParams,
    Expectation,
    Layout,
    ModelSpec,
    Shape,
    Suite,
    Tolerance,
)
from runner.verdicts import Outcome
from runner.workload import input_schedule

REF = {"y": np.linspace(-1, 1, 8, dtype=np.float32)}
OTHER = {"y": REF["y"] + 0.5}  # another layout's reference (e.g. another eps)
REFS = {BASE: REF}


def case(capture: bool, label: str = "B", **fields) -> Case:
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
        **fields,
    )


def run(*outputs, **trace) -> BackendRun:
    return BackendRun(runs=tuple(outputs), timings=Timings(runs=len(outputs)), trace=Trace(**trace))


def twin(*outputs, feeds=()) -> Twin:
    return Twin(run(*outputs), feeds)


def verdicts(ev: Evidence) -> set[str]:
    return set(judge(ev).verdicts)


def test_clean_runs_pass():
    eager = run(REF, REF, REF)
    assert verdicts(Evidence(case(False), eager, REFS)) == {"pass"}
    ev = Evidence(
        case(True), run(REF, REF, REF), REFS, eager=Twin(eager), earlier=(("A", {BASE: OTHER}),)
    )
    judgement = judge(ev)
    assert judgement.verdicts == {"pass"} and judgement.attribution is None
    assert judgement.max_abs == 0.0


def test_reference_mismatch_is_eager_and_follows_to_the_twin():
    bad = {"y": REF["y"] * 2}
    eager = run(bad, bad, bad)
    judgement = judge(Evidence(case(False), eager, REFS))
    assert judgement.verdict == "reference-mismatch" and judgement.attribution == "eager too"
    capture = judge(Evidence(case(True), run(bad, bad, bad), REFS, eager=Twin(eager)))
    assert capture.verdicts == {"reference-mismatch"}, "capture agrees with eager: a kernel bug"


def test_a_wrong_shape_is_named_with_both_shapes():
    empty = {"y": np.zeros((0, 8), np.float32)}
    judgement = judge(Evidence(case(False), run(REF, REF, REF), {BASE: empty}))
    assert judgement.verdict == "reference-mismatch"
    assert "shape [8] where [0, 8] was expected" in judgement.message
    assert "inf" not in judgement.message


def test_capture_mismatch_against_eager():
    off = {"y": REF["y"] + 0.01}
    judgement = judge(Evidence(case(True), run(REF, off, off), REFS, eager=twin(REF, REF, REF)))
    assert judgement.verdicts == {"capture-mismatch"}
    assert judgement.attribution == "capture only"
    assert "differs from eager in run 2 of 3" in judgement.message


def test_non_finite_outputs_are_named_beside_the_mismatch_that_says_where():
    nan = {"y": np.where(REF["y"] > 0.5, np.nan, REF["y"]).astype(np.float32)}
    eager = judge(Evidence(case(False), run(nan, nan, nan), REFS))
    assert eager.verdicts == {"reference-mismatch", "non-finite"}
    assert eager.verdict == "reference-mismatch"
    [said] = [f.message for f in eager.findings if f.verdict == "non-finite"]
    assert (
        said
        == "eager output 'y' holds 2/8 NaN or infinite elements where onnxruntime CPU's are finite"
    )
    infinite = {"y": np.full(8, np.inf, np.float32)}
    replays = run(REF, infinite, infinite)
    capture = judge(Evidence(case(True), replays, REFS, eager=twin(REF, REF, REF)))
    assert capture.verdicts == {"capture-mismatch", "non-finite"}
    [said] = [f.message for f in capture.findings if f.verdict == "non-finite"]
    assert said.startswith("capture output 'y' holds 8/8 NaN or infinite elements")
    assert verdicts(Evidence(case(False), run(nan, nan, nan), {BASE: nan})) == {"pass"}
    assert verdicts(Evidence(case(False), run(OTHER, OTHER, OTHER), REFS)) == {"reference-mismatch"}


def test_stale_layout_names_the_earlier_layout():
    ev = Evidence(
        case(True),
        run(OTHER, OTHER, OTHER),
        REFS,
        eager=twin(REF, REF, REF),
        earlier=(("A", {BASE: OTHER}), ("C", {BASE: {"y": REF["y"] - 3}})),
    )
    judgement = judge(ev)
    assert judgement.verdict == "stale-layout"
    assert judgement.verdicts == {"stale-layout", "capture-mismatch"}
    assert judgement.stale_from == "A"
    assert judgement.attribution == "capture only, after a layout change"


def test_stale_layout_silent_when_no_earlier_layout_explains_it():
    noise = {"y": REF["y"] + 0.3}
    ev = Evidence(
        case(True), run(noise, noise, noise), REFS, eager=twin(REF, REF, REF),
        earlier=(("A", {BASE: OTHER}),),
    )  # fmt: skip
    assert verdicts(ev) == {"capture-mismatch"}


def test_nondeterministic_replays():
    eager = twin(REF, REF, REF)
    wobble = {"y": REF["y"] + 1e-7}
    ev = Evidence(case(True), run(REF, REF, wobble), REFS, eager=eager)
    assert verdicts(ev) == {"nondeterministic"}
    # the recording run may differ from replays without being nondeterministic
    assert verdicts(Evidence(case(True), run(wobble, REF, REF), REFS, eager=eager)) == {"pass"}


def test_capture_not_engaged():
    lazy = run(REF, REF, REF, replay_bind_groups_created=14, replay_uniform_writes=3)
    judgement = judge(Evidence(case(True), lazy, REFS, eager=twin(REF, REF, REF)))
    assert judgement.verdicts == {"capture-not-engaged"}
    assert "14 bind groups" in judgement.message
    assert verdicts(Evidence(case(False), lazy, REFS)) == {"pass"}, "eager may create them"


@pytest.mark.parametrize("status", ["capture-unsupported", "unsupported-op", "error", "timeout"])
def test_backend_status_is_the_verdict(status):
    failed = BackendRun(status=status, message="why")
    judgement = judge(Evidence(case(True), failed, REFS, eager=twin(REF, REF)))
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


def test_the_judgement_carries_the_outcome_against_the_cases_expectation():
    expected_stale = Expectation(expect=frozenset({"stale-layout"}))
    clean = run(REF, REF, REF)
    assert judge(Evidence(case(False), clean, REFS)).outcome == Outcome.EXPECTED
    unexpected_pass = judge(Evidence(case(False, expectation=expected_stale), clean, REFS))
    assert unexpected_pass.outcome == Outcome.UNEXPECTED_PASS
    broken = judge(Evidence(case(False), run({"y": REF["y"] * 2}), REFS))
    assert broken.outcome == Outcome.UNEXPECTED


def test_a_failing_revisit_is_attributed_to_the_layout_change():
    off = {"y": REF["y"] + 0.01}
    revisit = dataclasses.replace(case(True), revisit=True)
    judgement = judge(Evidence(revisit, run(REF, off, off), REFS, eager=twin(REF, REF, REF)))
    assert judgement.verdicts == {"capture-mismatch"}
    assert judgement.attribution == "capture only, after a layout change"


# -- an input sequence: every run its own inputs ------------------------------------------------

SEQUENCE = input_schedule(3)  # inputs x0, x1, x1
X = {variant: {"y": REF["y"] + i} for i, variant in enumerate((BASE, (0, 1)))}


def test_each_run_is_judged_against_its_own_inputs():
    eager = twin(X[BASE], X[(0, 1)], X[(0, 1)], feeds=SEQUENCE)
    assert verdicts(Evidence(case(False), eager.run, X, feeds=SEQUENCE)) == {"pass"}
    ev = Evidence(case(True), run(X[BASE], X[(0, 1)], X[(0, 1)]), X, feeds=SEQUENCE, eager=eager)
    assert verdicts(ev) == {"pass"}
    # a kernel wrong on the second inputs only
    bad = twin(X[BASE], OTHER, OTHER, feeds=SEQUENCE)
    judgement = judge(Evidence(case(False), bad.run, X, feeds=SEQUENCE))
    assert judgement.verdicts == {"reference-mismatch"}
    assert "on 'y' (run 2): 8/8 elements" in judgement.message


def test_stale_input_names_the_run_whose_inputs_the_replay_read():
    """What onnxruntime-web's C++ builds do with a new input buffer per run: every replay
    computes the first run's inputs."""
    eager = twin(X[BASE], X[(0, 1)], X[(0, 1)], feeds=SEQUENCE)
    stale = run(X[BASE], X[BASE], X[BASE])
    judgement = judge(Evidence(case(True), stale, X, feeds=SEQUENCE, eager=eager))
    assert judgement.verdicts == {"stale-input", "capture-mismatch"}
    assert judgement.verdict == "stale-input" and judgement.stale_from == "run 1"
    assert judgement.message.startswith(
        "capture output 'y' differs from eager in run 2 of 3: 8/8 elements, max abs 1; "
        "run 2 returned the output for run 1's inputs (max abs 0) rather than for its own"
    )
    assert judgement.attribution == "capture only"
    # without an eager twin the references stand in; eager itself is never stale
    no_twin = judge(Evidence(case(True), stale, X, feeds=SEQUENCE))
    assert no_twin.verdict == "stale-input"
    assert verdicts(Evidence(case(False), stale, X, feeds=SEQUENCE)) == {"reference-mismatch"}


def test_a_wrong_output_no_earlier_run_explains_is_no_stale_input():
    eager = twin(X[BASE], X[(0, 1)], X[(0, 1)], feeds=SEQUENCE)
    zeros = {"y": np.zeros(8, np.float32)}
    ev = Evidence(case(True), run(X[BASE], zeros, zeros), X, feeds=SEQUENCE, eager=eager)
    assert verdicts(ev) == {"capture-mismatch"}


GRAPHS = input_schedule(3, graphs=2)  # g0 x0, g1 y0, g0 x1, g1 y1, g0 x1, g1 y1
G = {feed.variant: {"y": REF["y"] + 10 * feed.graph + feed.variant[1]} for feed in GRAPHS}


def test_graphs_are_judged_each_against_its_own_inputs_and_crosstalk_is_named():
    outputs = [G[feed.variant] for feed in GRAPHS]
    eager = twin(*outputs, feeds=GRAPHS)
    two = case(True, graphs=2)
    assert verdicts(Evidence(two, run(*outputs), G, feeds=GRAPHS, eager=eager)) == {"pass"}
    # graph 1 reads graph 0's inputs: it returns graph 0's result of the same round
    crossed = [G[(0, f.variant[1])] for f in GRAPHS]
    judgement = judge(Evidence(two, run(*crossed), G, feeds=GRAPHS, eager=eager))
    assert judgement.verdict == "wrong-graph" and judgement.stale_from == "graph 0"
    assert "run 2 (graph 1) returned graph 0's result" in judgement.message


def test_replays_of_the_same_input_must_agree_and_graphs_record_first():
    outputs = [G[feed.variant] for feed in GRAPHS]
    wobble = {"y": np.nextafter(outputs[5]["y"], np.float32(np.inf))}  # the last bit
    ev = Evidence(
        case(True, graphs=2), run(*outputs[:5], wobble), G, feeds=GRAPHS,
        eager=twin(*outputs, feeds=GRAPHS),
    )  # fmt: skip
    judgement = judge(ev)
    assert judgement.verdicts == {"nondeterministic"}
    assert judgement.message == "run 6 of the same input gave another 'y' than run 4"


def test_a_graph_that_recorded_nothing_is_capture_not_engaged():
    outputs = [G[feed.variant] for feed in GRAPHS]
    ignored = run(*outputs, unrecorded_graphs=(1,))
    judgement = judge(
        Evidence(case(True, graphs=2), ignored, G, feeds=GRAPHS, eager=twin(*outputs, feeds=GRAPHS))
    )
    assert judgement.verdicts == {"capture-not-engaged"}
    assert "graph 1 recorded nothing" in judgement.message


# -- no reference, the dynamic twin ---------------------------------------------------------------


def test_without_a_reference_the_other_judges_remain_and_say_why():
    why = "onnxruntime CPU refused the case (Fail: FastGelu: bias must match)"
    eager = twin(REF, REF, REF)
    clean = judge(Evidence(case(False), eager.run, {}, no_reference=why))
    assert clean.verdicts == {"pass"} and clean.message == f"no reference: {why}"
    assert clean.max_abs is None
    off = {"y": REF["y"] + 0.01}
    capture = judge(Evidence(case(True), run(REF, off, off), {}, eager=eager, no_reference=why))
    assert capture.verdicts == {"capture-mismatch"}
    assert capture.message.endswith(f"; no reference: {why}")


def test_a_static_shape_kernel_bug_is_attributed_to_the_static_shape_path():
    bad = {"y": REF["y"] * 2}
    dynamic = twin(REF, REF, REF)
    judgement = judge(Evidence(case(False), run(bad, bad, bad), REFS, dynamic=dynamic))
    assert judgement.verdicts == {"reference-mismatch"}
    assert judgement.attribution == "static-shape path"
    capture = judge(
        Evidence(case(True), run(bad, bad, bad), REFS, eager=twin(bad, bad, bad), dynamic=dynamic)
    )
    assert capture.attribution == "static-shape path"
    # dynamic wrong too: a kernel bug whatever the shapes
    both = judge(Evidence(case(False), run(bad, bad, bad), REFS, dynamic=twin(bad, bad, bad)))
    assert both.attribution == "eager too"
    own = judge(Evidence(case(False, dynamic=True), run(bad, bad, bad), REFS))
    assert own.verdicts == {"reference-mismatch"} and "dynamic output differs" in own.message
