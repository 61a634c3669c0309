"""``explore``: drawn examples on one backend target, for a time budget, minimal ones written.

An example is a scenario over one of the source's models (``machine``'s state machine), or a
model the source draws itself, judged as its suite's cases are (``cases``; ``generated``). The
backend is opened once (one browser for ort-web), every example on a device of its own (on
ort-web an onnxruntime-web instance), and every example runs through the step (``runner.step``)
and the judge. Hypothesis runs in passes: a pass ends when Hypothesis has shrunk what it found,
or its share is spent, and the next one treats those kinds of failure as known (a drawn model's
kind is its root cause: ``ModelFailure.kind``), so nothing is found twice in one explore; drawn
models start with an op of each pass's own, the vocabulary's least run so far (``FirstOps``).
Its example database lives in the cache folder, per target and faults, so a rerun replays known
failures first.
Hypothesis has no time limit of its own: the budget is checked before each example, which raises
``BudgetSpent`` (not an ``Exception``, so Hypothesis lets it through) once it is spent; a failure
seen before then may overrun it to shrink (``Budget.grace``), and is written as the smallest
failing example seen when even that runs out.

Where a scenario costs seconds (ort-web: an onnxruntime-web instance each), shrinking is most of
the work, so a pass runs each distinct scenario once (Hypothesis replays examples while it
shrinks), leaves out Hypothesis's explain phase (more replays, for a note explore does not
print) and lifts Hypothesis's own shrink time cap (``_uncapped_shrinking``); a finding is then
cut after its failing step where the cut scenario fails alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from hypothesis import HealthCheck, Phase, Verbosity, given, reject, seed, settings
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Unsatisfiable
from hypothesis.internal.conjecture import engine as hypothesis_engine
from hypothesis.stateful import run_state_machine_as_test

from runner.backends import REGISTRY, open_backend
from runner.backends.base import Backend, BackendOptions, BackendTarget
from runner.errors import EnvironmentUnusable
from runner.explore import record
from runner.explore.cases import (
    CasesRun,
    ModelFailure,
    reproduce,
    run_cases,
    write_model_finding,
)
from runner.explore.database import (
    Interruption,
    PassDatabase,
    database_folder,
    example_database,
)
from runner.explore.finding import (
    BackendMachine,
    Failure,
    FailureKind,
    Found,
    finding_header,
    found_by,
    signature,
    write_finding,
)
from runner.explore.generated import (
    Coverage,
    GeneratedModel,
    OpCovered,
    without_bystanders,
    without_output,
)
from runner.explore.ledgers import (
    Budget,
    BudgetSpent,
    FirstOps,
    FirstOpSpent,
    Kinds,
    Lacking,
    ShrinkingSpent,
)
from runner.explore.machine import cut_after, machine_factory
from runner.explore.space import ExploredModel, Space
from runner.files import cache_root
from runner.matrix import ScenarioTarget
from runner.oracle import ReferenceCache
from runner.step import Step
from runner.suite.scenarios import Scenario

MAX_STEPS = 8  # steps per drawn scenario; the known triggers take two to four
NOT_ALONE = "it fails only after other examples on one device (a program one of them compiled)"


class ExamplesSkipped(Interruption):
    """Raised when the backend skips an example: it draws only the steps the backend runs, so a
    skip says the machine cannot run them there (ort-native without its GPU device), and every
    later one would be skipped too."""


@dataclass(frozen=True)
class ExploreRequest:
    space: Space
    budget_s: float
    out: Path
    options: BackendOptions
    seed: int | None = None
    databases: Path | None = None  # where example databases go; None: the cache folder's
    replay_from: tuple[Path, ...] = ()  # folders of databases replayed, never written
    max_findings: int | None = None  # stop once this many are written; None: spend the budget


@dataclass(frozen=True)
class Explored:
    findings: tuple[Found, ...]
    examples: int
    steps: int
    seconds: float
    database: Path
    record: Path  # what explore-report merges
    covered: tuple[OpCovered, ...]  # the ops of the drawn models judged (none for scenarios)
    refusals: tuple[record.RefusalRecord, ...]  # what the target would not do: no bugs
    dimensions: Mapping[str, int]  # drawn models judged per bucket of each dimension


def _needs(generated: GeneratedModel) -> set[str]:
    """What a drawn model needs of a target, as what it lacks is learned: its ops, and in
    float16 that type and each op in it."""
    if generated.dtype == "float32":
        return set(generated.ops)
    dtype = generated.dtype
    return {*generated.ops, dtype, *(f"{op} in {dtype}" for op in generated.ops)}


class FailedScenario(Exception):
    """A drawn scenario that did not pass; one subclass per failure kind (``_failure_type``),
    since Hypothesis tells bugs apart, and shrinks each, by the exception's type."""


class _Examiner:
    """Runs and judges each example Hypothesis draws, and keeps what failed (mutable: the
    state machine calls back into it across passes)."""

    def __init__(self, request: ExploreRequest, backend: Backend, say: Callable[[str], None]):
        self.request, self.backend, self.say = request, backend, say
        self.oracle = ReferenceCache(None).references  # in memory, shared by the examples
        self.step = Step(self.oracle, request.options)
        self.budget = Budget(request.budget_s)
        self.examples = self.steps = 0  # distinct examples run, and their steps (or cases)
        # each example runs once: by _scenario_key, or a drawn model's digest (a string: why
        # it was discarded)
        self.outcomes: dict[Any, Failure | ModelFailure | str | None] = {}
        self.lacking = Lacking(request.space.target, say)
        self.kinds = Kinds(say)
        self.firsts = FirstOps(request.space.source.firsts)
        self.covered = Coverage()  # of the drawn models judged
        # where programs outlive an example, a failure counts only if it fails on a new device
        self.confirms = REGISTRY[request.space.target.name].programs_per_process
        self.not_alone = 0  # failures gone on a new device: a program an earlier one compiled

    def __call__(self, explored: ExploredModel, scenario: Scenario) -> None:
        """A drawn scenario: run once, judged; raises when it fails."""
        now = self._on_time()
        fresh = _scenario_key(explored, scenario) not in self.outcomes
        self._judged(self.outcome(explored, scenario), fresh, now)

    def cases(self, explored: ExploredModel) -> None:
        """A drawn model's cases: run once, judged; raises when one fails, rejects the example
        when it is discarded (learning an op the target lacks)."""
        now = self._on_time()
        fresh = explored.digest not in self.outcomes
        if fresh:
            generated = explored.generated
            if self.lacking.any_of(_needs(generated)):
                reject()  # not run; an example run before keeps its outcome
            # the share keeps the budget for drawing on: none follows a first finding
            if self.request.max_findings != 1 and self.kinds.shrinking_spent(
                self.examples, self.budget
            ):
                raise ShrinkingSpent
            if not self.kinds.pending and self.firsts.spent(self.examples):
                raise FirstOpSpent
            ran = run_cases(explored, self.backend, self.oracle, self.request.options)
            self.firsts.ran(generated.entries)
            if ran.failing and self._alone_passes(lambda: run_cases(
                explored, self.backend, self.oracle, self.request.options
            ).failing):  # fmt: skip
                ran = CasesRun(discarded=NOT_ALONE)
            self.examples += 1
            self.steps += len(ran.stepped)
            skipped = [s for s in ran.stepped if s.judgement.verdict == "skipped"]
            if skipped and generated.dtype == "float32":
                raise ExamplesSkipped(skipped[0].judgement.message)
            if skipped:  # a float16 model where float32 ones run (no shader-f16)
                self.outcomes[explored.digest] = skipped[0].judgement.message
                self.lacking.learn(generated.dtype, skipped[0].judgement.message)
            elif ran.discarded:
                self.outcomes[explored.digest] = ran.discarded
                if ran.lacking:
                    op, why = ran.lacking
                    lacked = op if generated.dtype == "float32" else f"{op} in {generated.dtype}"
                    self.lacking.learn(lacked, why)
            else:
                self.covered.add(explored.generated)
                failing = ran.failing
                failure = (
                    ModelFailure(explored, failing, ran.stepped, ran.divergent) if failing else None
                )
                self.outcomes[explored.digest] = failure
        outcome = self.outcomes[explored.digest]
        if isinstance(outcome, str):
            reject()
        self._judged(outcome, fresh, now)

    def _on_time(self) -> float:
        """Now, after the budget's check and the progress line that is due."""
        now = self.budget.check(self.examples, shrinking=bool(self.kinds.pending))
        if self.budget.progress_due():
            self.say(self.progress())
        return now

    def _judged(self, failure: Failure | ModelFailure | None, fresh: bool, now: float) -> None:
        kind = None if failure is None else failure.kind
        if kind is None or kind in self.kinds.known:
            return
        # an example run in an earlier pass may fail as a kind new in this one (apart from a
        # finding written since): tallied when first seen, so that it is shrunk and written
        if fresh or kind not in self.kinds.first_seen:
            self.kinds.keep(failure, kind, self.examples, now - self.budget.began)
        raise _failure_type(kind)(failure.result.message)

    def outcome(self, explored: ExploredModel, scenario: Scenario) -> Failure | None:
        """`scenario`'s failure, or None when it passed: run the first time it is asked for,
        remembered after that (a scenario's verdict is its own, each on a fresh
        onnxruntime-web instance on ort-web), so that Hypothesis's replays cost nothing."""
        key = _scenario_key(explored, scenario)
        if key not in self.outcomes:
            item = ScenarioTarget(explored.suite, scenario, self.request.space.target)
            stepped = self.step.run(item, self.backend)
            self.examples += 1
            self.steps += len(scenario.steps)
            if stepped.judgement.verdict == "skipped":
                raise ExamplesSkipped(stepped.judgement.message)
            failing = stepped.failing_step is not None and not self._alone_passes(
                lambda: self.step.run(item, self.backend).failing_step
            )
            self.outcomes[key] = Failure(explored, scenario, stepped) if failing else None
        return self.outcomes[key]

    def _alone_passes(self, again: Callable[[], Any]) -> bool:
        """Whether a failure just seen passes when `again` reruns it on a renewed backend, where
        programs outlive an example (``programs_per_process``): then a program an earlier
        example compiled made it fail, and it would not fail on its own under ``run``. The
        backend stays renewed: what the failure compiled serves no later example either."""
        if not self.confirms:
            return False
        self.backend.renew()
        if again():
            return False
        self.not_alone += 1
        if self.not_alone == 1:
            self.say(f"a failure passed on a new device: {NOT_ALONE}; not counted")
        return True

    def cut(self, failure: Failure | ModelFailure) -> Failure | ModelFailure:
        """A scenario's `failure` without the steps after its failing one, when that scenario,
        run, fails alike: Hypothesis may keep steps past the failure that cost nothing to keep
        (a trailing ``release``), which a reader of the written file would wonder about. A
        drawn model's without its bystanders (``_without_bystanders``)."""
        if isinstance(failure, ModelFailure):
            return self._without_bystanders(failure)
        if failure.failing_step == failure.size - 1:
            return failure
        scenario = cut_after(failure.scenario, failure.failing_step)
        cut = self.outcome(failure.explored, scenario)
        return cut if cut is not None and cut.kind == failure.kind else failure

    def _without_bystanders(self, failure: ModelFailure) -> ModelFailure:
        """`failure` without the nodes its culprit neither reads nor feeds, when that model
        fails with the same cause; else without each graph output in turn (and the nodes only
        it needs) that can go and leave it failing so: Hypothesis's shrinking may stop short of
        them, and a bystander may be needed (a twin that compiled a program first) while its
        twin is not."""
        culprit = (failure.divergent or {}).get("name")
        if not culprit:
            return failure
        smaller = self._failing_alike(failure, without_bystanders(failure.generated, culprit))
        if smaller is not None:
            return smaller
        for output in onnx.load_from_string(failure.generated.model).graph.output:
            pruned = without_output(failure.generated, output.name)
            failure = self._failing_alike(failure, pruned) or failure
        return failure

    def _failing_alike(
        self, failure: ModelFailure, pruned: GeneratedModel | None
    ) -> ModelFailure | None:
        """`pruned`'s failure where it fails with `failure`'s cause; else None."""
        if pruned is None:
            return None
        explored = self.request.space.source.explored(pruned)
        ran = run_cases(explored, self.backend, self.oracle, self.request.options)
        if ran.failing is None:
            return None
        smaller = ModelFailure(explored, ran.failing, ran.stepped, ran.divergent)
        return smaller if smaller.kind == failure.kind else None

    def progress(self) -> str:
        return (
            f"explore: {self.examples} examples, {self.steps} "
            f"{self.request.space.counted[1]} in "
            f"{self.budget.elapsed():.0f} s; {len(self.kinds.shortest)} failure kind(s) so far"
            + (f"; {self.not_alone} gone on a new device" if self.not_alone else "")
        )


def explore(request: ExploreRequest, say: Callable[[str], None]) -> Explored:
    space, options = request.space, request.options
    target = space.target
    root = request.databases or cache_root() / "explore"
    folder = database_folder(space, options.inject, root)
    # checked before anything runs: a folder refused leaves nothing written
    examples_database = example_database(root, folder.name, request.replay_from)
    REGISTRY[target.name].prepared([target], say)
    began, started = time.monotonic(), record.now()
    # every example on a device (on ort-web an instance) of its own: its verdict is its own, as
    # Hypothesis needs
    backend = open_backend(target.name, dataclasses.replace(options, fresh_sequences=True))
    try:
        say(f"opened {target.id} in {time.monotonic() - began:.1f} s; exploring")
        examine = _Examiner(request, backend, say)
        machine: BackendMachine | None = None  # asked once a finding needs it: by then the
        # target's own page is loaded (ort-web would load its default build's to answer)
        findings: list[Found] = []
        refusals: list[record.RefusalRecord] = []
        written: set[tuple] = set()
        stop_at_first = request.max_findings == 1  # a pass stops drawing at its first failure
        kinds = examine.kinds
        for pass_number in itertools.count(1):
            kinds.pending.clear()
            pass_seed = None if request.seed is None else request.seed + pass_number - 1
            first = examine.firsts.next(examine.examples, examine.lacking)
            # Later passes must not delete known failures from the database: there they are
            # known, not fixed, and the next explore should replay them first.
            database = PassDatabase(examples_database, pass_number > 1, first or "")
            try:
                drawing = _examples(space, examine, pass_seed, first)
                ended = _run_pass(drawing, database, stop_at_first)
            except ExamplesSkipped as skipped:
                raise EnvironmentUnusable(
                    f"{target.id} skips {space.source.draws} on this machine, so explore has "
                    f"nothing to draw: {skipped}"
                ) from None
            except Unsatisfiable:  # every model the pass drew was rejected
                if first is None:
                    raise EnvironmentUnusable(
                        f"no model could be drawn from {', '.join(space.source.firsts)}: the "
                        f"ops, float types and sizes asked for leave none that {target.id} runs"
                    ) from None
                examine.firsts.barren.add(first)
                continue
            if stop_at_first:  # what the shrinker slipped to may be smaller
                kinds.pending.sort(key=lambda kind: kinds.shortest[kind].size)
            for kind in kinds.pending:
                failure = examine.cut(kinds.shortest[kind])
                kinds.known.add(kind)  # it passes in later passes
                if failure.signature in written:  # another kind shrank to the same example
                    continue
                written.add(failure.signature)
                if isinstance(failure, ModelFailure) and failure.refused:
                    refusal = record.RefusalRecord(
                        failure.result.verdict, failure.result.message, failure.nodes
                    )
                    refusals.append(refusal)
                    say(f"{target.id} refuses {', '.join(refusal.nodes)}: not a bug, listed")
                    continue
                machine = machine or _machine(backend, target, failure.result.adapter)
                path = _write(failure, request, machine, say)
                examples, seconds = kinds.first_seen[kind]
                found = Found(failure, path, examples, seconds, ended is not None)
                findings.append(found)
                say(f"found {failure.result.verdict} in {found.size}: {path}")
                if len(findings) == request.max_findings:
                    break
            if len(findings) == request.max_findings:
                say(f"stopping: {len(findings)} finding(s) written (--max-findings)")
                break
            if isinstance(ended, BudgetSpent) or ended is None and not kinds.pending:
                break  # spent, or Hypothesis ran out of examples
        say(examine.progress())
        machine = machine or _machine(backend, target, None)
    finally:
        backend.close()
    counts = (examine.examples, examine.steps, time.monotonic() - began)
    lacking = examine.lacking.why  # learned before and while exploring
    refusals += [record.RefusalRecord("unsupported-op", why, (op,)) for op, why in lacking.items()]
    done = record.run_record(
        space,
        machine.version,
        machine.adapter,
        options.inject,
        request.seed,
        request.budget_s,
        counts,
        started,
        folder.name,
        tuple(findings),
        examine.covered,
        tuple(refusals),
        request.out,
    )
    written = record.write_record(request.out, done)
    found = (done.covered, done.refusals, done.dimensions)
    return Explored(tuple(findings), *counts, folder, written, *found)


def _write(
    failure: Failure | ModelFailure,
    request: ExploreRequest,
    machine: BackendMachine,
    say: Callable[[str], None],
) -> Path:
    """The finding's suite file (and its repro bundle beside it)."""
    injected, seed_ = request.options.inject, request.seed
    if isinstance(failure, Failure):
        return write_finding(failure, request.out, machine, injected, seed_)
    reason = found_by(request.space.target, machine, injected)
    path = write_model_finding(
        failure,
        request.out,
        reason,
        lambda path: finding_header(path, injected, seed_, "generated"),
    )
    say(f"{path.name}: {reproduce(path, request.options, say)}")
    return path


def _examples(
    space: Space, examine: _Examiner, pass_seed: int | None, first: str | None
) -> Callable[[settings], None]:
    """A Hypothesis run over the space's examples, under the settings it is given (each call
    a test of its own, one example database key): scenarios drawn by the state machine
    (``machine``), or a model drawn from the source (starting with the op `first`, where
    given) and its cases."""
    if space.source.draws == "scenarios":
        factory = machine_factory(space, examine)
        if pass_seed is not None:
            factory = seed(pass_seed)(factory)
        return lambda chosen: run_state_machine_as_test(factory, settings=chosen)

    def run(chosen: settings) -> None:
        @given(space.source.strategy(first))
        def drawn_model(model: ExploredModel) -> None:
            examine.cases(model)

        chosen(drawn_model if pass_seed is None else seed(pass_seed)(drawn_model))()

    return run


def _run_pass(
    run: Callable[[settings], None], database: ExampleDatabase, stop_at_first: bool
) -> BudgetSpent | ShrinkingSpent | FirstOpSpent | None:
    """One Hypothesis run (``_examples``); what ended it before Hypothesis had shrunk all it
    found: the budget, or the pass's share of it (None: Hypothesis did). Hypothesis draws on
    after a failure, for failures of other kinds, and shrinks each kind apart; with
    `stop_at_first`, it stops drawing at the first failure and shrinks it, slipping to any
    smaller failure (its ``report_multiple_bugs=False``)."""
    run_settings = settings(
        database=database,
        phases=tuple(p for p in Phase if p != Phase.explain),
        max_examples=10**9,  # the budget ends a pass, or its share does
        stateful_step_count=MAX_STEPS,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=not stop_at_first,
        verbosity=Verbosity.quiet,
        print_blob=False,
    )
    try:
        with _uncapped_shrinking():
            run(run_settings)
    except (BudgetSpent, ShrinkingSpent, FirstOpSpent) as ended:  # kinds written at their shortest
        return ended
    except Exception as raised:  # what it found (one failure, a group, a flaky one): tallied
        if not _only_failures(raised):
            raise
    return None


@contextlib.contextmanager
def _uncapped_shrinking() -> Iterator[None]:
    """Hypothesis without its shrink time cap (``MAX_SHRINKING_SECONDS``, 5 minutes, after which
    it reports the failure unshrunk): where a scenario takes 8-10 s (ort-web) that is about 30
    examples, too few to shrink an 8-step scenario. The budget's grace bounds shrinking
    instead (``Budget.grace``), and for drawn models each kind's share
    (``Kinds.shrinking_spent``). Hypothesis documents the constant as monkeypatchable for
    this; it is restored when the pass ends."""
    capped = hypothesis_engine.MAX_SHRINKING_SECONDS
    hypothesis_engine.MAX_SHRINKING_SECONDS = math.inf
    try:
        yield
    finally:
        hypothesis_engine.MAX_SHRINKING_SECONDS = capped


def _scenario_key(explored: ExploredModel, scenario: Scenario) -> tuple:
    """What tells two drawn scenarios apart: the model and the steps (``signature``)."""
    return explored.digest, signature(scenario)


def _only_failures(raised: BaseException) -> bool:
    """Whether `raised` is failed scenarios only (Hypothesis groups several, or a flaky one)."""
    if isinstance(raised, FailedScenario):
        return True
    group = getattr(raised, "exceptions", None)
    return bool(group) and all(_only_failures(e) for e in group)


_FAILURE_TYPES: dict[FailureKind, type[FailedScenario]] = {}


def _failure_type(kind: FailureKind) -> type[FailedScenario]:
    if kind not in _FAILURE_TYPES:
        _FAILURE_TYPES[kind] = type(f"FailedScenario[{kind[0]}]", (FailedScenario,), {})
    return _FAILURE_TYPES[kind]


def _machine(backend: Backend, target: BackendTarget, seen: str | None) -> BackendMachine:
    """The version and adapter the backend reports (its environment, as run.json records); the
    adapter a run was `seen` on where the environment names none (ort-native's children
    each find their own)."""
    try:
        environment = backend.environment()
    except Exception as exc:  # an adapter that cannot be described must not stop exploring
        environment = {"adapter": {"name": f"unknown ({type(exc).__name__})"}}
    adapter = environment.get("adapter") or {}
    keys = ("vendor", "name", "device", "architecture", "description", "driver")
    described = ", ".join(str(adapter[k]) for k in keys if adapter.get(k)) or seen or "unknown"
    version = str(target.version or environment.get(target.name) or "n/a")
    return BackendMachine(version, described, environment)
