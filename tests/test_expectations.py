"""The one rule of expectations (``runner.suite.spec.written_for``): an expectation holds only
on the targets (backend, build and version) it was written for, for cases, scenarios and
decoder loops alike, so that ``--backend`` moves none of them elsewhere. No backend opened."""

from __future__ import annotations

import pytest

from runner.backends import REGISTRY
from runner.errors import InvalidInput
from runner.matrix import expand_suite
from runner.selection import Selection, load, plan_run, select, sequence_until
from runner.suite import load_suite
from runner.suite.spec import BackendTarget, CaseRule, Expectation, holding_rules, written_for

from .conftest import REPO

WEBGPU_124 = BackendTarget("ort-web", "webgpu", declared="1.24.3")  # as loaded: unresolved
WEBGPU_130 = BackendTarget("ort-web", "webgpu", version="1.30.0")  # the default (pinned)
HOME = (WEBGPU_124, BackendTarget("ort-web", "jspi", declared="1.24.3"))


@pytest.mark.parametrize(
    ("target", "keys", "holds"),
    [
        # a rule naming nothing: its suite's own targets only
        (BackendTarget("ort-web", "webgpu", version="1.24.3", declared="1.24.3"), (), True),
        (WEBGPU_130, (), False),  # its build, another version (--backend ort-web)
        (BackendTarget("ort-web", "jsep", version="1.24.3", declared="1.24.3"), (), False),
        (BackendTarget("wgpu"), ("capture", "model"), False),
        # naming a build: that build, at a version the suite declares
        (BackendTarget("ort-web", "jsep", version="1.24.3", declared="1.24.3"), ("bundle",), True),
        (BackendTarget("ort-web", "jsep", version="1.30.0"), ("bundle",), False),
        (BackendTarget("ort-web", "jsep", version="1.30.0"), ("bundle", "version"), True),
        # naming a version: the suite's builds, any version the glob takes
        (WEBGPU_130, ("version",), True),
        (BackendTarget("ort-web", "jsep", version="1.30.0"), ("version",), False),
        # naming a backend the suite does not declare: wherever it runs
        (BackendTarget("wgpu"), ("backend",), True),
        (BackendTarget("ort-native", version="1.32.0+ep0.4.0"), ("id",), True),
    ],
)
def test_an_expectation_holds_on_the_targets_it_was_written_for(target, keys, holds):
    assert written_for(target, keys, HOME) is holds


def test_a_version_only_a_registry_knows_is_compared_as_spelt():
    """`dev` stays unresolved at load; a run's target carries the spelling it came from."""
    home = (BackendTarget("ort-web", "webgpu", declared="dev"),)
    dev = BackendTarget("ort-web", "webgpu", version="1.31.0-dev.20260914-8d85527a0")
    assert written_for(dev.__class__(**{**dev.__dict__, "declared": "dev"}), (), home)
    assert not written_for(dev, (), home)  # the exact version, spelt otherwise: unknown
    assert not written_for(WEBGPU_130, (), home)


def test_the_last_holding_rule_wins_and_rules_elsewhere_are_skipped():
    stale = CaseRule({"capture": "capture"}, Expectation(frozenset({"stale-input"})))
    jsep = CaseRule({"bundle": "jsep"}, Expectation(frozenset({"capture-unsupported"})))
    fields = {"capture": "capture", "bundle": "webgpu", "backend": "ort-web:webgpu"}
    assert holding_rules([stale, jsep], fields, WEBGPU_124, HOME) == [stale]
    assert holding_rules([stale, jsep], fields, WEBGPU_130, HOME) == []  # moved by --backend
    on_jsep = {**fields, "bundle": "jsep", "backend": "ort-web:jsep"}
    jsep_130 = BackendTarget("ort-web", "jsep", version="1.30.0")
    assert holding_rules([stale, jsep], on_jsep, jsep_130, (WEBGPU_130,)) == [jsep]


SCENARIOS = """
name: graphs-1.24
models:
  enc: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}
shapes:
  - {batch: 1, sequence: 8}
backends:
  - {name: ort-web, bundle: [webgpu, jspi]}
exclude:
  - {model: enc}
scenarios:
  - name: old
    model: enc
    backends: [{name: ort-web, version: '1.24.3', bundle: webgpu}]
    sessions: {s: {}}
    steps: [{run: s, graph: 1}, {run: s}]
    expect: wrong-graph
    reason: written for 1.24.3
  - name: own
    model: enc
    sessions: {s: {}}
    steps: [{run: s, graph: 1}, {run: s}]
    expect: error
    reason: written for the suite's builds at the pinned version
cases:
  - match: {scenario: '*', bundle: jsep, version: '*'}
    expect: capture-unsupported
    reason: JSEP refuses a second graph on every version
  - match: {scenario: own, bundle: jspi}
    expect: [error, pass]
    reason: a build the suite declares, its version
"""


def test_a_scenario_moved_by_backend_keeps_only_what_was_written_for_its_target(write_suite):
    """A scenario written for 1.24.3 expects nothing of the pinned version `--backend ort-web`
    moves it to; the suite's rules naming `scenario` say what JSEP does, at any version."""
    path = write_suite(SCENARIOS)
    moved = plan_run(Selection((path,), backends=("ort-web",))).scenarios
    assert {item.id: item.scenario.expectation.expect for item in moved} == {
        "scenario=old/ort-web:jsep": {"capture-unsupported"},
        "scenario=old/ort-web:webgpu": {"pass"},  # written for 1.24.3, not the pinned version
        "scenario=old/ort-web:jspi": {"pass"},
        "scenario=own/ort-web:jsep": {"capture-unsupported"},
        "scenario=own/ort-web:webgpu": {"error"},
        "scenario=own/ort-web:jspi": {"error", "pass"},
    }
    reason = {item.id: item.scenario.expectation.reason for item in moved}
    assert reason["scenario=old/ort-web:jsep"] == "JSEP refuses a second graph on every version"


def test_a_case_rule_naming_a_build_keeps_to_the_versions_its_suite_declares(write_suite):
    """The decoder loops and every case: a rule for `jsep` in a suite written for 1.24.3 does
    not hold on the pinned version, unless it names the version too."""
    path = write_suite(
        """
        name: cases-1.24
        models:
          enc: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}
        shapes: [{batch: 1, sequence: 8}]
        capture: capture
        backends: [{name: ort-web, version: '1.24.3', bundle: webgpu}]
        cases:
          - match: {capture: capture}
            expect: capture-unsupported
          - match: {bundle: jsep}
            expect: error
          - match: {bundle: jsep, version: '1.30.*', capture: capture}
            expect: capture-mismatch
        """
    )
    moved = select(Selection((path,), backends=("ort-web",)))
    assert {c.backend.build_id: c.expect for c in moved} == {
        "ort-web:jsep": {"capture-mismatch"},
        "ort-web:webgpu": {"pass"},
        "ort-web:jspi": {"pass"},
    }


def test_the_versions_axis_bisect_and_repro_keep_what_the_suite_expects(write_suite):
    """`--ort-web-version`, a bisect probe and a repro rebuild a case on another version of a
    target the suite declares: its rules (what to expect, and the buffers they set) hold there,
    as they did before the rule counted versions; only `--backend` moves a suite off them."""
    path = write_suite(
        """
        name: fresh
        models:
          enc: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}
        shapes: [{batch: 1, sequence: 8}]
        backends: [{name: ort-web, bundle: webgpu}]
        cases:
          - match: {capture: capture}
            buffers: {inputs: fresh}
            expect: stale-input
        """
    )
    [axis] = load(Selection((path,), versions={"ort-web": ("1.27.0",)}))
    [eager, capture] = expand_suite(axis)
    assert capture.backend.declared == "1.27.0"
    assert (capture.expect, capture.buffers.inputs) == ({"stale-input"}, "fresh")
    [suite] = load(Selection((path,)))
    probe = BackendTarget("ort-web", "webgpu", version="1.27.0", declared="1.27.0")
    [eager, capture] = sequence_until(suite, capture, probe).cases
    assert (capture.expect, capture.buffers.inputs) == ({"stale-input"}, "fresh")
    assert eager.expect == {"pass"}


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("{match: {scenario: own, capture: capture}, expect: error}", "which have no 'capture'"),
        ("{match: {scenario: own}, inject: [stale-input], expect: error}", "'inject' is a case's"),
        ("{match: {scenario: nothing-here}, expect: error}", "matches none of the suite's"),
    ],
)
def test_a_scenario_rule_is_checked_at_its_line(write_suite, rule, message):
    text = SCENARIOS.replace("cases:\n", f"cases:\n  - {rule}\n").lstrip("\n")
    path = write_suite(text)
    with pytest.raises(InvalidInput) as caught:
        load_suite(path, REGISTRY)
    [problem] = caught.value.problems
    assert message in problem.message
    assert problem.line == text.splitlines().index("cases:") + 2


# What `python -m runner run suites --backend ort-web` met where, before the one rule, an
# expectation written for one build or version held on another, or none was written (16
# unexpected results, 2026-12-02, onnxruntime-web 1.30.0, SwiftShader): each now expects what
# the build did, and nothing written for 1.24.3 or 1.27.0 holds on the pinned version.
GENAI_TINY = (
    "batch_size=1,sequence_length=1,total_sequence_length=9,past_sequence_length=9,kv_cache_dim=16"
)
RETARGETED_ORT_WEB = {
    f"genai-tiny-llama-prompt-8/{GENAI_TINY}/layout=default/ort-web:jsep/eager": "error",
    f"genai-tiny-llama-prompt-4/{GENAI_TINY}/layout=default/ort-web:jsep/eager": "error",
    "scenario=graph1-first-then-graph0-1.24/ort-web:jsep": "error",
    "scenario=graph1-first-then-graph0-1.24/ort-web:webgpu": "pass",  # wrong-graph on 1.24.3
    "scenario=graph1-first-then-graph0-1.24/ort-web:jspi": "pass",
    "scenario=graph1-first-then-graph0-pinned/ort-web:jsep": "error",
    "scenario=graph1-first-then-other-session-then-graph0/ort-web:jsep": "error",
    "scenario=graph1-first-then-other-session-then-graph0/ort-web:webgpu": "pass",  # 1.27.0 fails
    "scenario=graph1-first-then-other-session-then-graph0/ort-web:jspi": "error",
    "scenario=graph1-first-then-other-session-then-graph0-jspi/ort-web:jsep": "error",
    "scenario=graph1-first-then-other-session-then-graph0-webgpu/ort-web:jsep": "error",
    "scenario=graph1-first-then-other-session-then-graph0-webgpu/ort-web:jspi": "error",
    "scenario=graph1-first-then-graph0/ort-web:jsep": "error",
    "scenario=jsep-disposes-an-output-after-release/ort-web:webgpu": "error",
    "scenario=jsep-disposes-an-output-after-release/ort-web:jspi": "error",
    "scenario=fresh-prealloc-replay-after-other-run/ort-web:jsep": "error",
}
# and what it met on 2026-12-05 in the suites added since (23 unexpected results): JSEP's
# refusals, the C++ builds' stale views and their Conv of 129 channels, JSEP's LSTM state
GENAI = (
    "batch_size=1,sequence_length=1,total_sequence_length=16,past_sequence_length=16,"
    "kv_cache_dim=16/layout=default/ort-web:jsep/capture"
)
RETARGETED_ORT_WEB |= {
    "bert-tiny-exported-1-23/batch=1,sequence=16/layout=default/ort-web:jsep/capture": (
        "capture-unsupported"
    ),
    f"genai-tiny/{GENAI}": "capture-unsupported",
    f"page-buffers/{GENAI}": "capture-unsupported",
    f"onnxruntime-buffers/{GENAI}": "capture-unsupported",
    **{
        f"{model}/layout=default/ort-web:{build}/capture": "stale-input"
        for model in ("cancelled-transposes", "cancelled-transposes-1x1")
        for build in ("webgpu", "jspi")
    },
    **{
        f"silero-vad-jsep-state/layout=default/ort-web:{build}/eager": "reference-mismatch"
        for build in ("webgpu", "jspi")
    },
    **{
        f"silero-vad-capture-1-31/layout=default/ort-web:{build}/{mode}": "reference-mismatch"
        for build in ("jsep", "webgpu", "jspi")
        for mode in ("eager", "capture")
    },
    **{
        f"{model}/layout=default/ort-web:{build}/capture": "stale-input"
        for model in ("squeeze-reducemean-unsqueeze", "reducemean-size1-unsqueeze")
        for build in ("jsep", "webgpu", "jspi")
    },
    "sigmoid-squeeze-reducemean-unsqueeze/layout=default/ort-web:jsep/capture": "stale-input",
}


def test_the_bundled_suites_retargeted_expect_what_each_build_does():
    selection = Selection((REPO / "suites",), backends=("ort-web",))
    plan = plan_run(selection, lambda _: None)
    expected = {case.id: case.expect for case in plan.cases}
    expected |= {s.id: s.scenario.expectation.expect for s in plan.scenarios}
    assert {case_id: expected[case_id] for case_id in RETARGETED_ORT_WEB} == {
        case_id: {verdict} for case_id, verdict in RETARGETED_ORT_WEB.items()
    }
