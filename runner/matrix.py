"""Expand suites into cases, then select them (``--filter``) and split them (``--shard``).

Order is deterministic and groups what later steps need together: for each suite, model, shape
and backend, the layouts in declared order, each in mode order (dynamic, eager, capture). So one
layout-change sequence is contiguous, and a capture case directly follows its eager twin.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from runner.suite.scenarios import Scenario
from runner.suite.spec import (
    DIMENSIONS,
    MODES,
    BackendTarget,
    BufferModes,
    Expectation,
    Layout,
    ModelSpec,
    Shape,
    Suite,
    Tolerance,
    cell_values,
    entry_matches,
    holding_rules,
    label_versions,
    mode_name,
    written_for,
)

# Each of the given targets with its exact version, asking a registry where it must
# (``runner.backends.resolve_targets``; the matrix itself knows no backend).
Resolver = Callable[[Iterable[BackendTarget]], Mapping[BackendTarget, BackendTarget]]


@dataclass(frozen=True)
class Case:
    suite: Suite
    model: ModelSpec
    shape: Shape
    layout: Layout
    backend: BackendTarget
    capture: bool
    tolerance: Tolerance
    expectation: Expectation = Expectation()
    # The first layout captured again at the end of its sequence (A, B, ..., A): a replay
    # that picks up a later layout's state shows here.
    revisit: bool = False
    # A revisit comes back to this case's session later in the sequence: the backend keeps it
    # alive until then (and releases every other case's session after its case).
    revisited: bool = False
    inject: frozenset[str] = frozenset()  # faults injected into this case (canaries)
    dynamic: bool = False  # eager with no symbolic dim pinned (`capture: dynamic`)
    buffers: BufferModes = BufferModes()  # how a capture case's inputs and outputs are held
    graphs: int = 1  # graphs one capture session records (gpu_graph_id 0..graphs-1)
    # Moved by --backend to a target nothing in its suite was written for: it expects what any
    # backend can do, so an operator its backend lacks skips it (runner.judge)
    moved: bool = False

    @property
    def mode(self) -> str:
        """``dynamic``, ``eager`` or ``capture``."""
        return mode_name(self.capture, self.dynamic)

    @property
    def expect(self) -> frozenset[str]:
        """The verdicts its expectation allows."""
        return self.expectation.expect

    @property
    def cell(self) -> str:
        """The id without the capture mode: an eager case and its capture twin share it.

        An op-test case's model name already says everything (``ort-ops/<file>/<test>/<case>``:
        its shapes are the file's, its layout the default), so its id leaves both out; a model
        without symbolic dims has no shape to name either.
        """
        if self.model.op_test is not None:
            return f"{self.model.name}/{self.backend.id}"
        shape = (self.shape.label,) if self.shape.dims else ()
        return "/".join((self.model.name, *shape, f"layout={self.layout.label}", self.backend.id))

    @property
    def id(self) -> str:
        return f"{self.cell}/{self.mode}{'-revisit' if self.revisit else ''}"

    def eager_twin(self) -> Case:
        """This case run eager: what a capture case is compared against."""
        return dataclasses.replace(self, capture=False, revisit=False, revisited=False)

    def fields(self) -> dict[str, str]:
        """The values ``key=value`` filters and ``cases: match:`` select on; ``file``, ``test``
        and ``operator`` are an op-test case's (empty for other cases)."""
        op_case = self.model.op_test
        return {
            "id": self.id,
            "suite": self.suite.name,
            "model": self.model.name,
            "shape": self.shape.label,
            "layout": self.layout.label,
            "backend": self.backend.build_id,
            "bundle": self.backend.bundle or "",
            "version": self.backend.version or "",
            "capture": self.mode,
            "buffers": self.buffers.label,
            "graphs": str(self.graphs),
            "file": op_case.test.file.name if op_case else "",
            "test": op_case.test.name if op_case else "",
            "operator": op_case.test.operator if op_case else "",
        }


@dataclass(frozen=True)
class LayoutSequence:
    """One model at one shape on one backend target, its layouts run back to back on one device
    (A, B, ..., A), in this order: a stale binding shows only in a case run after those before
    it. The step runs a sequence as a whole and tells the backend where it opens and closes;
    sharding, ``--last-failed``, bisect and repro select whole sequences or their beginnings."""

    cases: tuple[Case, ...]

    def until(self, case_id: str) -> LayoutSequence:
        """The sequence up to the case `case_id`, that case included."""
        ids = [case.id for case in self.cases]
        return LayoutSequence(self.cases[: ids.index(case_id) + 1])


def _sequence_key(case: Case) -> tuple[str, str, str, str]:
    return (str(case.suite.path), case.model.name, case.shape.label, case.backend.id)


def layout_sequences(cases: Iterable[Case]) -> list[LayoutSequence]:
    """Matrix-ordered `cases` cut into their layout-change sequences."""
    return [
        LayoutSequence(tuple(group)) for _, group in itertools.groupby(cases, key=_sequence_key)
    ]


@dataclass(frozen=True)
class ScenarioTarget:
    """A scenario of a suite on one backend target: what a run steps after its cases."""

    suite: Suite
    scenario: Scenario
    target: BackendTarget

    @property
    def id(self) -> str:
        return f"scenario={self.scenario.name}/{self.target.id}"

    @property
    def tolerance(self) -> Tolerance:
        return self.scenario.tolerance or self.suite.tolerance

    def as_case(self, inject: frozenset[str]) -> Case:
        """The case whose model, shape, target, tolerance and expectation the scenario's
        sessions share (its workload is built from it; its record starts from it)."""
        scenario = self.scenario
        return Case(
            self.suite,
            scenario.model,
            scenario.shape,
            self.suite.layouts[0],
            self.target,
            True,
            self.tolerance,
            scenario.expectation,
            inject=inject,
        )


def unversioned_id(case_id: str) -> str:
    """A case id without its backend's ``@version`` label: the same case on every version. (The
    backend is the part before the mode.)"""
    *head, backend, mode = case_id.split("/")
    return "/".join([*head, re.sub(r"@[^:]*", "", backend), mode])


def suite_cells(suite: Suite) -> list[tuple[ModelSpec, Shape, Layout, BackendTarget, str, dict]]:
    """The suite's matrix after ``exclude`` and ``include``, with each cell's extra keys."""
    layouts = {layout.label: layout for layout in suite.layouts}
    models = {model.name: model for model in suite.models}
    backends = {backend.id: backend for backend in suite.backends}
    cells = [(*cell, {}) for cell in suite.base_cells()]
    for entry in suite.include:
        extras = {k: v for k, v in entry.items() if k not in DIMENSIONS}
        extended = False
        for cell in cells:
            if entry_matches(entry, cell_values(*cell[:5])):
                cell[5].update(extras)
                extended = True
        if not extended:
            model = models[entry["model"]]
            shape = Shape(tuple(dict(entry["shape"]).items()))
            modes = (entry["capture"],) if "capture" in entry else suite.capture
            for mode in modes:
                cells.append(
                    (
                        model,
                        shape,
                        layouts[entry.get("layout", suite.layouts[0].label)],
                        backends[entry["backend"]],
                        mode,
                        dict(extras),
                    )
                )
    return cells


def expand_suite(
    suite: Suite, targets: Mapping[BackendTarget, BackendTarget] | None = None
) -> list[Case]:
    """The suite's cases; `targets` replaces its targets as the run resolved and labelled them
    (``include`` and ``exclude`` name the suite's own, ``cases:`` rules see the run's)."""
    targets = targets or {}
    cases = []
    for model, shape, layout, backend, mode, extras in suite_cells(suite):
        case = Case(
            suite,
            model,
            shape,
            layout,
            targets.get(backend, backend),
            mode == "capture",
            suite.tolerance,
            dynamic=mode == "dynamic",
            buffers=dataclasses.replace(suite.buffers, **model.buffers),
            graphs=model.graphs,
        )
        if "tolerance" in extras:
            case = dataclasses.replace(case, tolerance=Tolerance(**extras["tolerance"]))
        cases.append(case)
    order = {name: i for i, name in enumerate(m.name for m in suite.models)}
    versions: dict[str, list[str | None]] = {}  # each backend's, in the suite's order
    for target in (targets.get(b, b) for b in suite.backends):
        if target.version not in versions.setdefault(target.name, []):
            versions[target.name].append(target.version)
    cases.sort(key=lambda c: _sort_key(c, suite, order, versions[c.backend.name]))
    return [_apply_rules(case, suite) for case in _with_revisits(cases)]


def _with_revisits(cases: list[Case]) -> list[Case]:
    """After each sequence that captured two or more layouts, capture its first layout again;
    the first layout's capture case is marked `revisited`, so that its session lives until then."""
    result: list[Case] = []
    for sequence in layout_sequences(cases):
        group = list(sequence.cases)
        captured = [c for c in group if c.capture]
        if len({c.layout.label for c in captured}) > 1:
            first = group.index(captured[0])
            group[first] = dataclasses.replace(captured[0], revisited=True)
            group.append(dataclasses.replace(captured[0], revisit=True))
        result += group
    return result


def _apply_rules(case: Case, suite: Suite) -> Case:
    rules = [rule for rule in suite.cases if not rule.for_scenarios]
    holding = holding_rules(rules, case.fields(), case.backend, suite.home)
    if not holding and not written_for(case.backend, (), suite.home):
        return dataclasses.replace(case, moved=True)
    for rule in holding:
        case = dataclasses.replace(  # the last rule wins, like later CSS rules
            case,
            expectation=rule.expectation,
            tolerance=rule.tolerance or case.tolerance,
            inject=rule.inject,
            buffers=dataclasses.replace(case.buffers, **rule.buffers),
            graphs=rule.graphs or case.graphs,
        )
    return case


def _sort_key(case: Case, suite: Suite, model_order: Mapping[str, int], versions: list):
    """A backend's versions outermost (it loads one version's builds at a time), then the
    suite's models and shapes, backends, then layouts in order, each eager then capture."""
    version_index = versions.index(case.backend.version) if case.backend.version in versions else 0
    layout_index = [layout.label for layout in suite.layouts].index(case.layout.label)
    shapes = case.model.shapes or suite.shapes
    shape_index = shapes.index(case.shape) if case.shape in shapes else len(shapes)
    return (
        version_index,
        model_order[case.model.name],
        shape_index,
        case.shape.label,
        case.backend.id,
        layout_index,
        MODES.index(case.mode),
    )


def expand_matrix(
    suites: Iterable[Suite], targets: Mapping[BackendTarget, BackendTarget] | None = None
) -> list[Case]:
    """Every case of every suite, in a deterministic order; ids are unique."""
    return [case for suite in suites for case in expand_suite(suite, targets)]


def select_cases(
    cases: Iterable[Case], filters: Iterable[str], unsure_of_versions: bool = False
) -> list[Case]:
    """Keep cases matching every filter: ``key=glob`` on a field, otherwise a glob on the id.

    `unsure_of_versions`: versions are not resolved yet, so keep a case whenever the filter
    could match once they are (``version=`` on a case without one, a glob naming a version
    label); the rest of each id, its version label left out, must match."""
    filters = list(filters)

    def keep(case: Case) -> bool:
        fields = case.fields()
        case_id = unversioned_id(case.id) if unsure_of_versions else case.id
        for f in filters:
            key, sep, pattern = f.partition("=")
            if sep and key in fields:
                if unsure_of_versions and key == "version" and not fields[key]:
                    continue
                if not fnmatch.fnmatchcase(fields[key], pattern):
                    return False
            elif unsure_of_versions and "@" in f:
                continue
            elif not fnmatch.fnmatchcase(case_id, f if any(ch in f for ch in "*?[") else f"*{f}*"):
                return False
        return True

    return [case for case in cases if keep(case)]


def select_resolved(suites: list[Suite], filters: Iterable[str], resolve: Resolver) -> list[Case]:
    """The cases `filters` select, on exact versions: only the targets of cases that may be
    selected are resolved (a registry asked), so that a selection without them needs none.
    Targets that name one exact version are one target (one column, one page) however the
    suites spell it; ids name versions where the selection has several. Cases come grouped by
    version, in the order each first appears."""
    filters = list(filters)
    candidates = select_cases(expand_matrix(suites), filters, unsure_of_versions=True)
    resolved = resolve(case.backend for case in candidates)
    labelled = label_versions(resolved[case.backend] for case in candidates)
    targets = {target: labelled[exact] for target, exact in resolved.items()}
    ran = set(targets.values())
    cases = [c for c in select_cases(expand_matrix(suites, targets), filters) if c.backend in ran]
    rank: dict[tuple[str, str | None], int] = {}  # each backend's versions: 0, 1, ...
    for case in cases:
        key = (case.backend.name, case.backend.version)
        if key not in rank:
            rank[key] = sum(name == key[0] for name, _ in rank)
    return sorted(cases, key=lambda c: rank[(c.backend.name, c.backend.version)])


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` (1-based) -> (i, n); raises ValueError with what was expected."""
    try:
        index, total = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r} is not i/n; expected e.g. 1/2") from None
    if not 1 <= index <= total:
        raise ValueError(f"--shard {text!r}: i must be between 1 and n")
    return index, total


def shard_cases(cases: Iterable[Case], index: int, total: int) -> list[Case]:
    """Cases of shard ``index`` of ``total``; the shards partition the cases.

    Whole layout-change sequences stay on one shard (a stale binding needs its predecessors),
    dealt round-robin in matrix order, so every machine given the same suites splits alike.
    """
    sequences = layout_sequences(cases)
    return [case for i, s in enumerate(sequences) if i % total == index - 1 for case in s.cases]


def with_predecessors(cases: Iterable[Case], wanted: set[str]) -> list[Case]:
    """The cases whose ids are in `wanted`, each with the cases before it in its layout-change
    sequence (its eager twin, earlier layouts): a stale binding only shows after them."""
    kept: list[Case] = []
    for sequence in layout_sequences(cases):
        ids = [case.id for case in sequence.cases]
        last = max((i for i, case_id in enumerate(ids) if case_id in wanted), default=None)
        if last is not None:
            kept += sequence.until(ids[last]).cases
    return kept
