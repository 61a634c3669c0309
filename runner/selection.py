"""Which cases a command runs, from a ``Selection``: the suites read, retargeted (``--backend``),
their versions replaced (``--NAME-version``), resolved, filtered, sharded, and narrowed to what
failed last (``--lf``).

``list``, ``run``, ``bisect`` and the benchmarks select here, so a case id means the same
case to each; the command line only turns its arguments into a ``Selection``. ``run`` asks for
its cases and scenarios together (``plan_run``), from one reading of the suites.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.backends import REGISTRY, parse_backend, resolve_targets
from runner.backends.base import BackendDescriptor, BackendTarget
from runner.errors import InvalidInput, Problem
from runner.history import SqliteHistory
from runner.matrix import (
    Case,
    LayoutSequence,
    ScenarioTarget,
    expand_matrix,
    expand_suite,
    layout_sequences,
    parse_shard,
    select_resolved,
    shard_cases,
    unversioned_id,
    with_predecessors,
)
from runner.suite import load_suites
from runner.suite.spec import CaseRule, Expectation, Suite, holding_rules, label_versions
from runner.verdicts import FAILING_OUTCOMES


@dataclass(frozen=True)
class Selection:
    """A request for cases, as the command line spells it."""

    suites: tuple[Path, ...]  # suite files or folders
    tags: tuple[str, ...] = ()  # also the suites with these tags (heavy)
    backends: tuple[str, ...] = ()  # NAME[:BUILD] replacing the suites' own; (): theirs
    versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # backend -> versions
    filters: tuple[str, ...] = ()  # globs on the id, or key=glob on a field; all must match
    shard: str | None = None  # "i/n"
    last_failed: Path | None = None  # a history.sqlite: keep what failed in it last

    def recorded(self) -> dict[str, Any]:
        """What a run stores as its selection, so that shards of one selection can be merged."""
        return {
            "filters": list(self.filters),
            "shard": self.shard,
            "backends": list(self.backends),
            "versions": {d.name: list(self.versions.get(d.name, ())) for d in versioned_backends()},
            "tags": list(self.tags),
            **({"last_failed": True} if self.last_failed else {}),
        }


def versioned_backends() -> list[BackendDescriptor]:
    """The backends a selection may run on other versions (``--NAME-version``)."""
    return [descriptor for descriptor in REGISTRY.values() if descriptor.versions]


def load(selection: Selection) -> list[Suite]:
    """The selection's suites with its backends and versions in place of their own; reads files
    only."""
    suites = load_suites(selection.suites, REGISTRY, selection.tags)
    if selection.backends:
        suites = [_retarget(suite, selection.backends) for suite in suites]
    return [_version_override(suite, selection.versions) for suite in suites]


def _retarget(suite: Suite, backends: Sequence[str]) -> Suite:
    """The suite on `backends` instead of its own; its `home` becomes the targets it declared,
    versions included, so that what it expects holds only where it was written for
    (``runner.suite.spec.written_for``): not on another build, nor on the default version of
    a build it declared on another."""
    targets = [target for text in backends for target in parse_backend(text)]
    return dataclasses.replace(suite, backends=tuple(dict.fromkeys(targets)), home=suite.backends)


def _version_override(suite: Suite, versions: Mapping[str, Sequence[str]]) -> Suite:
    """The suite's targets on other versions (the versions axis): a home `--backend` set moves
    with them, as the versions axis asks the suite's own question of another version (rules
    naming a `version` answer it)."""
    backends, home = suite.backends, suite.home
    for descriptor in versioned_backends():
        texts = versions.get(descriptor.name)
        if texts:
            backends = descriptor.with_versions(backends, list(texts))
            home = descriptor.with_versions(home, list(texts))
    return dataclasses.replace(suite, backends=backends, home=home)


def named_targets(selection: Selection) -> list[BackendTarget]:
    """The targets ``--backend`` names, on ``--NAME-version``'s versions: for a command that
    reads no suite (explore drawing its own models)."""
    targets = tuple(dict.fromkeys(t for text in selection.backends for t in parse_backend(text)))
    for descriptor in versioned_backends():
        texts = selection.versions.get(descriptor.name)
        if texts:
            targets = descriptor.with_versions(targets, list(texts))
    return list(targets)


@dataclass(frozen=True)
class RunPlan:
    """What a run runs: cases in matrix order and scenarios after them, and the selection that
    named them, which the run records (shards of one selection merge)."""

    cases: tuple[Case, ...]
    scenarios: tuple[ScenarioTarget, ...] = ()
    selection: Mapping[str, Any] = field(default_factory=dict)


def plan_run(
    selection: Selection,
    say: Callable[[str], None] = print,
    prepare: Callable[[list[Case]], bool] = lambda cases: False,
) -> RunPlan:
    """The cases and scenarios `selection` names, from its suites read once (twice where
    preparing the cases changed what reading finds). `prepare` is handed the cases before the plan
    is made (the run fetches their package models) and says whether it changed what loading
    reads (a fetched decoder's sizes come from its file): then the suites are read again."""
    suites = load(selection)
    cases = _selected(suites, selection, say)
    if prepare(cases):
        suites = load(selection)
        cases = _selected(suites, selection, say)
    return RunPlan(tuple(cases), tuple(_scenarios(suites, selection)), selection.recorded())


def select(selection: Selection, say: Callable[[str], None] = print) -> list[Case]:
    """The cases `selection` names, in run order, on exact versions (a registry is asked only
    for the targets of cases it may select); `say` hears what ``--lf`` kept."""
    return _selected(load(selection), selection, say)


def _selected(suites: list[Suite], selection: Selection, say: Callable[[str], None]) -> list[Case]:
    cases = select_resolved(suites, selection.filters, resolve_targets)
    refuse_repeated_ids(cases)
    if selection.shard:
        try:
            cases = shard_cases(cases, *parse_shard(selection.shard))
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
    if selection.last_failed:
        cases = _last_failed(cases, selection.last_failed, say)
    return cases


def declared_cases(suites: Iterable[Suite]) -> list[Case]:
    """Every case the suites declare, versions as spelt (no registry asked): what ``validate``
    counts."""
    cases = expand_matrix(suites)
    refuse_repeated_ids(cases)
    return cases


def refuse_repeated_ids(cases: Iterable[Case], scenarios: Iterable[ScenarioTarget] = ()) -> None:
    """InvalidInput, naming both files and lines, where two suites give one case id (one model
    name, shape, layout, backend, version and mode) or one scenario id: results, the history,
    ``--lf``, ``new-case``, ``repro`` and bisect all address a result by its id, so the second
    would overwrite the first. Ids are compared without their version labels, by exact version
    where known (else as spelt), so that files alone can tell (``validate``)."""
    first: dict[tuple[str, str | None], tuple[Path, int | None, str]] = {}
    repeats: dict[tuple, list[str]] = {}  # (first's place, second's place) -> ids
    items = [
        (
            c.id,
            unversioned_id(c.id),
            c.backend,
            c.suite.path,
            c.model.line,
            f"model {c.model.name!r}",
        )
        for c in cases
    ] + [
        (
            s.id,
            f"scenario={s.scenario.name}/{s.target.build_id}",
            s.target,
            s.suite.path,
            s.scenario.line,
            f"scenario {s.scenario.name!r}",
        )
        for s in scenarios
    ]
    for shown, unlabelled, target, path, line, what in items:
        key = (unlabelled, target.version or target.declared)
        place = (path, line, what)
        if first.setdefault(key, place) != place:
            repeats.setdefault((first[key], place), []).append(shown)
    problems = []
    for ((path, line, what), (again, again_line, again_what)), ids in repeats.items():
        problems.append(
            Problem(
                _shown(again),
                again_line or 1,
                1,
                f"{again_what} gives {len(ids)} id(s) that {what} of "
                f"{_shown(path)}:{line or 1} gives too, e.g. {ids[0]}",
                "a name no other suite run on the same backend and version uses (results "
                "and the history are keyed by case id): rename one",
            )
        )
    if problems:
        raise InvalidInput(problems)


def _shown(path: Path) -> Path:
    """`path` relative to the working directory when inside it, as messages name files."""
    here = Path.cwd().resolve()
    return path.relative_to(here) if path.is_relative_to(here) else path


def _last_failed(cases: list[Case], history: Path, say: Callable[[str], None]) -> list[Case]:
    """The cases whose latest result in `history` was unexpected, with what runs before them in
    their layout-change sequences."""
    latest: dict[str, str] = {}
    if history.is_file():
        with SqliteHistory(history) as store:
            latest = store.latest_outcomes()
    failed = {case_id for case_id, outcome in latest.items() if outcome in FAILING_OUTCOMES}
    if not failed:
        say(f"--last-failed: no unexpected results recorded in {history}")
        return []
    rerun = with_predecessors(cases, failed)
    selected = sum(case.id in failed for case in rerun)
    say(
        f"--last-failed: {selected} of {len(failed)} failed case(s) selected; "
        f"{len(rerun)} case(s) to run with those before them in their sequences"
    )
    return rerun


def check_faults(
    cases: list[Case], injected: Iterable[str], scenarios: Iterable[ScenarioTarget] = ()
) -> None:
    """Every fault named by --inject or a suite's `inject:` exists on its case's backend (or,
    --inject, on a scenario's)."""
    names = {c.backend.name for c in cases} | {s.target.name for s in scenarios}
    faults = {name: REGISTRY[name].faults for name in sorted(names)}
    every = sorted({fault for names in faults.values() for fault in names})
    unknown = sorted(set(injected) - set(every))
    if unknown:
        raise InvalidInput(
            f"--inject {', '.join(unknown)}: no such fault for these backends; "
            f"expected one of {', '.join(every) or '(none)'}"
        )
    problems = sorted(
        {
            f"{case.suite.path}: case {case.id} injects {fault!r}, which backend "
            f"{case.backend.name} does not have; expected one of "
            f"{', '.join(faults[case.backend.name]) or '(none)'}"
            for case in cases
            for fault in case.inject
            if fault not in faults[case.backend.name]
        }
    )
    if problems:
        raise InvalidInput(problems)


def find_case(suites: list[Suite], case_id: str) -> tuple[Suite, Case]:
    """The suite and case an id names (its version label, if any, ignored)."""
    wanted = unversioned_id(case_id)
    for suite in suites:
        for case in expand_suite(suite):
            if unversioned_id(case.id) == wanted:
                return suite, case
    raise InvalidInput(f"no case {case_id!r} in these suites; `python -m runner list` shows them")


def sequence_until(suite: Suite, case: Case, target: BackendTarget) -> LayoutSequence:
    """`case` on `target` alone, after the cases before it in its layout-change sequence: what
    it needs to run as it ran in its suite (a bisect probe)."""
    target = dataclasses.replace(target, label=None)
    single = dataclasses.replace(suite, backends=(target,))
    wanted = dataclasses.replace(case, backend=target).id
    sequences = layout_sequences(expand_suite(single))
    return next(s for s in sequences if wanted in {c.id for c in s.cases}).until(wanted)


def _scenarios(suites: list[Suite], selection: Selection) -> list[ScenarioTarget]:
    """The suites' scenarios on each of their backends (the suite's, or `--backend`'s), on
    exact versions, as filters select them: a glob on the id (``scenario=NAME/BACKEND``) or
    ``key=glob`` on scenario, model, backend or bundle. A shard other than the first and
    ``--lf`` select none."""
    if selection.last_failed or selection.shard and not selection.shard.startswith("1/"):
        return []
    items = [
        ScenarioTarget(suite, scenario, target)
        for suite in suites
        for scenario in suite.scenarios
        for target in (
            scenario.backends if scenario.backends and not selection.backends else suite.backends
        )
    ]
    exact = resolve_targets(item.target for item in items)
    # Named by version where the scenarios run several, as cases are: else a scenario whose
    # own `backends:` lists two versions would have one id on both.
    labelled = label_versions(exact.values())
    items = [
        _expected_here(dataclasses.replace(item, target=labelled[exact[item.target]]))
        for item in items
    ]
    items = [item for item in items if all(_scenario_matches(item, f) for f in selection.filters)]
    refuse_repeated_ids((), items)
    return items


def _expected_here(item: ScenarioTarget) -> ScenarioTarget:
    """The scenario with the expectation that holds on its target: its own `expect:` (and
    tolerance) on the backends it (or its suite) declares, then the suite's `cases:` rules
    naming it, through the rule cases take (``holding_rules``); else `pass`."""
    scenario, suite = item.scenario, item.suite
    own = CaseRule({}, scenario.expectation, scenario.tolerance)
    rules = [own, *(rule for rule in suite.cases if rule.for_scenarios)]
    home = scenario.backends or suite.home
    expectation, tolerance = Expectation(), scenario.tolerance
    for rule in holding_rules(rules, scenario_fields(item), item.target, home):
        expectation, tolerance = rule.expectation, rule.tolerance or tolerance
    expected = dataclasses.replace(scenario, expectation=expectation, tolerance=tolerance)
    return dataclasses.replace(item, scenario=expected)


def scenario_fields(item: ScenarioTarget) -> dict[str, str]:
    """What a `cases:` rule naming `scenario` matches on, as a case's ``fields()``."""
    return {
        "id": item.id,
        "suite": item.suite.name,
        "scenario": item.scenario.name,
        "model": item.scenario.model.name,
        "backend": item.target.build_id,
        "bundle": item.target.bundle or "",
        "version": item.target.version or "",
    }


def _scenario_matches(item: ScenarioTarget, pattern: str) -> bool:
    fields = {
        "scenario": item.scenario.name,
        "model": item.scenario.model.name,
        "backend": item.target.id,
        "bundle": item.target.bundle or "",
    }
    key, sep, glob = pattern.partition("=")
    if sep:
        return key in fields and fnmatch.fnmatchcase(fields[key], glob)
    return fnmatch.fnmatchcase(
        item.id, pattern if any(c in pattern for c in "*?[") else f"*{pattern}*"
    )
