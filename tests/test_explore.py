"""explore: drawn scenarios are ones the loader accepts (and only the steps a backend runs);
the input-snapshot canary on wgpu is found, shrunk to two steps, written as a suite that
reproduces it with its repro bundle beside it, and replayed first from the example database;
it is shrunk as far where every scenario takes 10 s (as on ort-web); clean wgpu finds nothing;
a backend that skips scenarios stops explore at once (exit 3); bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import settings
from hypothesis.database import InMemoryExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions
from runner.cli import main
from runner.errors import ExitCode
from runner.explore import explorer, ledgers
from runner.explore.database import PassDatabase
from runner.explore.machine import machine_factory
from runner.explore.space import Space, SuiteModels, suite_model
from runner.scenario.values import (
    ACTIONS,
    CREATE,
    RELEASE,
    RELEASE_GRAPH,
    RUN,
    ScenarioRun,
    ScenarioStep,
)
from runner.suite.loader import load_suite
from runner.suite.scenarios import Scenario, ScenarioSession, scenario_entry
from runner.suite.spec import BackendTarget

from .conftest import REPO, regress

# what an explore finds within its budget: one such test at a time (tests/conftest.py)
pytestmark = pytest.mark.clock

SUITE = """name: explore-tiny
models:
  enc:
    builtin: encoder
    layers: 1
    hidden: 32
    heads: 4
    ffn: 64
shapes: [{batch: 1, sequence: 8}]
backends: [wgpu]
"""


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SUITE)
    return path


def _drawn(suite_file: Path, backend: str, examples: int) -> list:
    suite = load_suite(suite_file, REGISTRY)
    model = suite.models[0]
    actions = REGISTRY[backend].scenario_actions
    space = Space(
        SuiteModels((suite_model(suite, model, suite.shapes[0]),)), BackendTarget(backend), actions
    )
    drawn = []
    factory = machine_factory(space, lambda explored, scenario: drawn.append(scenario))
    run_state_machine_as_test(
        factory, settings=settings(max_examples=examples, database=None, stateful_step_count=8)
    )
    return drawn


@pytest.mark.parametrize("backend", ["wgpu", "ort-web"])
def test_every_drawn_scenario_is_one_the_loader_accepts(suite_file, tmp_path, backend):
    drawn = _drawn(suite_file, backend, 150)
    entries = [scenario_entry(s, f"drawn-{i}") for i, s in enumerate(drawn)]
    path = tmp_path / "drawn.yaml"
    path.write_text(SUITE + yaml.safe_dump({"scenarios": entries}, sort_keys=False))
    loaded = load_suite(path, REGISTRY).scenarios  # InvalidInput, at FILE:LINE, for any it refuses
    assert [[step.describe() for step in s.steps] for s in loaded] == [
        [step.describe() for step in s.steps] for s in drawn
    ]
    actions = {step.action for s in drawn for step in s.steps}
    expected = set(ACTIONS) - ({RELEASE_GRAPH} if backend == "ort-web" else set())
    assert actions == expected  # every step the backend runs is drawn, and only those
    assert all(any(step.action == RUN for step in s.steps) for s in drawn)


def _explore(
    suite_file: Path, out: Path, cache: Path, *extra: str, process: bool = True
) -> subprocess.CompletedProcess:
    """An explore on wgpu in a process of its own (seeded draws as a user's run gets them), or
    in this one where it stops before drawing."""
    return regress(
        "explore", suite_file, "--backend", "wgpu", "--out", out, *extra,
        env={"REGRESS_CACHE_DIR": str(cache)}, process=process,
    )  # fmt: skip


@pytest.mark.gpu
def test_the_input_snapshot_canary_is_found_shrunk_written_and_replayed_first(suite_file, tmp_path):
    out, cache = tmp_path / "found", tmp_path / "cache"
    inject = ("--inject", "input-snapshot-at-capture")
    explored = _explore(suite_file, out, cache, *inject, "--budget", "12s", "--seed", "1")
    assert explored.returncode == 1, explored.stderr
    (found,) = out.glob("*.yaml")
    (scenario,) = yaml.safe_load(found.read_text())["scenarios"]
    assert scenario["expect"] == "stale-input"
    assert scenario["steps"] == [{"run": "s1"}, {"run": "s1"}]  # record, then replay new inputs
    assert "wgpu (version" in scenario["reason"] and "llvmpipe" in scenario["reason"]
    assert "step 2 (run: s1): capture output 'y' differs" in scenario["reason"]
    assert "stale-input: 2 steps, first seen after" in explored.stdout
    bundle = out / found.stem  # its repro bundle, beside it
    bundled = json.loads((bundle / "repro.json").read_text())
    steps = [(s["action"], s["session"]) for s in bundled["scenario"]["steps"]]
    assert steps == [("run", "s1")] * 2
    assert bundled["suite"]["verdict"] == "stale-input" and (bundle / "repro.py").is_file()
    assert "explore: " in explored.stderr  # progress lines

    rerun = regress("run", found, *inject, "--out", tmp_path / "r", "-q")
    assert rerun.returncode == 0, rerun.stderr  # stale-input, as expected

    replayed = _explore(suite_file, tmp_path / "again", cache, *inject, "--budget", "3s")
    assert replayed.returncode == 1
    # Hypothesis keeps its own minimal (shortlex over its choices, not the fewest steps):
    # the replay may write a step more than the first run did
    steps, seen = replayed.stdout.removeprefix("stale-input: ").split(" steps, first seen after ")
    assert int(steps) <= 3
    assert seen.startswith("1 examples")


def _explore_at_ten_seconds_a_scenario(
    suite_file: Path, tmp_path: Path, monkeypatch, budget_s: float
) -> explorer.Explored:
    """The input-snapshot canary explored on wgpu with a clock that jumps 10 s at every scenario
    run (ort-web's pace), over the example database of `tmp_path`'s cache folder."""
    skew = [0.0]  # seconds added to the clocks: 10 per scenario run
    for name in ("perf_counter", "monotonic"):
        real = getattr(time, name)
        monkeypatch.setattr(time, name, lambda real=real: real() + skew[0])
    open_real = explorer.open_backend

    def open_slow(name, options):
        backend = open_real(name, options)
        run = backend.run

        def slow(work):
            skew[0] += 10.0
            return run(work)

        backend.run = slow
        return backend

    monkeypatch.setattr(explorer, "open_backend", open_slow)
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path / "cache"))
    suite = load_suite(suite_file, REGISTRY)
    explored_model = suite_model(suite, suite.models[0], suite.shapes[0])
    space = Space(
        SuiteModels((explored_model,)), BackendTarget("wgpu"), REGISTRY["wgpu"].scenario_actions
    )
    inject = frozenset({"input-snapshot-at-capture"})
    request = explorer.ExploreRequest(
        space, budget_s, tmp_path / "found", BackendOptions(inject=inject), seed=1
    )
    explored = explorer.explore(request, lambda text: None)
    assert explored.seconds >= 10 * explored.examples  # every scenario took 10 s on the clock
    return explored


def _written_runs(finding) -> list[str]:
    (scenario,) = yaml.safe_load(finding.path.read_text())["scenarios"]
    return [step["run"] for step in scenario["steps"]]


@pytest.mark.gpu
@pytest.mark.slow
def test_a_failure_is_shrunk_where_every_scenario_takes_ten_seconds(
    suite_file, tmp_path, monkeypatch
):
    """Hypothesis stops shrinking after 5 minutes on its clock (30 examples at ort-web's pace)
    and writes what it has, unshrunk: with a clock that jumps 10 s at every scenario on wgpu,
    the canary must still be written at its 2 steps."""
    explored = _explore_at_ten_seconds_a_scenario(suite_file, tmp_path, monkeypatch, 7200.0)
    (finding,) = explored.findings
    assert finding.failure.result.verdict == "stale-input" and not finding.shrinking_cut
    assert _written_runs(finding) == ["s1", "s1"]  # record, replay


@pytest.mark.gpu
@pytest.mark.slow
def test_a_finding_the_budget_cut_short_is_said_so_and_shrinks_further_on_a_rerun(
    suite_file, tmp_path, monkeypatch
):
    """No grace: the budget ends the pass soon after the canary is first seen, and the finding
    is written as far as it shrank, marked so; explore over the same cache folder replays it
    first and goes on from there."""
    for constant in ("SHRINK_GRACE", "GRACE_MIN_S", "SHRINK_EXAMPLES"):
        monkeypatch.setattr(ledgers, constant, 0)
    # Seed 1 first sees the canary at the 22nd scenario (220 s on this clock); Hypothesis goes on
    # drawing (it looks for more bugs, up to twice as many examples) and has begun shrinking, its
    # failure saved to the database, when 400 s end the pass.
    first = _explore_at_ten_seconds_a_scenario(suite_file, tmp_path, monkeypatch, 400.0)
    (cut,) = first.findings
    assert cut.failure.result.verdict == "stale-input" and cut.shrinking_cut
    monkeypatch.undo()
    again = _explore_at_ten_seconds_a_scenario(suite_file, tmp_path, monkeypatch, 7200.0)
    (shrunk,) = again.findings
    assert shrunk.examples_before < cut.examples_before and not shrunk.shrinking_cut  # replayed
    # Hypothesis's minimal is its own (shortlex over its choices, not the fewest steps), so
    # where the rerun ends depends on where the cut left it: never longer
    assert len(_written_runs(shrunk)) <= len(_written_runs(cut))


@pytest.mark.gpu
def test_clean_wgpu_finds_nothing_in_a_short_budget(suite_file, tmp_path):
    out = tmp_path / "found"
    explored = _explore(suite_file, out, tmp_path / "cache", "--budget", "15s", "--seed", "3")
    assert explored.returncode == 0, explored.stderr
    assert "nothing found" in explored.stdout
    examples = int(explored.stderr.split("explored ")[1].split()[0])
    assert examples > 20
    (record,) = out.iterdir()  # the explore's record alone, which says it found nothing
    assert record.name.startswith("explore-") and json.loads(record.read_text())["findings"] == []


@pytest.mark.parametrize(
    ("cut_message", "steps"),
    [("RuntimeError: unreachable", 1), ("RuntimeError: memory access out of bounds", 3)],
)
def test_a_finding_is_cut_after_its_failing_step_only_when_the_cut_fails_alike(
    suite_file, tmp_path, cut_message, steps
):
    """A failure at a scenario's first step, with two steps after it: the cut scenario is run
    once, and kept only if it fails as the whole one did (the same error text)."""
    ran = []

    class FirstRunFails:
        def run(self, plan):
            ran.append(len(plan.scenario.steps))
            whole = len(plan.scenario.steps) == 3
            return ScenarioRun("error", "RuntimeError: unreachable" if whole else cut_message)

    suite = load_suite(suite_file, REGISTRY)
    explored_model = suite_model(suite, suite.models[0], suite.shapes[0])
    target = BackendTarget("wgpu")
    space = Space(SuiteModels((explored_model,)), target, REGISTRY["wgpu"].scenario_actions)
    request = explorer.ExploreRequest(space, 60.0, tmp_path, BackendOptions())
    examine = explorer._Examiner(request, FirstRunFails(), lambda text: None)
    scenario = Scenario(
        "explored-3-steps",
        explored_model.model,
        explored_model.shape,
        (ScenarioSession("s1"),),
        (ScenarioStep(RUN, "s1"), ScenarioStep(RELEASE, "s1"), ScenarioStep(CREATE, "s1")),
        (target,),
    )
    failure = examine.outcome(explored_model, scenario)
    assert failure.failing_step == 0
    cut = examine.cut(failure)
    assert [step.action for step in cut.scenario.steps] == [RUN, RELEASE, CREATE][:steps]
    assert cut.scenario.name == f"explored-{steps}-steps"
    assert examine.cut(failure) == cut and ran == [3, 1]  # each scenario runs once


def test_an_example_explore_interrupts_is_not_saved_for_the_next_explore():
    """Hypothesis saves every example that raised a BaseException, to replay it first next
    time. The one the budget interrupted did not fail; saved, it sorted before a real finding
    and took all of a 3-s rerun's budget. Without the pass database Hypothesis saves it."""

    class Interrupted(RuleBasedStateMachine):
        examples = 0

        @rule()
        def step(self):
            pass

        def teardown(self):
            Interrupted.examples += 1
            if Interrupted.examples == 5:
                raise explorer.BudgetSpent

    for wrap, saved in ((lambda database: database, True), (PassDatabase, False)):
        Interrupted.examples = 0
        database = InMemoryExampleDatabase()
        assert explorer._run_pass(
            lambda chosen: run_state_machine_as_test(Interrupted, settings=chosen),
            wrap(database),
            stop_at_first=False,
        )  # the budget ended the pass
        assert Interrupted.examples == 5
        assert any(database.data.values()) is saved


def test_each_first_op_keeps_its_examples_apart_and_a_later_pass_deletes_none_it_fetched():
    """A choice sequence means a model only under the same first op: each pass's op has keys
    of its own. A later pass treats known failures as passing; what it fetched stays."""
    inner = InMemoryExampleDatabase()
    PassDatabase(inner, first="Relu").save(b"k", b"relu's")
    PassDatabase(inner, first="Tanh").save(b"k", b"tanh's")
    assert list(PassDatabase(inner, first="Relu").fetch(b"k")) == [b"relu's"]
    assert list(PassDatabase(inner).fetch(b"k")) == []
    later = PassDatabase(inner, keep_fetched=True, first="Tanh")
    assert list(later.fetch(b"k")) == [b"tanh's"]
    later.delete(b"k", b"tanh's")
    first = PassDatabase(inner, first="Tanh")
    assert list(first.fetch(b"k")) == [b"tanh's"]
    first.delete(b"k", b"tanh's")  # the first pass of an explore may: it no longer fails
    assert list(first.fetch(b"k")) == []


def test_a_backend_that_skips_scenarios_stops_explore_at_once(
    suite_file, tmp_path, monkeypatch, capsys
):
    """As ort-native does without its GPU device: the first skip ends explore (exit 3, the
    reason said) rather than the budget spent on scenarios that all skip."""
    planned = []

    class SkippingBackend:
        def run(self, plan):
            planned.append(plan)
            return ScenarioRun("skipped", "no WebGPU EP device on this machine")

        def close(self):
            pass

    monkeypatch.setattr(explorer, "open_backend", lambda name, options: SkippingBackend())
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "found"
    code = main(
        ["explore", str(suite_file), "--backend", "wgpu", "--budget", "1h"] + ["--out", str(out)]
    )
    assert code == ExitCode.ENVIRONMENT == 3
    assert len(planned) == 1
    assert not [path for path in (tmp_path / "cache").rglob("*") if path.is_file()]  # not saved
    assert (
        "environment unusable: wgpu skips scenarios on this machine, so explore has nothing to "
        "draw: no WebGPU EP device on this machine"
    ) in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--budget", "soon"], "'soon' is not a time"),
        (["--backend", "ort-web"], "explore runs on one backend target; --backend names 3"),
        (["--filter", "capture=eager"], "expected model=GLOB or suite=GLOB"),
        (["--filter", "model=nothing*"], "no model to explore"),
        (["--inject", "no-such-fault"], "--inject no-such-fault: no such fault on wgpu"),
        (["--backend", "reference"], "reference runs no scenarios"),
    ],
)
def test_bad_input_exits_2_saying_why(suite_file, tmp_path, extra, message):
    explored = regress(
        "explore", suite_file, "--out", tmp_path,
        *(["--backend", "wgpu"] if "--backend" not in extra else []), *extra,
        env={"REGRESS_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert explored.returncode == 2
    assert message in explored.stderr
    assert "Traceback" not in explored.stderr


def test_a_suite_of_decoders_only_is_refused_saying_explore_draws_none(tmp_path):
    explored = _explore(
        REPO / "suites" / "decoder.yaml", tmp_path, tmp_path / "cache", process=False
    )
    assert explored.returncode == 2
    assert (
        "no model to explore: the suites have no encoder or model file (explore draws no decoder "
        "loop and no op test)"
    ) in explored.stderr
    assert "Traceback" not in explored.stderr


def test_each_pass_starts_its_models_with_the_op_least_run_so_far(tmp_path, monkeypatch):
    """Passes take the vocabulary's entries in turn, the one the models run so far hold the
    fewest nodes of first (the first of equals), leaving out what the target lacks and what
    no model could start with; a pass that finds nothing ends after ``PASS_MODELS``."""
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path))
    lacking = ledgers.Lacking(BackendTarget("wgpu"), lambda _: None)
    firsts = ledgers.FirstOps(("Relu", "Tanh", "Conv"))
    assert firsts.next(0, lacking) == "Relu"
    firsts.ran(["Relu", "Tanh", "Tanh"])
    assert firsts.next(5, lacking) == "Conv"
    assert not firsts.spent(4 + ledgers.PASS_MODELS) and firsts.spent(5 + ledgers.PASS_MODELS)
    lacking.learn("Conv", "no WGSL kernel")
    assert firsts.next(20, lacking) == "Relu"
    firsts.barren.add("Relu")
    assert firsts.next(20, lacking) == "Tanh"
    firsts.barren.add("Tanh")
    assert firsts.next(20, lacking) is None
    assert ledgers.FirstOps(()).next(0, lacking) is None  # scenarios draw no ops


def test_a_pass_ends_once_its_kinds_have_had_their_share(monkeypatch):
    """From a pass's first failure, each kind it found earns 20 models and 2% of the budget's
    time; the pass ends once both are spent (the models on a slow target, the time on a fast
    one), and a pass that found nothing never ends so."""
    clock = [0.0]
    monkeypatch.setattr(ledgers.time, "monotonic", lambda: clock[0])
    budget = ledgers.Budget(600.0)  # 12 s a kind
    kinds = ledgers.Kinds(lambda _: None)
    assert not kinds.shrinking_spent(1000, budget)
    kinds.first_seen[("a",)], kinds.first_seen[("b",)] = (10, 5.0), (15, 6.0)
    kinds.pending += [("a",), ("b",)]
    clock[0] = 100.0
    assert not kinds.shrinking_spent(49, budget)  # 39 models of the 40 two kinds earn
    assert kinds.shrinking_spent(50, budget)
    clock[0] = 28.0  # fast: 40 models, but 23 of the 24 seconds
    assert not kinds.shrinking_spent(50, budget)
    clock[0] = 29.0
    assert kinds.shrinking_spent(50, budget)
