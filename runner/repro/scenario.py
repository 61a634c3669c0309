"""``repro`` for a scenario's result: a folder whose runner replays the scenario's steps and
judges them as the suite does (``runner.scenario.judging``), naming the same failing step.

A scenario is not cut: its sessions all run its one model, and a smaller model would make
another scenario. Its steps rerun on a fresh backend of the same build and version (with the
result's injected faults under ``--with-fault``) through the scenario step the run uses
(``runner.step``); the folder holds that run's model, every run's inputs and
onnxruntime CPU's outputs for them (``bundle.Writer``), ``repro.json`` (its ``scenario``: the
steps, the sessions and which inputs each run gets) and the backend's runner. ``explore``
writes one beside each finding from the run that found it (`write_scenario_bundle`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runner.backends import REGISTRY, open_backend
from runner.backends.base import BackendOptions, ReproRequest, ReproRunner, resolve
from runner.errors import InvalidInput
from runner.history import CaseResult
from runner.matrix import ScenarioTarget
from runner.oracle import ReferenceCache, onnxruntime_version
from runner.repro import bundle, issue
from runner.repro.command import ReproOptions
from runner.repro.subject import check_digest, result_target, run_record
from runner.step import Step, Stepped, judged_scenario
from runner.suite import load_suite
from runner.suite.scenarios import scenario_entry

PREFIX = "scenario="  # a scenario result's case id: scenario=NAME/BACKEND


@dataclass(frozen=True)
class ScenarioBundle:
    folder: Path
    result: CaseResult  # the result bundled
    stepped: Stepped  # the run the folder holds (the rerun, or explore's own)
    notes: tuple[str, ...]
    runner: ReproRunner
    files: tuple[str, ...]
    model_line: str = "model.onnx: the scenario's model, whole (a scenario is not cut)"

    @property
    def verdict(self) -> str:
        return self.stepped.judgement.verdict

    @property
    def reproduced(self) -> bool:
        return self.verdict == self.result.verdict


def is_scenario(result: CaseResult) -> bool:
    return result.case_id.startswith(PREFIX)


def bundle_scenario(
    history: Path,
    result: CaseResult,
    folder: Path,
    options: ReproOptions,
    command: str,
    say: Callable[[str], None],
) -> ScenarioBundle:
    """The result's scenario rerun and written; InvalidInput when the suite no longer has it
    or now builds another model."""
    item = _scenario_target(result)
    faults = frozenset(result.injected) if options.with_fault else frozenset()
    backend_options = BackendOptions(
        inject=faults, chromium=options.chromium, adapter=options.adapter
    )
    backend = open_backend(item.target.name, backend_options)
    try:
        stepped = Step(ReferenceCache(None).references, backend_options).run(item, backend)
    finally:
        backend.close()
    if stepped.workload is None or not stepped.references:
        raise InvalidInput(f"{result.case_id}: nothing to bundle: {stepped.judgement.message}")
    notes = check_digest(result, stepped.workload)
    say(f"the scenario rerun: {stepped.judgement.verdict}: {stepped.judgement.message}")
    environment = run_record(history, result.run_id).environment
    if options.force:
        bundle.clear_previous(folder)
    return write_scenario_bundle(
        folder,
        item,
        result,
        stepped,
        faults,
        local=options.local,
        environment=environment,
        command=command,
        notes=notes,
    )


def write_scenario_bundle(
    folder: Path,
    item: ScenarioTarget,
    result: CaseResult,
    stepped: Stepped,
    faults: frozenset[str],
    *,
    local: bool,
    environment: Mapping[str, Any],
    command: str,
    notes: tuple[str, ...] = (),
) -> ScenarioBundle:
    """The folder for `stepped` (a run of `item`; `result` is what it reproduces), carrying
    `faults`, labelled as injected. `environment` is the run's (run.json's)."""
    folder.mkdir(parents=True, exist_ok=True)
    writer = bundle.Writer(folder)
    scenario, suite, tolerance = item.scenario, item.suite, item.tolerance
    entry = writer.workload("", stepped.workload, suite.layouts[0].label, stepped.references, 0)
    schedule = iter(entry["schedule"])  # each run's [graph, variant index], in order
    feeds = [None if feed is None else next(schedule) for feed in stepped.feeds]
    descriptor = REGISTRY[item.target.name]
    carried = faults & descriptor.faults.keys()
    request = ReproRequest(
        folder=folder,
        target=item.target,
        faults=carried,
        local=local,
        environment=(environment.get("backends") or {}).get(descriptor.name) or {},
    )
    runner = resolve(descriptor.repro)(request)
    content = bundle.manifest_head(result, tolerance, carried, {bundle.MAIN: entry}, writer.judge())
    content["scenario"] = {
        "name": scenario.name,
        **judged_scenario(scenario, tolerance).to_json(),
        "sessions": scenario.session_specs(),
        "feeds": feeds,
    }
    yaml_entry = {**scenario_entry(scenario, scenario.name), "expect": result.verdict}
    report = issue.Report(
        result=result,
        runner=runner,
        faults={name: descriptor.faults[name] for name in sorted(carried)},
        platform=str(environment.get("platform") or ""),
        onnxruntime=onnxruntime_version(),
        verdict=stepped.judgement.verdict,
        message=stepped.judgement.message,
        reproduced=stepped.judgement.verdict == result.verdict,
        comparisons=(),
        tolerance=tolerance,
        sessions=tuple(step.describe() for step in scenario.steps),
        runs=0,
        feeding="",
        model=(
            "`model.onnx` is the scenario's model, whole: every session runs it, so a cut "
            "would be another scenario."
        ),
        notes=notes,
        command=command,
        scenario=yaml.safe_dump([yaml_entry], sort_keys=False, width=100),
    )
    writer.bytes("ISSUE.md", issue.issue_markdown(report).encode())
    files = (*writer.files, *runner.files, bundle.MANIFEST)
    bundle.write_manifest(folder, content, files)
    return ScenarioBundle(folder, result, stepped, notes, runner, files)


def _scenario_target(result: CaseResult) -> ScenarioTarget:
    """The result's scenario, on its own target, as the suite says it now."""
    suite = load_suite(Path(result.suite_path), REGISTRY)
    name = result.case_id.removeprefix(PREFIX).rpartition("/")[0]
    scenario = next((s for s in suite.scenarios if s.name == name), None)
    if scenario is None:
        raise InvalidInput(
            f"{result.suite_path} no longer has scenario {name!r} of result "
            f"{result.result_id}; `python -m runner list` shows its scenarios"
        )
    return ScenarioTarget(suite, scenario, result_target(suite, result))
