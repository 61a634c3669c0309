"""Reproduces a failing wgpu result of webgpu-capture-regress on its WGSL executor.

A repro bundle holds this file as ``repro.py``. ``repro.json`` beside it lists the sessions in
the order the suite ran them (``steps``) and each model with every run's inputs and onnxruntime
CPU's outputs for them (``workloads``: ``variants``, and ``schedule``, each run's graph and
inputs); the last step is judged as the suite judges it: every run against eager's run of the
same inputs and against onnxruntime CPU, against earlier layouts' outputs, against earlier runs'
inputs (stale-input) and other graphs' (wrong-graph), replays against each other, and whether
replays still create bind groups or write uniforms.

    python repro.py                 # exit 0: PASS, 1: FAIL (the verdict on the last line)
    python repro.py --faults off    # without the injected faults a --with-fault bundle carries

It imports webgpu-capture-regress (``runner.backends.wgpu``: the executor the suite runs), so
run it where that project is installed; it needs a WebGPU adapter (a GPU, or lavapipe).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from runner.backends.wgpu.device import Device
from runner.backends.wgpu.executor import Session
from runner.backends.wgpu.faults import CAPTURE_FALLS_BACK_TO_EAGER, Faults
from runner.backends.wgpu.prepare import prepare
from runner.compare import compare
from runner.suite.spec import BufferModes, Tolerance


def run_steps(folder: Path, manifest: Mapping[str, Any], faults_on: bool, adapter: str | None):
    """Each step's runs on one device, as the suite's backend runs cases (a session per model
    and kernel faults, each graph recorded on its first run and replayed after)."""
    device = Device.open(adapter)
    sessions: dict[tuple, Session] = {}
    results = []
    for step in manifest["steps"]:
        workload = manifest["workloads"][step["workload"]]
        faults = Faults.of(step["faults"] if faults_on else ())
        variants = [_tensors(folder, v["inputs"]) for v in workload["variants"]]
        try:
            key = (step["workload"], faults.in_kernels)
            if key not in sessions:
                plan = prepare(
                    (folder / workload["model"]).read_bytes(),
                    variants[0],
                    workload["uniformOrder"],
                    workload["outputs"],
                    workload["freeDimensionOverrides"],
                    faults.kernel,
                )
                sessions[key] = Session(device, plan, len(sessions) + 1)
            results.append(_run(device, sessions[key], step, faults, workload, variants))
        except Exception as error:  # the step's failure is its verdict
            results.append({"status": "error", "message": f"{type(error).__name__}: {error}"})
        print(f"step {len(results)}/{len(manifest['steps'])}: {step['name']}")
    return results


def _tensors(folder: Path, entries) -> dict[str, np.ndarray]:
    return {t["name"]: np.load(folder / t["npy"]) for t in entries}


def _run(device: Device, session: Session, step, faults: Faults, workload, variants) -> dict:
    """The workload's schedule: each run's graph and inputs, in the step's buffer modes."""
    capture = step["mode"] == "capture" and CAPTURE_FALLS_BACK_TO_EAGER not in faults
    buffers = BufferModes(**step["buffers"])
    outputs, replays, captures = [], 0, {}
    for index, (graph, variant) in enumerate(workload["schedule"]):
        inputs = variants[variant]
        before = device.counters.snapshot()
        records = graph not in captures
        if capture:
            if records:
                captures[graph], _ = session.capture(faults, graph, inputs)
            run, _ = session.replay(captures[graph], inputs, index, buffers)
        else:
            captures[graph] = None
            run, _ = session.run_eager(inputs)
        if not records:  # bind groups created and uniforms written by a replay
            after = device.counters.snapshot()
            replays += after[0] - before[0] + after[1] - before[1]
        outputs.append(run)
    return {"status": "ok", "runs": outputs, "replays": replays}


def _compare(actual, expected, tolerance: Tolerance) -> tuple[bool, float]:
    """Whether every expected output is within tolerance, and the worst max abs error."""
    missing = np.full((), np.nan)
    each = [compare(actual.get(n, missing), want, tolerance) for n, want in expected.items()]
    return all(c.ok for c in each), max((c.max_abs for c in each), default=0.0)


def _fits_better(actual, expected, own: float, tolerance: Tolerance) -> float | None:
    """The error against `expected` if within tolerance or ten times below `own`, else None."""
    ok, error = _compare(actual, expected, tolerance)
    return error if ok or error < own / 10 else None


def judge(folder: Path, manifest: Mapping[str, Any], results: list[dict]) -> list[tuple[str, str]]:
    """The suite's detectors on the last step: (verdict, why) for each that applies."""
    tolerance = Tolerance(**manifest["tolerance"])
    step = manifest["steps"][manifest["judge"]["step"]]
    run = results[manifest["judge"]["step"]]
    if run["status"] != "ok":
        return [(run["status"], run["message"])]
    workload = manifest["workloads"][step["workload"]]
    schedule = workload["schedule"]
    several = len({v for _, v in schedule}) > 1

    def which(index: int) -> str:
        return f" (run {index + 1})" if several else ""

    cpu = [_tensors(folder, v["cpu"]) for v in workload["variants"]]
    capture = step["mode"] == "capture"
    eager = results[manifest["judge"]["eager"]] if capture else run
    eager_ok = eager is not None and eager["status"] == "ok"
    first_run = {}
    for index, (_, variant) in enumerate(schedule):
        first_run.setdefault(variant, index)

    def expected(variant: int):
        return eager["runs"][first_run[variant]] if eager_ok else cpu[variant]

    found = []
    last_variant = schedule[-1][1]
    last = run["runs"][-1]
    ok, worst = _compare(last, cpu[last_variant], tolerance)
    print(f"{step['mode']}{which(len(schedule) - 1)} against onnxruntime CPU: max abs {worst:.3g}")
    if eager_ok:
        bad = [
            (error, index)
            for variant, index in first_run.items()
            for same, error in [_compare(eager["runs"][index], cpu[variant], tolerance)]
            if not same
        ]
        if bad:
            error, index = max(bad)
            found.append(
                (
                    "reference-mismatch",
                    f"eager{which(index)} differs from onnxruntime CPU: max abs {error:.3g}",
                )
            )
    if capture:
        against = "eager" if eager_ok else "onnxruntime CPU"
        each = [
            _compare(outputs, expected(variant), tolerance)
            for outputs, (_, variant) in zip(run["runs"], schedule, strict=True)
        ]
        for index, ((graph, _), (_, error)) in enumerate(zip(schedule, each, strict=True)):
            graph_note = f" (graph {graph})" if step["graphs"] > 1 else ""
            print(f"run {index + 1}{graph_note}: capture against {against}: max abs {error:.3g}")
        bad = [(error, index) for index, (same, error) in enumerate(each) if not same]
        if bad:
            error, index = max(bad)
            where = f" in run {index + 1} of {len(schedule)}" if len(schedule) > 1 else ""
            found.append(
                ("capture-mismatch", f"capture differs from {against}{where}: max abs {error:.3g}")
            )
        found += _stale_layout(folder, manifest, step, last, ok, worst, tolerance)
        found += _crossed(run["runs"], schedule, each, expected, step["graphs"], tolerance)
        if len(run["runs"]) >= 2 and run["replays"]:
            found.append(("capture-not-engaged", "replays created bind groups or wrote uniforms"))
    recording = {graph for graph, _ in schedule} if capture else set()
    first: dict[int, tuple[int, dict]] = {}
    for index, (outputs, (graph, variant)) in enumerate(zip(run["runs"], schedule, strict=True)):
        if graph in recording:
            recording.discard(graph)
            continue
        earlier, reference = first.setdefault(variant, (index, outputs))
        if earlier != index and any(
            not np.array_equal(reference[n], outputs[n], equal_nan=True) for n in reference
        ):
            found.append(
                (
                    "nondeterministic",
                    f"run {index + 1} of the same input gave other outputs than run {earlier + 1}",
                )
            )
            break
    return found


def _stale_layout(folder, manifest, step, last, ok, worst, tolerance) -> list[tuple[str, str]]:
    """The last run explained better by an earlier layout's onnxruntime CPU output."""
    if ok:
        return []
    workload = manifest["workloads"][step["workload"]]
    graph, variant = workload["schedule"][-1]
    wanted = (workload["variants"][variant]["graph"], workload["variants"][variant]["draw"])
    earlier = [
        s["workload"]
        for s in manifest["steps"][: manifest["judge"]["step"]]
        if s["mode"] == "capture" and s["workload"] != step["workload"]
    ]
    fits = []
    for order, name in enumerate(dict.fromkeys(earlier)):
        other = manifest["workloads"][name]
        matching = [v for v in other["variants"] if (v["graph"], v["draw"]) == wanted]
        if not matching:
            continue
        error = _fits_better(last, _tensors(folder, matching[0]["cpu"]), worst, tolerance)
        if error is not None:
            fits.append((error, order, other["layout"]))
    if not fits:
        return []
    error, _, layout = min(fits)
    why = f"capture matches layout {layout!r}'s output (max abs {error:.3g}) better"
    return [("stale-layout", f"{why} than its own (max abs {worst:.3g})")]


def _crossed(runs, schedule, each, expected, graphs: int, tolerance) -> list[tuple[str, str]]:
    """Replays whose output is an earlier run's inputs' output: of another graph (wrong-graph),
    of the same graph (stale-input)."""
    found = []
    for same_graph, verdict in ((False, "wrong-graph"), (True, "stale-input")):
        for index, (outputs, (graph, variant)) in enumerate(zip(runs, schedule, strict=True)):
            ok, own = each[index]
            if ok:
                continue
            fits = []
            for earlier, (other_graph, other) in enumerate(schedule[:index]):
                if other != variant and (other_graph == graph) == same_graph:
                    error = _fits_better(outputs, expected(other), own, tolerance)
                    if error is not None:
                        fits.append((error, earlier, other_graph))
            if fits:
                error, earlier, other_graph = min(fits)
                if same_graph:
                    note = f" (graph {graph})" if graphs > 1 else ""
                    why = (
                        f"run {index + 1}{note} returned the output for run {earlier + 1}'s "
                        f"inputs (max abs {error:.3g}) rather than for its own"
                    )
                else:
                    why = (
                        f"run {index + 1} (graph {graph}) returned graph {other_graph}'s "
                        f"result: it matches the output for run {earlier + 1}'s inputs "
                        f"(max abs {error:.3g}) better than its own"
                    )
                found.append((verdict, why))
                break
    return found


def main(folder: Path, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", choices=("on", "off"), default="on")
    parser.add_argument("--adapter", help="wgpu adapter: name substring or backend type")
    args = parser.parse_args(argv)
    manifest = json.loads((folder / "repro.json").read_text())
    faults_on = args.faults == "on"
    if manifest["faults"]:
        print(f"injected fault(s) {', '.join(manifest['faults'])}: {args.faults}")
    found = judge(folder, manifest, run_steps(folder, manifest, faults_on, args.adapter))
    for verdict, why in found:
        print(f"{verdict}: {why}")
    verdict = next((v for v in manifest["verdictOrder"] if v in {f for f, _ in found}), "pass")
    print("PASS" if verdict == "pass" else f"FAIL: {verdict}")
    return 0 if verdict == "pass" else 1


if __name__ == "__main__":
    sys.exit(main(Path(__file__).resolve().parent, sys.argv[1:]))
