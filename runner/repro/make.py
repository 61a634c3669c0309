"""``repro``: from a failing result to a self-contained folder that reproduces it upstream.

The result's case is rebuilt as the run built it (``subject``); the model is cut down to the
smallest part that still fails the same way (``cut``: from the first divergent node, widening
until a rerun on the same backend, build, version and mode gives the result's verdict, else
the full model, said so); the kept rerun's outputs, the models and inputs are written with a
backend-specific runner (a page for ort-web, a script for wgpu) and ISSUE.md (``bundle``,
``issue``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions, ReproRequest, ReproRunner, resolve
from runner.history import CaseResult
from runner.history.lookup import find_result
from runner.oracle import onnxruntime_version
from runner.repro import bundle, issue
from runner.repro.command import NOTHING_TO_REPRODUCE, ReproOptions, backend_name
from runner.repro.cut import Anchor, Cut, anchor, cut_workload, op_counts, plan_cuts
from runner.repro.helper_code import helper_code
from runner.repro.scenario import ScenarioBundle, bundle_scenario, is_scenario
from runner.repro.subject import Subject, check_reproducible, load_subject
from runner.repro.verify import Rerun, eager_values, rerun
from runner.workload import Workload


@dataclass(frozen=True)
class Candidate:
    cut: Cut | None  # None: the full model
    workload: Workload
    earlier: tuple[Workload, ...]  # the earlier captures' workloads, cut the same way

    def label(self, full_nodes: int) -> str:
        if self.cut is None:
            return f"the full model ({full_nodes} nodes)"
        nodes = f"{self.cut.nodes} of {full_nodes} nodes"
        return f"the cut {self.cut.depth} level(s) above the anchor ({nodes})"


@dataclass(frozen=True)
class Attempt:
    candidate: Candidate
    rerun: Rerun
    kept: bool  # it failed with the result's verdict


@dataclass(frozen=True)
class Bundle:
    folder: Path
    subject: Subject
    anchor: Anchor | None
    full_nodes: int
    attempts: tuple[Attempt, ...]
    notes: tuple[str, ...]  # what the reader should know (an unchecked model, no cut)
    runner: ReproRunner | None = None  # what the backend wrote; None until written
    files: tuple[str, ...] = ()  # every file written, relative to the folder

    @property
    def chosen(self) -> Attempt:
        """The attempt whose model the bundle holds: the first kept, else the full model's."""
        return next((a for a in self.attempts if a.kept), self.attempts[-1])

    @property
    def reproduced(self) -> bool:
        return self.chosen.kept

    @property
    def result(self) -> CaseResult:
        return self.subject.result

    @property
    def verdict(self) -> str:
        """What the rerun of the bundled model gave."""
        return self.chosen.rerun.judgement.verdict

    @property
    def model_line(self) -> str:
        cut = self.chosen.candidate.cut
        if cut is None:
            return f"model.onnx: the full model ({self.full_nodes} nodes)"
        return (
            f"model.onnx: {cut.nodes} of {self.full_nodes} nodes, cut at {self.anchor.node} "
            f"({self.anchor.op_type}) with {cut.depth} producer level(s) above it"
        )


def search(
    candidates: Sequence[Candidate],
    attempt: Callable[[Candidate], Rerun],
    verdict: str,
    full_nodes: int,
    say: Callable[[str], None],
) -> tuple[Attempt, ...]:
    """Reruns the candidates in order until one fails with `verdict` (the full model last)."""
    attempts = []
    for candidate in candidates:
        result = attempt(candidate)
        kept = result.judgement.verdict == verdict
        attempts.append(Attempt(candidate, result, kept))
        say(
            f"{candidate.label(full_nodes)}: {result.judgement.verdict}"
            + (" (kept)" if kept else "")
        )
        if kept:
            break
    return tuple(attempts)


def make_bundle(
    reports: Path, result_id: str, options: ReproOptions, say: Callable[[str], None] = print
) -> Bundle | ScenarioBundle:
    """Raises InvalidInput for a result there is nothing to bundle for, a changed model or an
    occupied folder; EnvironmentUnusable when the backend cannot run here."""
    history = reports / "history.sqlite"
    result = find_result(history, result_id)
    folder = options.out or Path(f"repro-{result.result_id}")
    bundle.check_folder(folder, options.force)
    check_reproducible(result, force=options.force, with_fault=options.with_fault)
    if is_scenario(result):
        command = _command(result.result_id, options)
        return bundle_scenario(history, result, folder, options, command, say)
    subject = load_subject(history, result, options.with_fault)
    backend_options = BackendOptions(
        runs=subject.runs, chromium=options.chromium, adapter=options.adapter
    )
    full_nodes = len(onnx.load_from_string(subject.workload.model).graph.node)
    candidates, where, notes = _candidates(subject, options, backend_options, say)
    attempts = search(
        candidates,
        lambda c: rerun(subject, c.workload, c.earlier, backend_options),
        result.verdict,
        full_nodes,
        say,
    )
    made = Bundle(folder, subject, where, full_nodes, attempts, (*subject.notes, *notes))
    runner, files = _write(made, options)
    return dataclasses.replace(made, runner=runner, files=files)


def _candidates(
    subject: Subject,
    options: ReproOptions,
    backend_options: BackendOptions,
    say: Callable[[str], None],
) -> tuple[list[Candidate], Anchor | None, list[str]]:
    """The models to try, smallest first, the full model last; and what the reader should know."""
    full = Candidate(None, subject.workload, tuple(w for _, w in subject.earlier))
    if options.full_model:
        return [full], None, ["--full-model: the model was not cut"]
    if subject.result.verdict in NOTHING_TO_REPRODUCE:
        return [full], None, ["the result passed: there is no failure to cut towards"]
    model = onnx.load_from_string(subject.workload.model)
    divergent = subject.result.divergent_node
    where = anchor(model, divergent if divergent and "error" not in divergent else None)
    cuts = plan_cuts(model, where) if where else []
    if not cuts:
        return [full], where, ["the model has no smaller part to cut"]
    at = issue.node_label(where.node, where.op_type, where.output)
    say(f"cutting at {at}, {where.why}: {len(cuts)} cut(s) to try")
    try:
        values = eager_values(subject, sorted({n for c in cuts for n in c.inputs}), backend_options)
    except ValueError as failed:
        return [full], where, [f"the model was not cut: {failed}"]
    candidates, notes = [], []
    for cut in cuts:
        try:
            earlier = tuple(
                cut_workload(w, cut, v)
                for (_, w), v in zip(subject.earlier, values[:-1], strict=True)
            )
            candidates.append(
                Candidate(cut, cut_workload(subject.workload, cut, values[-1]), earlier)
            )
        except (ValueError, KeyError) as failed:  # an earlier layout's model lacks the tensors
            notes.append(f"the cut {cut.depth} level(s) up could not be made: {failed}")
    return [*candidates, full], where, notes


def _write(made: Bundle, options: ReproOptions) -> tuple[ReproRunner, tuple[str, ...]]:
    """The folder's files, the backend's runner and ISSUE.md; what it wrote."""
    subject, chosen = made.subject, made.chosen
    folder = made.folder
    if options.force:
        bundle.clear_previous(folder)
    folder.mkdir(parents=True, exist_ok=True)
    writer = bundle.Writer(folder)
    candidate, result = chosen.candidate, chosen.rerun
    earlier = [
        (case, workload, reference)
        for (case, _), workload, reference in zip(
            subject.earlier, candidate.earlier, result.earlier_references, strict=True
        )
    ]
    workloads, earlier_names = bundle.workload_entries(
        writer, subject.case, candidate.workload, result.references, earlier, subject.runs
    )
    steps, judged = bundle.steps(
        subject.case, subject.eager, [c for c, _ in subject.earlier], earlier_names
    )
    recorded = {}
    if result.eager is not None and result.eager.status == "ok":
        recorded["eager"] = writer.tensors("expected/eager", result.eager.outputs)
    if result.run.status == "ok":
        recorded["actual"] = writer.tensors("actual", result.run.outputs)
    descriptor = REGISTRY[backend_name(subject.result)]
    # A rule or --inject may name faults of several backends: this bundle carries its own only.
    faults = frozenset(f for step in steps for f in step["faults"] if f in descriptor.faults)
    request = ReproRequest(
        folder=folder,
        target=subject.case.backend,
        faults=faults,
        local=options.local,
        environment=(subject.environment.get("backends") or {}).get(descriptor.name) or {},
    )
    runner = resolve(descriptor.repro)(request)
    cut = candidate.cut
    content = bundle.manifest(
        subject.result,
        subject.case,
        subject.runs,
        workloads,
        steps,
        judged,
        recorded,
        {"anchor": made.anchor.output, "depth": cut.depth, "inputs": list(cut.inputs)}
        if cut
        else None,
        writer.judge(),
    )
    report = issue.Report(
        result=subject.result,
        runner=runner,
        faults={name: descriptor.faults[name] for name in sorted(faults)},
        platform=str(subject.environment.get("platform") or ""),
        onnxruntime=onnxruntime_version(),
        verdict=result.judgement.verdict,
        message=result.judgement.message,
        reproduced=chosen.kept,
        comparisons=issue.comparisons(
            subject.case.capture,
            result.run.outputs,
            result.eager.outputs if result.eager else None,
            result.references[candidate.workload.feeds(subject.runs)[-1].variant],
            subject.case.tolerance,
        ),
        tolerance=subject.case.tolerance,
        sessions=issue.describe_sessions(
            [(s["name"], workloads[s["workload"]]["model"]) for s in steps]
        ),
        runs=subject.runs,
        feeding=issue.describe_feeding(subject.case, candidate.workload.feeds(subject.runs)),
        model=_model_text(made),
        notes=made.notes,
        command=_command(subject.result.result_id, options),
    )
    writer.bytes("ISSUE.md", issue.issue_markdown(report).encode())
    files = (*writer.files, *runner.files, bundle.MANIFEST)
    bundle.write_manifest(folder, content, files)
    return runner, files


def _model_text(made: Bundle) -> str:
    """What model.onnx is, and the onnx.helper lines that build it where it is small enough."""
    code = helper_code(onnx.load_from_string(made.chosen.candidate.workload.model))
    if code is None:
        return _what_model(made)
    return (
        f"{_what_model(made)}\n\nThe same model in `onnx.helper` (it writes `model.onnx`):\n\n"
        f"```python\n{code}```"
    )


def _what_model(made: Bundle) -> str:
    """What model.onnx is: the cut and what it cut away, or the full model and why."""
    chosen = made.chosen.candidate
    full = made.subject.workload.model
    if chosen.cut is None:
        tried = [a for a in made.attempts if a.candidate.cut is not None]
        verdicts = "; ".join(
            f"{a.candidate.label(made.full_nodes)}: {a.rerun.judgement.verdict}" for a in tried
        )
        why = f"no cut failed the same way ({verdicts})" if tried else "it was not cut"

        ops = _ops(op_counts(full))
        return f"`model.onnx` is the suite's full model ({made.full_nodes} node(s): {ops}): {why}."
    cut = chosen.cut
    kept, whole = op_counts(chosen.workload.model), op_counts(full)
    removed = {op: n - kept.get(op, 0) for op, n in whole.items() if n > kept.get(op, 0)}
    inputs = ", ".join(f"`{name}`" for name in cut.inputs)
    return (
        f"`model.onnx` holds {cut.nodes} node(s) ({_ops(kept)}), cut from the suite's "
        f"{made.full_nodes}-node model at `{made.anchor.node}` ({made.anchor.why}), "
        f"{cut.depth} producer level(s) above it included. Its graph inputs are {inputs}, fed "
        f"with the values the eager run computed for them (`inputs/`); its output is "
        f"`{cut.output}`. Cut away: {made.full_nodes - cut.nodes} nodes ({_ops(removed)})."
    )


def _ops(counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in counts.items()) or "none"


def _command(result_id: str, options: ReproOptions) -> str:
    flags = [
        flag
        for flag, on in (
            ("--full-model", options.full_model),
            ("--with-fault", options.with_fault),
            ("--local", options.local),
        )
        if on
    ]
    return " ".join(["python -m runner repro", result_id, *flags])
