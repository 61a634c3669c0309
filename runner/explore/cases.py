"""A drawn model's cases: run and judged as a suite's are, told apart when they fail, and
written as a finding that ``run`` reproduces.

An example is one generated model (``runner.explore.generated``) and its case matrix: each
layout eager, then captured, on one device, the first layout captured again at the end. Its
cases step through one ``Step`` (``runner.step``), so a capture is judged against its eager
twin, onnxruntime CPU and the layouts captured before it. An example whose reference cannot be
had (onnxruntime CPU refuses the model, or computes NaN or infinity) is discarded, and so is
one using an op the target lacks on its GPU path, which is learned and not drawn again: neither
is a finding.

Two failures are the same bug when they share their root cause (``runner.cause``: the
mechanism and the culprit node's op, from localizing the first failing case) and, for a
backend's own failure, its message (``ModelFailure.kind``), whatever their verdict label: so a
bystander beside a known culprit shrinks away rather than making a kind of its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from runner.backends.base import Backend, BackendOptions
from runner.cause import LOCALIZED_MECHANISMS, Cause, cause_of
from runner.explore.finding import BACKEND_FAILURES
from runner.explore.generated import GeneratedModel, write_suite
from runner.explore.space import ExploredModel
from runner.history import CaseResult
from runner.localize import LOCALIZED_VERDICTS, plain_attribute
from runner.matrix import Case, expand_suite, layout_sequences
from runner.pipeline import execute
from runner.repro.command import ReproOptions, repro_descriptor
from runner.repro.make import make_bundle
from runner.selection import Selection, plan_run
from runner.step import Oracle, Step, Stepped, diagnose
from runner.verdicts import FAILING_OUTCOMES


@dataclass(frozen=True)
class CasesRun:
    """What an example's cases gave: every case's step, or why the example is discarded."""

    stepped: tuple[Stepped, ...] = ()
    discarded: str = ""  # why it is no finding either way
    lacking: tuple[str, str] | None = None  # (op, why): an op the target does not run
    divergent: dict[str, Any] | None = None  # the first failing case's first divergent node

    @property
    def failing(self) -> Stepped | None:
        """The first case that did not pass."""
        return next((s for s in self.stepped if s.judgement.verdict != "pass"), None)


def run_cases(
    explored: ExploredModel, backend: Backend, oracle: Oracle, options: BackendOptions
) -> CasesRun:
    """`explored`'s cases stepped in matrix order (all of them: a finding says what each
    gives), the first failing one localized."""
    step = Step(oracle, options)
    stepped: list[Stepped] = []
    cases = [
        dataclasses.replace(c, inject=c.inject | options.inject)
        for c in expand_suite(explored.suite)
    ]
    for sequence in layout_sequences(cases):
        for done in step.sequence(sequence, backend):
            stepped.append(done)
            why = _discard(done)
            if why:
                return CasesRun(discarded=why, lacking=_lacking(done))
    ran = CasesRun(tuple(stepped))
    failing = ran.failing
    if failing is None or not failing.judgement.verdicts & LOCALIZED_VERDICTS:
        return ran
    earlier = [(s.case, s.workload) for s in stepped[: stepped.index(failing)] if s.case.capture]
    judgement, workload = failing.judgement, failing.workload
    divergent = diagnose(backend, failing.case, workload, judgement.verdicts, earlier)
    return dataclasses.replace(ran, divergent=divergent)


def _discard(stepped: Stepped) -> str:
    if stepped.no_reference:
        return stepped.no_reference
    for outputs in stepped.references.values():
        for name, value in outputs.items():
            if not np.isfinite(np.asarray(value, dtype=np.float64)).all():
                return f"onnxruntime CPU's {name!r} holds NaN or infinity"
    if stepped.run.status == "unsupported-op":
        return stepped.run.message
    return ""


def _lacking(stepped: Stepped) -> tuple[str, str] | None:
    """The op the backend said it lacks, if it named one."""
    op = stepped.run.details.get("op") if stepped.run.status == "unsupported-op" else None
    return (op, stepped.run.message) if op else None


@dataclass(frozen=True)
class ModelFailure:
    """A drawn model one of whose cases did not pass."""

    explored: ExploredModel
    stepped: Stepped  # the failing case's step
    cases: tuple[Stepped, ...]  # every case of the example, in matrix order
    divergent: dict[str, Any] | None = None  # its first divergent node, where one was found

    @property
    def generated(self) -> GeneratedModel:
        return self.explored.generated

    @property
    def result(self) -> CaseResult:
        return self.stepped.result("explore")

    @property
    def case(self) -> Case:
        return self.stepped.case

    @property
    def mode(self) -> str:
        """Its failing case's mode (eager, capture, ...)."""
        return self.case.id.rpartition("/")[2]

    @property
    def cause(self) -> Cause | None:
        """Its root cause; where no node was found, its shrunk model's ops stand for the
        culprit."""
        return cause_of(self.result.verdict, self.divergent, "+".join(self.ops))

    @property
    def kind(self) -> tuple[str, str, str]:
        """What tells it apart while shrinking: its cause (a stale copy beside a bystander is
        the lone copy's bug, so the bystander shrinks away), and for a backend's own failure
        its message, numbers left out."""
        text = ""
        if self.result.verdict in BACKEND_FAILURES:
            text = re.sub(r"\d+", "N", self.result.message)
        return str(self.cause), "", text

    @property
    def size(self) -> int:
        return self.generated.nodes

    @property
    def unit(self) -> str:
        return "nodes"

    @property
    def ops(self) -> tuple[str, ...]:
        """The distinct ops of its model, sorted."""
        return tuple(sorted(set(self.generated.ops)))

    @property
    def signature(self) -> tuple:
        """What dedup compares: the kind."""
        return self.kind

    @property
    def refused(self) -> bool:
        """Whether the backend refused it (to capture, or to run a node on its GPU): what a
        build does not do, no bug."""
        cause = self.cause
        return cause is not None and cause.mechanism == "refusal"

    @property
    def nodes(self) -> tuple[str, ...]:
        """Its nodes as a refusal lists them: op, attributes and element types
        (``Relu() float32 -> float32``), in graph order."""
        model = onnx.shape_inference.infer_shapes(onnx.load_from_string(self.generated.model))
        graph = model.graph
        types = {v.name: v.type.tensor_type.elem_type for v in graph.value_info}
        types.update({v.name: v.type.tensor_type.elem_type for v in graph.input})
        types.update({v.name: v.type.tensor_type.elem_type for v in graph.output})
        types.update({t.name: t.data_type for t in graph.initializer})

        def typed(names) -> str:
            return ", ".join(
                onnx.helper.tensor_dtype_to_np_dtype(types[n]).name if n in types else "?"
                for n in names
                if n
            )

        described = []
        for node in graph.node:
            attributes = ", ".join(
                f"{a.name}={plain_attribute(onnx.helper.get_attribute_value(a))}"
                for a in node.attribute
            )
            described.append(
                f"{node.op_type}({attributes}) {typed(node.input)} -> {typed(node.output)}"
            )
        return tuple(described)


def write_model_finding(
    failure: ModelFailure,
    out: Path,
    reason: str,
    header: Callable[[Path], str],
) -> Path:
    """``out/<verdict>-<hash>.yaml`` and its model file: a suite of the model on its target,
    expecting what each case that did not pass gave. `header` says how to reproduce it."""
    verdict = failure.result.verdict
    digest = hashlib.sha256(repr((verdict, failure.generated.digest)).encode()).hexdigest()
    name = f"{verdict}-{digest[:10]}"
    cause = failure.cause
    rules = [
        {
            "match": {"id": f"*/{_layout_and_mode(s.case)}"},
            "expect": s.judgement.verdict,
            "reason": f"{reason}: {s.judgement.message}",
            # the localized cause, which ``run`` checks, of the case it was localized on
            **({"cause": str(cause)} if s is failure.stepped and _declarable(cause) else {}),
        }
        for s in failure.cases
        if s.judgement.verdict != "pass"
    ]
    path = out / f"{name}.yaml"
    written = write_suite(
        failure.generated,
        out,
        failure.case.backend.entry(),
        extra={"cases": rules},
        header=header(path),
        name=name,
    )
    return written.path


def _declarable(cause: Cause | None) -> bool:
    """Whether `run` can check `cause` on a rule: one localization names."""
    return cause is not None and cause.localized and cause.mechanism in LOCALIZED_MECHANISMS


def _layout_and_mode(case: Case) -> str:
    """The end of a case's id that tells it from the model's other cases."""
    *_, layout, _backend, mode = case.id.split("/")
    return f"{layout}/*/{mode}"


def reproduce(path: Path, options: BackendOptions, say: Callable[[str], None]) -> str:
    """Runs the finding's suite file as ``run`` does, on a backend of its own, and bundles its
    first unexpected result with ``repro`` into the folder beside it (its faults carried, as
    injected); what it says of the run. Raises nothing for a finding that does not reproduce:
    it says so."""
    with tempfile.TemporaryDirectory(prefix="explore-finding-") as reports:
        summary = execute(plan_run(Selection((path,))), Path(reports), options)
        failing = [r for r in summary.results if r.verdict not in ("pass", "skipped")]
        unexpected = [r for r in summary.results if r.outcome in FAILING_OUTCOMES]
        if unexpected:
            return (
                f"did not reproduce under run: {unexpected[0].case_id} gave "
                f"{unexpected[0].verdict}: {unexpected[0].message}"
            )
        if not failing:
            return "reproduced under run (every case as expected); nothing to bundle"
        bundled = failing[0]
        node = bundled.divergent_node or {}
        node = f"{node['name']} ({node['op_type']})" if "name" in node else None
        where = f", first divergent node {node}" if node else ""
        reproduced = f"reproduced under run ({len(failing)} failing case(s), as expected){where}"
        if repro_descriptor(bundled) is None:
            return f"{reproduced}; {bundled.backend} writes no repro bundles"
        repro = ReproOptions(out=path.with_suffix(""), with_fault=bool(options.inject), force=True)
        made = make_bundle(Path(reports), bundled.result_id, repro, lambda text: None)
        say(f"bundled {bundled.case_id} ({made.verdict}{where}) in {made.folder}")
        return reproduced
