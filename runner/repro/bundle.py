"""The bundle's files: models, tensors and ``repro.json``, then what the backend adds to run it.

Layout: ``model.onnx`` and ``inputs/`` for the case (``inputs/G-D/`` for the later runs' new
inputs); ``expected/cpu/`` (onnxruntime CPU, per input likewise), ``expected/eager/`` (a capture
case's eager twin) and ``actual/`` (the case's output), of the last run, from the rerun that
kept the model; ``sequence/N-LAYOUT/`` for each earlier layout whose capture the
case needs first. Every tensor is a ``.npy`` (Python) and a raw little-endian ``.bin`` (the
page). ``judge/`` holds the suite's judge for the page to run (``runner.scenario.bundled``).
``repro.json`` lists the sessions in order (``steps``), the tensors, and every file of
the bundle, so that ``--force`` replaces exactly a previous bundle's files.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runner.errors import InvalidInput
from runner.history import CaseResult
from runner.matrix import Case
from runner.measure import Tolerance
from runner.oracle import References
from runner.scenario import bundled
from runner.schedule import BASE
from runner.suite.spec import mode_name
from runner.workload import Workload

MANIFEST = "repro.json"
MAIN = bundled.MAIN


def check_folder(folder: Path, force: bool) -> None:
    """Refuses a folder that exists and holds something, unless `force`."""
    if folder.exists() and not folder.is_dir():
        raise InvalidInput(f"--out {folder}: exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not force:
        raise InvalidInput(
            f"--out {folder}: the folder exists and is not empty; --force writes over it "
            "(replacing a previous bundle's files)"
        )


def clear_previous(folder: Path) -> None:
    """Removes what an earlier bundle wrote here (its manifest lists it); nothing else."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return
    files = json.loads(manifest.read_text()).get("files") or []
    for top in sorted({Path(name).parts[0] for name in files} | {MANIFEST}):
        path = folder / top
        if path.resolve().parent != folder.resolve():
            continue  # not a file of this folder
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


class Writer:
    """Writes files under the bundle folder and remembers them for the manifest."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.files: list[str] = []

    def bytes(self, name: str, data: bytes) -> str:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.files.append(name)
        return name

    def judge(self) -> list[str]:
        """The suite's judge, as ``judge/runner/...``: the page of a bundle runs it under Pyodide
        (``runner.scenario.bundled``)."""
        root = Path(bundled.__file__).parents[2]  # the folder holding runner/
        return [
            self.bytes(f"judge/{name}", (root / name).read_bytes()) for name in bundled.PAGE_MODULES
        ]

    def tensors(self, prefix: str, arrays: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
        """Each array as ``PREFIX/NN-NAME.npy`` and ``.bin``; their entries for repro.json."""
        entries = []
        for index, (name, value) in enumerate(arrays.items()):
            array = np.asarray(value)
            stem = f"{prefix}/{index:02d}-{_file_name(name)}"
            (self.folder / prefix).mkdir(parents=True, exist_ok=True)
            np.save(self.folder / f"{stem}.npy", array, allow_pickle=False)
            self.files.append(f"{stem}.npy")
            little = array.astype(array.dtype.newbyteorder("<"), copy=False)
            self.bytes(f"{stem}.bin", np.ascontiguousarray(little).tobytes())
            entries.append(
                {
                    "name": name,
                    "npy": f"{stem}.npy",
                    "bin": f"{stem}.bin",
                    "type": array.dtype.name,
                    "dims": list(array.shape),
                }
            )
        return entries

    def workload(
        self, prefix: str, workload: Workload, layout: str, cpu: References, runs: int
    ) -> dict[str, Any]:
        """A model, its inputs and onnxruntime CPU's outputs for every input variant its runs
        use, and which run gets which (``schedule``: [graph, variant index] per run); its entry
        for repro.json. The case's own inputs (variant 0) are ``inputs/`` and
        ``expected/cpu/``, a later run's ``inputs/G-D/`` and ``expected/cpu/G-D/`` (graph G,
        draw D)."""
        base = f"{prefix}/" if prefix else ""
        feeds = workload.feeds(runs)
        order = list(dict.fromkeys([BASE, *(feed.variant for feed in feeds)]))
        variants = []
        for graph, draw in order:
            sub = "" if (graph, draw) == BASE else f"/{graph}-{draw}"
            variants.append(
                {
                    "graph": graph,
                    "draw": draw,
                    "inputs": self.tensors(f"{base}inputs{sub}", workload.inputs_of((graph, draw))),
                    "cpu": self.tensors(f"{base}expected/cpu{sub}", cpu[graph, draw]),
                }
            )
        entry = {
            "layout": layout,
            "model": self.bytes(f"{base}model.onnx", workload.model),
            "inputs": variants[0]["inputs"],
            "outputs": list(workload.output_names),
            "cpu": variants[0]["cpu"],
            "variants": variants,
            "schedule": [[feed.graph, order.index(feed.variant)] for feed in feeds],
            "freeDimensionOverrides": dict(workload.shape),
            "sharedShape": dict(workload.shared_shape),  # what a session serving every run pins
            "uniformOrder": list(workload.uniform_order),
            "preferredLayout": workload.preferred_layout,  # the EP option; null: the build's
        }
        cache = workload.device_cache
        if cache is not None:  # a decoder's: its caches stay on the device between runs
            entry["deviceCache"] = {
                "inputs": list(cache.inputs),
                "inPlace": dict(workload.in_place),
                "swapped": workload.swapped,
                "rewinds": [[order.index(v), n] for v, n in cache.rewinds.items() if v in order],
                "prefillShape": dict(cache.prefill_shape),
            }
        return entry


def workload_entries(
    writer: Writer,
    case: Case,
    workload: Workload,
    references: References,
    earlier: Sequence[tuple[Case, Workload, References]],
    runs: int,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every workload of the sequence, written once each; and each earlier capture's name."""
    entries = {MAIN: writer.workload("", workload, case.layout.label, references, runs)}
    names = {workload.key: MAIN}
    for earlier_case, earlier_workload, earlier_references in earlier:
        if earlier_workload.key not in names:
            label = earlier_case.layout.label
            name = f"sequence/{len(entries)}-{_file_name(label)}"
            entries[name] = writer.workload(name, earlier_workload, label, earlier_references, runs)
            names[earlier_workload.key] = name
    return entries, [names[w.key] for _, w, _ in earlier]


def steps(
    case: Case, eager: Case | None, earlier: Sequence[Case], earlier_names: Sequence[str]
) -> tuple[list[dict[str, Any]], dict[str, int | None]]:
    """The sessions in the order the suite created them, and which step is judged (and its
    eager twin). A revisit runs the session its layout's first capture created."""
    listed = [_step(c, name) for c, name in zip(earlier, earlier_names, strict=True)]
    eager_index = None
    if eager is not None:
        eager_index = len(listed)
        listed.append(_step(eager, MAIN))
    judged = _step(case, MAIN)
    if case.revisit:
        first = next(
            (i for i, s in enumerate(listed) if s["workload"] == MAIN and s["mode"] == "capture"),
            None,
        )
        judged["reuse"] = first
    listed.append(judged)
    return listed, {"step": len(listed) - 1, "eager": eager_index}


def manifest(
    result: CaseResult,
    case: Case,
    runs: int,
    workloads: Mapping[str, Any],
    session_steps: list[dict[str, Any]],
    judged: Mapping[str, int | None],
    recorded: Mapping[str, Any],
    cut: Mapping[str, Any] | None,
    judge_modules: Sequence[str],
) -> dict[str, Any]:
    faults = {f for step in session_steps for f in step["faults"]}
    return {
        **manifest_head(result, case.tolerance, faults, workloads, judge_modules),
        "runs": runs,
        "steps": session_steps,
        "judge": dict(judged),
        "recorded": dict(recorded),
        "cut": dict(cut) if cut else None,
    }


def manifest_head(
    result: CaseResult,
    tolerance: Tolerance,
    faults: Iterable[str],
    workloads: Mapping[str, Any],
    judge_modules: Sequence[str],
) -> dict[str, Any]:
    """What every bundle's ``repro.json`` says, a case's or a scenario's."""
    return {
        "result": result.result_id,
        "case": result.case_id,
        "suite": {
            "path": result.suite_path,
            "verdict": result.verdict,
            "verdicts": list(result.verdicts),
        },
        "backend": result.backend,
        "version": result.version,
        "tolerance": {"abs": tolerance.abs, "rel": tolerance.rel},
        "faults": sorted(faults),
        "workloads": dict(workloads),
        "judgeModules": list(judge_modules),
    }


def write_manifest(folder: Path, content: dict[str, Any], files: Sequence[str]) -> None:
    text = json.dumps({**content, "files": list(files)}, indent=2)
    (folder / MANIFEST).write_text(text + "\n")


def _step(case: Case, workload: str) -> dict[str, Any]:
    mode = mode_name(case.capture)
    suffix = "-revisit" if case.revisit else ""
    return {
        "name": f"layout {case.layout.label}, {mode}{suffix}",
        "workload": workload,
        "mode": mode,
        "faults": sorted(case.inject),
        "reuse": None,
        "buffers": dataclasses.asdict(case.buffers),
        "graphs": case.graphs,
    }


def _file_name(text: str) -> str:
    """A tensor or layout name as a portable file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:60] or "tensor"
