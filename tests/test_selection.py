"""Selection: one request (``Selection``) to the cases `list`, `run`, `bisect` and the benchmarks
run; retargeting, filters, shards and --lf on a suite written here, no backend opened."""

from __future__ import annotations

import json

from runner import selection as selection_module
from runner.backends.base import BackendTarget
from runner.cli import _fetched_case
from runner.explore.space import explore_space
from runner.history import RunRecord, SqliteHistory
from runner.selection import (
    Selection,
    find_case,
    load,
    plan_run,
    select,
    sequence_until,
)

from .conftest import case_result, regress

SUITE = """
name: pick
models:
  enc: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}
shapes:
  - {batch: 1, sequence: 8}
layouts:
  - [eps, heads]
  - label: big-eps
    values: {eps: 0.01}
backends: [reference]
"""
ENC = "enc/batch=1,sequence=8/layout={}/{}/{}"


def test_retargeted_filtered_and_sharded_cases(write_suite):
    suite = write_suite(SUITE)
    retargeted = select(Selection((suite,), backends=("wgpu",), filters=("capture=capture",)))
    assert [c.id for c in retargeted] == [
        ENC.format("eps,heads", "wgpu", "capture"),
        ENC.format("big-eps", "wgpu", "capture"),
        ENC.format("eps,heads", "wgpu", "capture-revisit"),
    ]
    both = Selection((suite,), backends=("wgpu", "reference"))
    shards = [select(Selection((suite,), backends=both.backends, shard=f"{i}/2")) for i in (1, 2)]
    # whole layout-change sequences per shard: one backend each
    assert [{c.backend.id for c in shard} for shard in shards] == [{"reference"}, {"wgpu"}]
    assert sorted(c.id for shard in shards for c in shard) == sorted(c.id for c in select(both))


def test_a_run_records_the_request_as_the_command_line_gave_it(write_suite):
    suite = write_suite(SUITE)
    request = Selection((suite,), tags=("heavy",), versions={"ort-web": ("1.30.0",)}, shard="1/2")
    assert request.recorded() == {
        "filters": [],
        "shard": "1/2",
        "backends": [],
        "versions": {"ort-web": ["1.30.0"], "ort-native": []},
        "tags": ["heavy"],
    }
    assert Selection((suite,), last_failed=suite).recorded()["last_failed"] is True


def test_last_failed_keeps_the_failed_case_after_its_sequence(write_suite, tmp_path):
    suite = write_suite(SUITE)
    history = tmp_path / "history.sqlite"
    said: list[str] = []
    assert select(Selection((suite,), last_failed=history), said.append) == []
    assert said == [f"--last-failed: no unexpected results recorded in {history}"]
    failed = ENC.format("big-eps", "reference", "eager")
    with SqliteHistory(history) as store:
        store.begin_run(RunRecord("R1", "2026-11-30T10:00:00+00:00"))
        store.record(case_result(run_id="R1", case_id=failed, outcome="unexpected"))
    kept = select(Selection((suite,), last_failed=history), said.append)
    assert [c.id for c in kept] == [
        ENC.format("eps,heads", "reference", "eager"),
        ENC.format("eps,heads", "reference", "capture"),
        failed,
    ]
    assert said[-1] == (
        "--last-failed: 1 of 1 failed case(s) selected; "
        "3 case(s) to run with those before them in their sequences"
    )


def test_a_bisect_probe_runs_the_case_after_its_sequence_on_one_target(write_suite):
    suites = load(Selection((write_suite(SUITE),)))
    suite, case = find_case(suites, ENC.format("big-eps", "reference", "capture"))
    probe = sequence_until(suite, case, BackendTarget("wgpu"))
    assert [c.id for c in probe.cases] == [
        ENC.format(layout, "wgpu", mode)
        for layout in ("eps,heads", "big-eps")
        for mode in ("eager", "capture")
    ]


SCENARIO_SUITE = """
name: held
models:
  enc: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}
shapes:
  - {batch: 1, sequence: 8}
backends: [reference]
scenarios:
  - name: twice
    model: enc
    sessions: {s: {}}
    steps:
      - run: s
      - run: s
    expect: error
    reason: what this suite's own backend does
"""


def test_a_scenario_moved_by_backend_expects_a_pass(write_suite):
    """As a `cases:` rule naming no backend, a scenario's `expect:` holds on its own backends."""
    path = write_suite(SCENARIO_SUITE)
    [own] = plan_run(Selection((path,))).scenarios
    [moved] = plan_run(Selection((path,), backends=("wgpu",))).scenarios
    assert own.target.name == "reference" and own.scenario.expectation.expect == {"error"}
    assert moved.target.name == "wgpu" and moved.scenario.expectation.expect == {"pass"}


def test_a_run_reads_its_suites_once_for_its_cases_and_scenarios(
    write_suite, monkeypatch, tmp_path
):
    """`run` plans once: the cases and the scenarios come from one reading of the suites, and
    a second only where preparing the cases changed what reading finds (a package fetched)."""
    path = write_suite(SCENARIO_SUITE)
    read: list[tuple] = []
    loader = selection_module.load_suites
    monkeypatch.setattr(
        selection_module, "load_suites", lambda *args: read.append(args) or loader(*args)
    )
    done = regress("run", path, "--out", tmp_path / "out", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [json.loads(line)["case_id"] for line in next(tmp_path.rglob("results.jsonl")).open()]
    assert "scenario=twice/reference" in ran and len(ran) > 1 and len(read) == 1
    plan = plan_run(Selection((path,)), prepare=lambda cases: bool(cases))
    assert len(read) == 3 and plan.cases and [s.scenario.name for s in plan.scenarios] == ["twice"]


def test_bisect_and_explore_read_their_suites_once(write_suite, monkeypatch):
    """`bisect` finds its case, and `explore` its target and models, from one reading of the
    suites (a second only where a package was fetched, as `run`)."""
    path = write_suite(SCENARIO_SUITE)
    read: list[tuple] = []
    loader = selection_module.load_suites
    monkeypatch.setattr(
        selection_module, "load_suites", lambda *args: read.append(args) or loader(*args)
    )
    case_id = "enc/batch=1,sequence=8/layout=default/reference/eager"
    suite, case = _fetched_case(Selection((path,)), case_id)
    assert (suite.name, case.id, len(read)) == ("held", case_id, 1)
    space = explore_space(Selection((path,), backends=("wgpu",)), frozenset())
    assert (space.target.name, len(read)) == ("wgpu", 2)
