"""Rerun a candidate model (a cut, or the full model) as the result ran, and judge it.

Each rerun opens a backend of its own, so nothing an earlier candidate left on the device (a
capture, a cached bind group, a page's sessions) can make a later one fail: the captures that
preceded the case in its sequence run first, then its eager twin, then the case, and the real
judge (``runner.judge``) decides, with the same evidence the pipeline gives it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from runner.backends import open_backend
from runner.backends.base import Backend, BackendOptions, BackendRun
from runner.judge import Evidence, Judgement, Twin, judge
from runner.matrix import Case
from runner.oracle import References, compute_reference
from runner.repro.cut import exposed
from runner.repro.subject import Subject
from runner.schedule import Variant
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
    """`workload` in place of the case's, `earlier` in place of the earlier captures'."""
    backend = open_backend(subject.case.backend.name, options)
    try:
        for (case, _), replaced in zip(subject.earlier, earlier, strict=True):
            backend.run(case, replaced)
        eager = backend.run(subject.eager, workload) if subject.eager else None
        run = backend.run(subject.case, workload)
    finally:
        backend.close()
    references = _references(workload)
    earlier_references = tuple(_references(w) for w in earlier)
    layouts: dict[str, tuple[str, Mapping]] = {}
    for (case, _), replaced, refs in zip(subject.earlier, earlier, earlier_references, strict=True):
        layouts.setdefault(replaced.key, (case.layout.label, refs))
    layouts.pop(workload.key, None)  # the case's own layout is no earlier one
    feeds = workload.feeds(subject.runs)
    evidence = Evidence(
        subject.case,
        run,
        references,
        feeds=feeds,
        eager=Twin(eager, feeds) if eager else None,
        earlier=tuple(layouts.values()),
    )
    return Rerun(judge(evidence), run, eager, references, earlier_references)


def _references(workload: Workload) -> References:
    return {variant: compute_reference(workload, variant) for variant in workload.all_variants()}


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
    eager = dataclasses.replace(case, capture=False, revisit=False)
    one = dataclasses.replace(workload, inputs=inputs, schedule=(), variants={})
    run = backend.run(eager, exposed(one, wanted))
    if run.status != "ok":
        raise ValueError(f"the eager run for the cut's inputs failed: {run.status}: {run.message}")
    return {**dict(inputs), **{name: run.outputs[name] for name in wanted}}
