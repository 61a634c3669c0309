"""What a stored result ran, rebuilt: its case, model and inputs, and the cases before it.

The suite is loaded and expanded as the run did (``runner.suite``, ``runner.matrix``), on the
result's own backend target, and each case materialized (``runner.workload``): the same code
path as the run, so the model variant and inputs are the ones the result saw. The model digest
the result recorded must match the model the suite builds now.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.backends import REGISTRY
from runner.backends.base import BackendTarget
from runner.errors import InvalidInput
from runner.history import CaseResult, RunRecord, SqliteHistory
from runner.matrix import Case, expand_suite, layout_sequences
from runner.repro.command import NOTHING_TO_REPRODUCE, backend_name, repro_descriptor
from runner.suite import load_suite
from runner.suite.spec import Suite, mode_name
from runner.workload import Workload, materialize


@dataclass(frozen=True)
class Subject:
    result: CaseResult  # the stored record
    environment: Mapping[str, Any]  # the run's run.json environment ({} if it is gone)
    runs: int  # runs per case in that run
    case: Case  # as the run ran it, the faults it carries included
    workload: Workload  # with the input sequence of `runs` runs
    eager: Case | None  # a capture case's eager twin (what the judge compared it with)
    # The capture cases before it in its layout-change sequence, in the order they ran: what
    # a stale capture may come from.
    earlier: tuple[tuple[Case, Workload], ...]
    notes: tuple[str, ...] = ()  # what the reader should know (an unchecked model)


def check_reproducible(result: CaseResult, *, force: bool, with_fault: bool) -> None:
    """Refuses (InvalidInput) a result there is nothing to bundle for, saying why."""
    rid = result.result_id
    if result.verdict in NOTHING_TO_REPRODUCE and not force:
        raise InvalidInput(
            f"result {rid} is {result.verdict}: nothing to reproduce (--force bundles it anyway)"
        )
    if result.injected and not with_fault and not force:
        raise InvalidInput(
            f"result {rid} failed with injected fault(s) {', '.join(result.injected)}, a "
            "canary of this suite, not a bug of the backend: without them the bundle shows "
            "nothing; --with-fault bundles them, labelled as injected"
        )
    if repro_descriptor(result) is None:
        able = sorted(name for name, d in REGISTRY.items() if d.repro)
        raise InvalidInput(
            f"result {rid} ran on {result.backend}, which writes no repro bundles; "
            f"expected a result of {', '.join(able)}"
        )


def load_subject(history: Path, result: CaseResult, with_fault: bool) -> Subject:
    """The result's case and sequence, rebuilt; InvalidInput when the suite no longer holds the
    case or now builds another model."""
    run = run_record(history, result.run_id)
    options = run.options
    run_faults = frozenset(options.get("inject") or ()) if with_fault else frozenset()
    suite = load_suite(Path(result.suite_path), REGISTRY)
    single = dataclasses.replace(suite, backends=(result_target(suite, result),))
    cases = [_with_faults(c, run_faults, with_fault) for c in expand_suite(single)]
    index = next((i for i, c in enumerate(cases) if _same_case(c, result)), None)
    if index is None:
        raise InvalidInput(
            f"{result.suite_path} no longer has the case of result {result.result_id} "
            f"({result.case_id}); `python -m runner list` shows its cases"
        )
    case = cases[index]
    if with_fault and result.injected:  # as the run had them, --inject included
        case = dataclasses.replace(case, inject=frozenset(result.injected))
    runs = int(options.get("runs") or 3)
    workload = materialize(case, runs)  # with the input sequence the run fed
    notes = check_digest(result, workload)
    sequence = next(s for s in layout_sequences(cases) if cases[index] in s.cases)
    before = list(sequence.until(case.id).cases[:-1])
    eager = None
    earlier: tuple[tuple[Case, Workload], ...] = ()
    if case.capture:
        twins = [c for c in before if c.cell == case.cell and not c.capture]
        eager = twins[-1] if twins else case.eager_twin()
        earlier = tuple((c, materialize(c, runs)) for c in before if c.capture)
    return Subject(
        result=result,
        environment=run.environment,
        runs=runs,
        case=case,
        workload=workload,
        eager=eager,
        earlier=earlier,
        notes=notes,
    )


def run_record(history: Path, run_id: str) -> RunRecord:
    """The result's run (a bare record when the history lost it)."""
    with SqliteHistory(history) as store:
        return next((r for r in store.runs() if r.run_id == run_id), RunRecord(run_id, ""))


def result_target(suite: Suite, result: CaseResult) -> BackendTarget:
    """The suite's own target for the result (its adapter kept), else the one the result names
    (a run retargeted with --backend or another version)."""
    for target in suite.backends:
        same_build = target.name == backend_name(result) and target.bundle == result.bundle
        if same_build and target.version == result.version:
            return dataclasses.replace(target, label=None)
    return BackendTarget(backend_name(result), result.bundle, None, result.version)


def _same_case(case: Case, result: CaseResult) -> bool:
    return (
        case.model.name == result.model
        and case.shape.as_dict() == dict(result.shape)
        and case.layout.label == result.layout
        and mode_name(case.capture) == result.capture
        and case.revisit == bool(result.revisit)
    )


def _with_faults(case: Case, run_faults: frozenset[str], with_fault: bool) -> Case:
    """A case with the faults the run gave it (its rule's and --inject), or with none."""
    return dataclasses.replace(case, inject=case.inject | run_faults if with_fault else frozenset())


def check_digest(result: CaseResult, workload: Workload) -> tuple[str, ...]:
    recorded = result.model_digest
    if recorded is None:
        return (
            "the result predates model digests: the model could not be checked against the one "
            "the run used",
        )
    if recorded != workload.model_digest:
        raise InvalidInput(
            f"result {result.result_id} ran model {result.model!r} with sha256 "
            f"{recorded[:16]}, but {result.suite_path} now builds sha256 "
            f"{workload.model_digest[:16]}: the model (its file, or what builds it) changed "
            f"since run {result.run_id}; run the case again and bundle the new result"
        )
    return ()
