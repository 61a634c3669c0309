"""Reproduces a failing wgpu result of webgpu-capture-regress on its WGSL executor.

A repro bundle holds this file as ``repro.py``. ``repro.json`` beside it lists the sessions in
the order the suite ran them (``steps``) and each model with its inputs and onnxruntime CPU's
outputs (``workloads``); the last step is judged as the suite judges it: capture against eager,
against onnxruntime CPU, against earlier layouts' outputs, replays against each other, and
whether replays still create bind groups or write uniforms.

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
from runner.suite.spec import Tolerance


def run_steps(folder: Path, manifest: Mapping[str, Any], faults_on: bool, adapter: str | None):
    """Each step's runs on one device, as the suite's backend runs cases (a session per model
    and kernel faults, a capture recorded once and replayed)."""
    device = Device.open(adapter)
    sessions: dict[tuple, Session] = {}
    results = []
    for step in manifest["steps"]:
        workload = manifest["workloads"][step["workload"]]
        faults = Faults.of(step["faults"] if faults_on else ())
        inputs = {t["name"]: np.load(folder / t["npy"]) for t in workload["inputs"]}
        try:
            key = (step["workload"], faults.in_kernels)
            if key not in sessions:
                plan = prepare(
                    (folder / workload["model"]).read_bytes(),
                    inputs,
                    workload["uniformOrder"],
                    workload["outputs"],
                    workload["freeDimensionOverrides"],
                    faults.kernel,
                )
                sessions[key] = Session(device, plan, len(sessions) + 1)
            results.append(_run(device, sessions[key], step, faults, inputs, manifest["runs"]))
        except Exception as error:  # the step's failure is its verdict
            results.append({"status": "error", "message": f"{type(error).__name__}: {error}"})
        print(f"step {len(results)}/{len(manifest['steps'])}: {step['name']}")
    return results


def _run(device: Device, session: Session, step, faults: Faults, inputs, runs: int) -> dict:
    capture = step["mode"] == "capture" and CAPTURE_FALLS_BACK_TO_EAGER not in faults
    outputs, replays, recorded = [], 0, None
    for index in range(runs):
        before = device.counters.snapshot()
        if capture:
            if recorded is None:
                recorded, _ = session.capture(faults)
            run, _ = session.replay(recorded, inputs, index)
        else:
            run, _ = session.run_eager(inputs)
        if index:  # bind groups created and uniforms written by a replay
            after = device.counters.snapshot()
            replays += after[0] - before[0] + after[1] - before[1]
        outputs.append(run)
    return {"status": "ok", "runs": outputs, "replays": replays}


def _worst(actual, expected, tolerance: Tolerance) -> tuple[bool, float]:
    """Whether every expected output is within tolerance, and the worst max abs error."""
    missing = np.full((), np.nan)
    each = [compare(actual.get(n, missing), want, tolerance) for n, want in expected.items()]
    return all(c.ok for c in each), max((c.max_abs for c in each), default=0.0)


def judge(folder: Path, manifest: Mapping[str, Any], results: list[dict]) -> list[tuple[str, str]]:
    """The suite's detectors on the last step: (verdict, why) for each that applies."""
    tolerance = Tolerance(**manifest["tolerance"])
    step = manifest["steps"][manifest["judge"]["step"]]
    run = results[manifest["judge"]["step"]]
    if run["status"] != "ok":
        return [(run["status"], run["message"])]

    def cpu(name: str) -> dict[str, np.ndarray]:
        return {t["name"]: np.load(folder / t["npy"]) for t in manifest["workloads"][name]["cpu"]}

    capture = step["mode"] == "capture"
    found = []
    own = cpu(step["workload"])
    last = run["runs"][-1]
    eager = results[manifest["judge"]["eager"]] if capture else run
    eager_ok = eager is not None and eager["status"] == "ok"
    ok, worst = _worst(last, own, tolerance)
    print(f"{step['mode']} against onnxruntime CPU: max abs {worst:.3g}")
    if eager_ok and not _worst(eager["runs"][-1], own, tolerance)[0]:
        found.append(("reference-mismatch", "eager differs from onnxruntime CPU"))
    if capture:
        against = eager["runs"][-1] if eager_ok else own
        same, error = _worst(last, against, tolerance)
        print(f"capture against {'eager' if eager_ok else 'onnxruntime CPU'}: max abs {error:.3g}")
        if not same:
            found.append(("capture-mismatch", f"capture differs from eager: max abs {error:.3g}"))
        earlier = [
            s["workload"]
            for s in manifest["steps"][: manifest["judge"]["step"]]
            if s["mode"] == "capture" and s["workload"] != step["workload"]
        ]
        fits = []
        for order, name in enumerate(dict.fromkeys(earlier)):
            other_ok, other = _worst(last, cpu(name), tolerance)
            if not ok and (other_ok or other < worst / 10):
                fits.append((other, order, manifest["workloads"][name]["layout"]))
        if fits:
            error, _, layout = min(fits)
            why = f"capture matches layout {layout!r}'s output (max abs {error:.3g}) better"
            found.append(("stale-layout", f"{why} than its own (max abs {worst:.3g})"))
        if len(run["runs"]) >= 2 and run["replays"]:
            found.append(("capture-not-engaged", "replays created bind groups or wrote uniforms"))
    repeats = run["runs"][1:] if capture else run["runs"]
    if len(repeats) >= 2 and any(
        not np.array_equal(repeats[0][n], r[n], equal_nan=True) for r in repeats[1:] for n in r
    ):
        found.append(("nondeterministic", "runs of the same input gave different outputs"))
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
