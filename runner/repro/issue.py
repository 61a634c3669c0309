"""ISSUE.md: the bundle as a bug report, ready to paste upstream.

Title, what happens, versions, steps, expected against actual with the numbers, the first
divergent node, what was cut away and the suite's YAML case. A failure that an injected fault
caused says so at the top and in the title: it is a canary of the suite, not a bug to file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runner.backends.base import ReproRunner
from runner.compare import compare
from runner.history import CaseResult
from runner.matrix import Case
from runner.newcase import case_snippet
from runner.schedule import BASE, Feed
from runner.suite.spec import Tolerance
from runner.verdicts import SYMPTOMS, VERDICTS


@dataclass(frozen=True)
class Comparison:
    output: str
    what: str  # "capture against eager", ...
    max_abs: float
    mismatched: int
    total: int


@dataclass(frozen=True)
class Report:
    """Everything ISSUE.md says, gathered by the repro step."""

    result: CaseResult
    runner: ReproRunner
    faults: Mapping[str, str]  # injected fault -> what it does
    platform: str  # the OS the run recorded
    onnxruntime: str  # the CPU reference's version
    verdict: str  # what the kept rerun gave
    message: str  # its judge's words
    reproduced: bool
    comparisons: tuple[Comparison, ...]
    tolerance: Tolerance
    sessions: tuple[str, ...]  # "layout base, capture: sequence/1-base/model.onnx", in order
    runs: int
    feeding: str  # which inputs each run gets, in which buffers, on which graph
    model: str  # what model.onnx is, in words
    notes: tuple[str, ...]
    command: str  # how the bundle was made
    # A scenario's bundle: its entry as YAML (then `sessions` are its steps, and there is no
    # comparison table); "": a case's
    scenario: str = ""


def comparisons(
    capture: bool,
    actual: Mapping[str, np.ndarray],
    eager: Mapping[str, np.ndarray] | None,
    reference: Mapping[str, np.ndarray],
    tolerance: Tolerance,
) -> tuple[Comparison, ...]:
    """The numbers of 'expected against actual': per output, what the judge compared."""
    mode = "capture" if capture else "eager"
    pairs = [(f"{mode} against onnxruntime CPU", actual, reference)]
    if capture and eager:
        pairs.insert(0, ("capture against eager", actual, eager))
        pairs.append(("eager against onnxruntime CPU", eager, reference))
    rows = []
    for name in reference:
        for what, got, want in pairs:
            if name in got and name in want:
                c = compare(got[name], want[name], tolerance)
                rows.append(Comparison(name, what, c.max_abs, c.mismatched, c.total))
    return tuple(rows)


def node_label(name: str, op_type: str, output: str) -> str:
    """How a node is named to a reader: its name, or, for a node without one (many exporters
    leave them out), its op type and the output it produces."""
    return f"`{name}` ({op_type})" if name else f"the {op_type} node producing `{output}`"


def title(report: Report) -> str:
    verdict = report.result.verdict
    symptom = SYMPTOMS.get(verdict, verdict)
    node = report.result.divergent_node or {}
    where = f" at {node['op_type']}" if node.get("op_type") else ""
    injected = f"[injected fault {', '.join(report.faults)}] " if report.faults else ""
    return f"{injected}[WebGPU] {symptom}{where} in {report.runner.product}"


def issue_markdown(report: Report) -> str:
    result = report.result
    lines = [f"# {title(report)}", ""]
    if report.faults:
        lines += [
            "> **Injected fault, not a bug to report.** This failure comes from a fault that "
            "webgpu-capture-regress injects on purpose, a canary proving that its detectors "
            "still see this kind of bug:",
            *[f"> - `{name}`: {what}" for name, what in report.faults.items()],
            "",
        ]
    lines += ["## What happens", "", _what_happens(report), ""]
    lines += ["## Versions", "", "| component | version |", "| --- | --- |"]
    rows = [*report.runner.versions]
    if report.platform:
        rows.append(("OS", report.platform))
    rows.append(("onnxruntime (the CPU reference)", report.onnxruntime))
    lines += [f"| {what} | {_cell(version)} |" for what, version in rows]
    lines += ["", "## Steps to reproduce", ""]
    lines += [f"{i}. {step}" for i, step in enumerate(report.runner.steps, 1)]
    if report.runner.uses_project:
        lines += [
            "",
            "`repro.py` imports webgpu-capture-regress (its WGSL executor, "
            "`runner.backends.wgpu`): run it where that project is installed. Everything else "
            "in this folder stands alone.",
        ]
    if report.scenario:
        return "\n".join([*lines, *_scenario_part(report)])
    lines += [
        "",
        f"Sessions, in the order the suite created them, each run {report.runs} times:",
        "",
    ]
    lines += [f"{i}. {session}" for i, session in enumerate(report.sessions, 1)]
    lines += ["", report.feeding]
    lines += ["", "## Expected and actual", "", _expected(report), ""]
    lines += ["| output | compared | max abs error | elements outside tolerance |"]
    lines += ["| --- | --- | --- | --- |"]
    lines += [
        f"| `{c.output}` | {c.what} | {c.max_abs:.3g} | {c.mismatched}/{c.total} |"
        for c in report.comparisons
    ]
    node = result.divergent_node
    if node and node.get("op_type"):
        lines += [
            "",
            "## First divergent node",
            "",
            f"{node_label(node.get('name', ''), node['op_type'], node.get('output', ''))}: in "
            "the suite's localization, "
            + _located(node)
            + f" (`{node.get('output')}`) left {node.get('against', 'eager')}: "
            f"{_divergence(node)}.",
            *_culprit(node),
        ]
    lines += ["", "## The model", "", report.model]
    lines += [f"\n{note[0].upper()}{note[1:]}." for note in report.notes]
    lines += [
        "",
        "## The suite's case",
        "",
        f"Result `{result.result_id}` of run `{result.run_id}`, case "
        f"`{result.case_id}`; the entry that pins it in `{suite_file(result.suite_path)}`:",
        "",
        "```yaml",
        case_snippet(result).replace(result.suite_path, suite_file(result.suite_path)).rstrip("\n"),
        "```",
        "",
        f"Made with `{report.command}` (webgpu-capture-regress).",
        "",
    ]
    return "\n".join(lines)


def _scenario_part(report: Report) -> list[str]:
    """A scenario's steps, model and YAML, in place of a case's sessions and numbers."""
    result = report.result
    lines = [
        "",
        "The scenario's steps, in order; every run is judged against onnxruntime CPU for its "
        "own inputs (`inputs/` and `expected/cpu/` for the first, `inputs/G-D/` and "
        "`expected/cpu/G-D/` for graph G's draw D), and the first step that fails is the "
        "scenario's:",
        "",
        *[f"{i}. `{step}`" for i, step in enumerate(report.sessions, 1)],
        "",
        "## The model",
        "",
        report.model,
        *[f"\n{note[0].upper()}{note[1:]}." for note in report.notes],
        "",
        "## The suite's scenario",
        "",
        f"Result `{result.result_id}` of run `{result.run_id}`, `{result.case_id}`, from "
        f"`{suite_file(result.suite_path)}`:",
        "",
        "```yaml",
        "scenarios:",
        *[f"  {line}" for line in report.scenario.rstrip("\n").splitlines()],
        "```",
        "",
        f"Made with `{report.command}` (webgpu-capture-regress).",
        "",
    ]
    return lines


def suite_file(path: str) -> str:
    """The suite's file as a reader upstream may name it: relative to the folder the command ran
    in (a repository's `suites/...`), else its name alone; never the finder's machine paths."""
    file = Path(path)
    return str(file.relative_to(Path.cwd())) if file.is_relative_to(Path.cwd()) else file.name


def _what_happens(report: Report) -> str:
    result = report.result
    verdict = result.verdict
    text = f"**{verdict}**: {VERDICTS.get(verdict, verdict)}."
    if result.attribution:
        text += f" Where: {result.attribution}."
    text += f"\n\nIn the suite's run: {result.message or verdict}."
    if report.reproduced:
        text += f"\n\nRerun on this folder's model, the suite saw the same: {report.message}."
    else:
        text += (
            f"\n\n**The rerun did not fail the same way** (it gave {report.verdict}"
            + (f": {report.message}" if report.message else "")
            + "); the failure may be intermittent or depend on what else ran before."
        )
    return text


def _expected(report: Report) -> str:
    tolerance = report.tolerance
    return (
        f"Expected: every output within tolerance (abs {tolerance.abs:g}, or a same-sign ratio "
        f"within 1 + {tolerance.rel:g}, as ORT-web's own op tests compare) of eager and of "
        "onnxruntime CPU for the same inputs (`expected/eager/`, `expected/cpu/`). Actual "
        "(`actual/`: the last run), in the suite's rerun:"
    )


def _divergence(node: Mapping[str, Any]) -> str:
    max_abs = node.get("max_abs")
    error = "non-finite" if max_abs is None else f"{max_abs:.3g}"
    return (
        f"{node.get('mismatched')}/{node.get('total')} elements outside tolerance, max abs {error}"
    )


def _located(node: Mapping[str, Any]) -> str:
    """How localization chose the node (``runner.localize``)."""
    if node.get("seen_in"):
        return (
            "the first node wrong when run alone on onnxruntime CPU's inputs; its wrong values "
            f"showed first in {node['seen_in']}'s output. Alone, its output"
        )
    alone = {
        "fails": " (wrong alone too, on onnxruntime CPU's inputs)",
        "passes": " (right alone on onnxruntime CPU's inputs, as every other node is: wrong "
        "only beside them)",
    }.get(node.get("alone", ""), "")
    return f"the first node in topological order whose output{alone}"


def _culprit(node: Mapping[str, Any]) -> list[str]:
    """The culprit inline, for a reader upstream: its attributes, inputs and worst elements
    (what localization recorded; nothing for a result stored before it did)."""
    lines = []
    if "copy" in node:
        what = "an earlier value unchanged (a view or a copy)" if node["copy"] else "new values"
        lines += ["", f"Its output holds {what} on onnxruntime CPU."]
    attributes = node.get("attributes")
    if attributes is not None:
        spelt = ", ".join(f"`{k}={v}`" for k, v in attributes.items()) or "none"
        lines += ["", f"- attributes: {spelt}"]
    for value in node.get("inputs", ()):
        if "dtype" not in value:
            lines.append(f"- input `{value['name']}`")
            continue
        constant = value.get("constant")
        held = f", the constant {constant}" if isinstance(constant, list) else ""
        held = held or (", a constant" if constant else "")
        lines.append(f"- input `{value['name']}`: {value['dtype']} {value['shape']}{held}")
    elements = node.get("elements")
    if elements:
        lines += ["", "| element | expected | actual |", "| --- | --- | --- |"]
        lines += [f"| {e['index']} | {e['expected']:.6g} | {e['actual']:.6g} |" for e in elements]
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def describe_sessions(names: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """Each step as 'name: model file', the judged one marked."""
    last = len(names) - 1
    return tuple(
        f"{name}: `{model}`" + (" (judged)" if i == last else "")
        for i, (name, model) in enumerate(names)
    )


def describe_feeding(case: Case, feeds: Sequence[Feed]) -> str:
    """Which inputs each run gets and how: the input sequence, the buffer modes, the graphs."""
    runs = []
    for index, feed in enumerate(feeds, 1):
        where = "`inputs/`" if feed.variant == BASE else "`inputs/{}-{}/`".format(*feed.variant)
        graph = f" on graph {feed.graph} (`gpu_graph_id` {feed.graph})" if case.graphs > 1 else ""
        runs.append(f"run {index}{graph} {where}")
    text = f"Every session's runs get new inputs, as applications feed them: {'; '.join(runs)}."
    if case.capture:
        inputs = {
            "rewrite": "written into the same GPU buffers every run",
            "fresh": "each run in a new GPU buffer (`Tensor.fromGpuBuffer` of a fresh buffer)",
        }[case.buffers.inputs]
        outputs = {
            "none": "outputs the runtime allocates",
            "rewrite": "pre-allocated output buffers passed as fetches, the same every run",
            "fresh": "a new pre-allocated output buffer passed as fetches every run",
        }[case.buffers.outputs]
        text += f" The judged capture session takes its inputs {inputs}, with {outputs}."
        if case.buffers.allocator == "onnxruntime" and case.backend.name == "ort-web":
            text += (
                " Those GPU buffers are onnxruntime-web's own: outputs of a run of another "
                "session (a Relu over zeros), kept while the judged session lives."
            )
    return text
