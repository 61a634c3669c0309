"""Rerun a candidate model (a cut, or the full model) as the result ran, and judge it.

Each rerun opens a backend of its own, so nothing an earlier candidate left on the device (a
capture, a cached bind group, a page's sessions) can make a later one fail: the captures that
preceded the case in its sequence run first, then its eager twin, then the case, each through
the step the run uses (``runner.step``), so the judge decides on the same evidence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from runner.backends import open_backend
from runner.backends.base import Backend, BackendOptions, BackendRun, CaseWork
from runner.errors import InvalidInput
from runner.judge import Judgement
from runner.matrix import Case, LayoutSequence
from runner.oracle import ReferenceCache, References
from runner.repro.cut import exposed
from runner.repro.subject import Subject
from runner.schedule import Variant
from runner.step import Step
from runner.workload import Workload


@dataclass(frozen=True)
class Rerun:
    judgement: Judgement
    run: BackendRun  # the case's
    eager: BackendRun | None  # its eager twin's, for a capture case
    references: References  # onnxruntime CPU on the case's workload, per input variant
    # onnxruntime CPU on each earlier capture's workload, in order
    earlier_references: tuple[References, ...]


def rerun(
    subject: Subject, workload: Workload, earlier: Sequence[Workload], options: BackendOptions
) -> Rerun:
    """`workload` in place of the case's, `earlier` in place of the earlier captures'. Raises
    InvalidInput when onnxruntime CPU gives no reference to bundle."""
    step = Step(ReferenceCache(None).references, dataclasses.replace(options, runs=subject.runs))
    backend = open_backend(subject.case.backend.name, options)
    cases = [case for case, _ in subject.earlier]
    workloads = {case.id: replaced for case, replaced in zip(cases, earlier, strict=True)}
    for case in (subject.eager, subject.case):
        if case is not None:
            cases.append(case)
            workloads[case.id] = workload
    try:
        *before, judged = step.sequence(LayoutSequence(tuple(cases)), backend, workloads)
    finally:
        backend.close()
    eager = before.pop() if subject.eager else None
    for stepped in (*before, judged):  # the bundle holds every one's expected outputs
        if not stepped.references:
            why = stepped.no_reference or f"{stepped.run.status}: {stepped.run.message}"
            raise InvalidInput(f"{stepped.case.id}: no onnxruntime CPU outputs to bundle: {why}")
    return Rerun(
        judged.judgement,
        judged.run,
        eager.run if eager else None,
        judged.references,
        tuple(b.references for b in before),
    )


def eager_values(
    subject: Subject, names: Sequence[str], options: BackendOptions
) -> tuple[dict[Variant, dict[str, np.ndarray]], ...]:
    """The values of tensors `names` in eager runs of each earlier capture's workload and the
    case's (last), on one backend, for every input variant the workload's runs use: the inputs
    of cuts. Graph inputs come from the workloads, the others are exposed as outputs. Raises
    ValueError if a run fails."""
    pairs = [*subject.earlier, (subject.eager or subject.case, subject.workload)]
    backend = open_backend(subject.case.backend.name, options)
    try:
        return tuple(
            {
                variant: _values(backend, case, workload, inputs, names)
                for variant, inputs in workload.all_variants().items()
            }
            for case, workload in pairs
        )
    finally:
        backend.close()


def _values(
    backend: Backend,
    case: Case,
    workload: Workload,
    inputs: Mapping[str, np.ndarray],
    names: Sequence[str],
) -> dict[str, np.ndarray]:
    """`names`' values in one eager run of `workload` on `inputs`."""
    wanted = [name for name in names if name not in inputs]
    eager = case.eager_twin()
    one = dataclasses.replace(workload, inputs=inputs, schedule=(), variants={})
    run = backend.run(CaseWork(eager, exposed(one, wanted)))
    if run.status != "ok":
        raise ValueError(f"the eager run for the cut's inputs failed: {run.status}: {run.message}")
    return {**dict(inputs), **{name: run.outputs[name] for name in wanted}}
