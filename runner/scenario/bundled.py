"""A repro bundle's verdict, from the suite's own judge (``runner.judge``).

Both kinds of bundle judge here, so a bundle says what the suite would: ``repro.py`` (wgpu)
calls `judge_steps` with numpy's measure; the ort-web page loads this module and the judge into
Pyodide and calls `judge_page`, its tensors staying JavaScript typed arrays that the page's
script compares (`ScriptMeasure`). So, like the judge, this imports only the standard library and
the modules in `PAGE_MODULES` (tests/test_architecture.py holds both to it).

What the bundle's runner reports per step (``repro.json``'s ``steps``, in order)::

    {"status": "ok", "runs": [outputs, ...], "replays": {"bindGroups": n, "uniformWrites": m}}
    {"status": "error", "message": "..."}

A scenario's bundle (``repro.json``'s ``scenario``) is judged by the suite's scenario judging
(``runner.scenario.judging``, `judge_scenario`): ``repro.py`` hands it the ``ScenarioRun`` the
suite's wgpu scenario runner returns, the page what ``scenario.mjs`` reports::

    {"status": "ok", "message": "", "steps": [{"outputs": outputs, "counts": {...}}, {}, ...]}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.judge import CaseFacts, Evidence, Judgement, ReplayCounts, RunFacts, Twin, judge
from runner.measure import Comparison, Measure, Outputs, Tolerance
from runner.scenario.judging import ScenarioJudged
from runner.scenario.judging import judge_steps as judge_scenario_steps
from runner.scenario.values import ScenarioRun, StepRun
from runner.schedule import Feed, Variant

# The files the page loads into Pyodide: this module and every runner module it imports.
PAGE_MODULES = (
    "runner/__init__.py",
    "runner/measure.py",
    "runner/schedule.py",
    "runner/verdicts.py",
    "runner/judge.py",
    "runner/scenario/__init__.py",
    "runner/scenario/values.py",
    "runner/scenario/judging.py",
    "runner/scenario/bundled.py",
)

MAIN = "main"  # the workload of the case (or scenario) itself

# onnxruntime CPU's outputs for one input variant of one of the bundle's workloads:
# (workload name, variant index) -> outputs
References = Callable[[str, int], Outputs]


def _run(result: Mapping[str, Any]) -> RunFacts:
    """One step's result, as the bundle's runner reports it."""
    replays = result.get("replays") or {}
    return RunFacts(
        status=result["status"],
        message=result.get("message", ""),
        runs=tuple(result.get("runs") or ()),
        trace=ReplayCounts(replays.get("bindGroups", 0), replays.get("uniformWrites", 0)),
    )


def bundle_evidence(
    manifest: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    references: References,
    measure: Measure,
) -> Evidence:
    """The judged step's evidence, as the pipeline gives a case's: its eager twin's runs, the
    references for every input variant, and those of the earlier layouts captured before it."""
    judged = manifest["judge"]
    step = manifest["steps"][judged["step"]]
    name = step["workload"]
    workload = manifest["workloads"][name]
    variants = [(v["graph"], v["draw"]) for v in workload["variants"]]
    feeds = tuple(Feed(graph, variants[index]) for graph, index in workload["schedule"])
    earlier = [
        s["workload"]
        for s in manifest["steps"][: judged["step"]]
        if s["mode"] == "capture" and s["workload"] != name
    ]
    eager = judged.get("eager")
    return Evidence(
        CaseFacts(
            capture=step["mode"] == "capture",
            graphs=step["graphs"],
            tolerance=Tolerance(**manifest["tolerance"]),
            revisit=step.get("reuse") is not None,
        ),
        _run(results[judged["step"]]),
        _references(manifest, name, references),
        feeds=feeds,
        eager=None if eager is None else Twin(_run(results[eager]), feeds),
        earlier=tuple(
            (manifest["workloads"][other]["layout"], _references(manifest, other, references))
            for other in dict.fromkeys(earlier)
        ),
        measure=measure,
    )


def _references(
    manifest: Mapping[str, Any], name: str, references: References
) -> dict[Variant, Outputs]:
    variants = manifest["workloads"][name]["variants"]
    return {(v["graph"], v["draw"]): references(name, i) for i, v in enumerate(variants)}


def judge_steps(
    manifest: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    references: References,
    measure: Measure,
) -> tuple[Judgement, list[str]]:
    """The judgement of the bundle's judged step, and what to print: what each run measured,
    every finding, and last ``PASS`` or ``FAIL: <headline>``."""
    evidence = bundle_evidence(manifest, results, references, measure)
    judgement = judge(evidence)
    lines = [*_measured(evidence), *(f"{f.verdict}: {f.message}" for f in judgement.findings)]
    lines.append("PASS" if judgement.verdict == "pass" else f"FAIL: {judgement.verdict}")
    return judgement, lines


@dataclass(frozen=True)
class BundledScenario:
    """A scenario bundle's ``repro.json``, read: what its runner replays and the judge reads."""

    judged: ScenarioJudged
    sessions: Mapping[str, Mapping[str, Any]]  # name -> capture, outputs, location, graphs
    feeds: tuple[Feed | None, ...]  # per step: a run's graph and inputs
    variants: tuple[Variant, ...]  # the main workload's input variants, in its files' order

    @classmethod
    def of(cls, manifest: Mapping[str, Any]) -> BundledScenario:
        scenario = manifest["scenario"]
        variants = tuple((v["graph"], v["draw"]) for v in manifest["workloads"][MAIN]["variants"])
        return cls(
            ScenarioJudged.of(scenario, Tolerance(**manifest["tolerance"])),
            scenario["sessions"],
            tuple(None if f is None else Feed(f[0], variants[f[1]]) for f in scenario["feeds"]),
            variants,
        )


def judge_scenario(
    manifest: Mapping[str, Any], run: ScenarioRun, references: References, measure: Measure
) -> tuple[Judgement, list[str]]:
    """The scenario judged as the suite judges it (``runner.scenario.judging``), and what to
    print: the failing step with the judge's words, and last ``PASS`` or ``FAIL: <headline>``."""
    bundled = BundledScenario.of(manifest)
    cpu = {variant: references(MAIN, i) for i, variant in enumerate(bundled.variants)}
    judged = judge_scenario_steps(bundled.judged, run, bundled.feeds, cpu, measure)
    judgement = judged.judgement
    if not judged.failing:
        return judgement, ["PASS"]
    return judgement, [judgement.message, f"FAIL: {judgement.verdict}"]


def _measured(ev: Evidence) -> list[str]:
    """Each output of the last run against onnxruntime CPU; under capture, each run against
    what it must give."""
    if ev.run.status != "ok":
        return []
    lines = [
        f"output {name!r}: {ev.case.mode} (run {len(ev.run.runs)}) against onnxruntime CPU: "
        f"{c.describe()}"
        for name, c in ev.vs_reference.items()
    ]
    if ev.case.capture:
        for index, (outputs, feed) in enumerate(zip(ev.run.runs, ev.run_feeds, strict=True)):
            expected, what = ev.expected_for(feed)
            if expected is None:
                continue
            graph = f" (graph {feed.graph})" if ev.case.graphs > 1 else ""
            comparisons = ev.compare(outputs, expected).values()
            worst = max(comparisons, key=lambda c: c.max_abs, default=None)
            if worst is not None:
                lines.append(f"run {index + 1}{graph}: capture against {what}: {worst.describe()}")
    return lines


class ScriptMeasure:
    """The page's measure: its script compares the tensors, which Python holds as indices into
    the script's table (``repro.mjs``: ``compareOutputs``, ``firstDifference``); comparisons
    come back as JSON, where null stands for an infinite error."""

    def __init__(self, compare: Callable[..., str], first_difference: Callable[[int, int], Any]):
        self._compare = compare
        self._first_difference = first_difference

    def compare(
        self,
        actual: Outputs,
        expected: Outputs,
        tolerance: Tolerance,
        exact_integers: bool = False,
        slack: Outputs | None = None,  # none reaches the page: a scenario is judged without
    ) -> dict[str, Comparison]:
        measured = json.loads(
            self._compare(actual, expected, tolerance.abs, tolerance.rel, exact_integers)
        )
        return {name: _comparison(c) for name, c in measured.items()}

    def first_difference(self, a: Outputs, b: Outputs) -> str | None:
        return self._first_difference(a, b) or None


def _comparison(measured: Mapping[str, Any]) -> Comparison:
    def error(value: float | None) -> float:
        return float("inf") if value is None else float(value)

    shapes = measured.get("shapes")
    return Comparison(
        max_abs=error(measured["maxAbs"]),
        max_rel=error(measured["maxRel"]),
        mismatched=measured["mismatched"],
        total=measured["total"],
        shapes=None if shapes is None else (tuple(shapes[0]), tuple(shapes[1])),
        non_finite=measured["nonFinite"],
    )


def judge_page(
    manifest: str,
    results: str,
    references: str,
    compare: Callable[..., str],
    first_difference: Callable[[int, int], Any],
) -> str:
    """The page's entry (JSON in, JSON out): `results` as the page's runner reports them, with
    each run's outputs an index into the script's tensor table, and `references` the indices of
    onnxruntime CPU's outputs per workload and variant."""
    table = json.loads(references)
    read, reported = json.loads(manifest), json.loads(results)
    measure = ScriptMeasure(compare, first_difference)
    if "scenario" in read:  # the page's scenario report (scenario.mjs), each run's outputs
        run = ScenarioRun(  # one index into the table
            reported["status"],
            reported["message"],
            tuple(
                StepRun.counted(step["outputs"], step["counts"]) if "outputs" in step else StepRun()
                for step in reported["steps"]
            ),
        )
        judgement, lines = judge_scenario(read, run, lambda n, v: table[n][v], measure)
    else:
        judgement, lines = judge_steps(read, reported, lambda n, v: table[n][v], measure)
    return json.dumps(
        {
            "verdict": judgement.verdict,
            "verdicts": sorted(judgement.verdicts - {"pass"}),
            "message": judgement.message,
            "lines": lines,
        }
    )
