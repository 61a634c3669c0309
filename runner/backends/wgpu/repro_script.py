"""Reproduces a failing wgpu result of webgpu-capture-regress on its WGSL executor.

A repro bundle holds this file as ``repro.py``. ``repro.json`` beside it lists the sessions in
the order the suite ran them (``steps``) and each model with every run's inputs and onnxruntime
CPU's outputs for them (``workloads``: ``variants``, and ``schedule``, each run's graph and
inputs); the last step is judged by the suite's own judge (``runner.scenario.bundled``). A
scenario's bundle holds its steps instead (``scenario``), which the suite's scenario runner
replays and its scenario judging judges, naming the first failing step.

    python repro.py                 # exit 0: PASS, 1: FAIL (the verdict on the last line)
    python repro.py --faults off    # without the injected faults a --with-fault bundle carries

It imports webgpu-capture-regress (``runner.backends.wgpu``: the executor the suite runs), so
run it where that project is installed; it needs a WebGPU adapter (a GPU, or lavapipe).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from runner.backends.wgpu.device import Device
from runner.backends.wgpu.executor import Session
from runner.backends.wgpu.faults import CAPTURE_FALLS_BACK_TO_EAGER, Faults
from runner.backends.wgpu.kvcache import DeviceKvCache
from runner.backends.wgpu.prepare import prepare
from runner.backends.wgpu.scenario import run_steps
from runner.compare import NUMPY
from runner.scenario.bundled import MAIN, BundledScenario, judge_scenario, judge_steps
from runner.schedule import Feed
from runner.suite.scenarios import ScenarioSession
from runner.suite.spec import BufferModes
from runner.workload import DeviceCache, Workload

TIMEOUT_S = 600.0  # a scenario's steps, all together


def run_sessions(folder: Path, manifest: Mapping[str, Any], faults_on: bool, adapter: str | None):
    """Each step's runs on one device, as the suite's backend runs cases (a session per model
    and kernel faults, each graph recorded on its first run and replayed after)."""
    device = Device.open(adapter)
    sessions: dict[tuple, Session] = {}
    results = []
    for step in manifest["steps"]:
        workload = manifest["workloads"][step["workload"]]
        faults = Faults.of(step["faults"] if faults_on else ())
        variants = [_tensors(folder, v["inputs"]) for v in workload["variants"]]
        model = (folder / workload["model"]).read_bytes()
        session = functools.partial(_session, device, sessions, model, step, faults, workload)
        try:
            main = session(variants[0], workload["freeDimensionOverrides"], "")
            results.append(_run(device, main, session, step, faults, workload, variants))
        except Exception as error:  # the step's failure is its verdict
            results.append({"status": "error", "message": f"{type(error).__name__}: {error}"})
        print(f"step {len(results)}/{len(manifest['steps'])}: {step['name']}")
    return results


def _session(device, sessions, model, step, faults, workload, inputs, dims, role) -> Session:
    """The step's session for `inputs` at `dims`, made once (a decoder's prefill, `role`
    "prefill", has its own)."""
    key = (step["workload"], faults.in_kernels, role)
    if key not in sessions:
        order, outputs = workload["uniformOrder"], workload["outputs"]
        plan = prepare(model, inputs, order, outputs, dims, faults.compose)
        sessions[key] = Session(device, plan, len(sessions) + 1)
    return sessions[key]


def _tensors(folder: Path, entries) -> dict[str, np.ndarray]:
    return {t["name"]: np.load(folder / t["npy"]) for t in entries}


def _decoder(workload, variants) -> Workload:
    """The bundled workload's runs as the suite's `Workload`, for ``DeviceKvCache``: a
    decoder's caches stay on the device between runs, its prefill on a session of its own."""
    cache = workload["deviceCache"]
    keyed = [(v["graph"], v["draw"]) for v in workload["variants"]]
    return Workload(
        key="",
        model=b"",
        inputs=variants[0],
        output_names=tuple(workload["outputs"]),
        shape=workload["freeDimensionOverrides"],
        schedule=tuple(Feed(graph, keyed[index]) for graph, index in workload["schedule"]),
        variants=dict(zip(keyed, variants, strict=True)),
        in_place=cache["inPlace"],
        swapped=cache["swapped"],
        device_cache=DeviceCache(
            tuple(cache["inputs"]),
            {keyed[index]: length for index, length in cache["rewinds"]},
            cache["prefillShape"],
        ),
    )


def _run(device: Device, session: Session, session_for, step, faults, workload, variants) -> dict:
    """The workload's schedule: each run's graph and inputs, in the step's buffer modes; a
    decoder's prefill eager on a session of its own (`session_for(inputs, dims, role)`), its
    caches kept on the device."""
    capture = step["mode"] == "capture" and CAPTURE_FALLS_BACK_TO_EAGER not in faults
    buffers = BufferModes(**step["buffers"])
    outputs, replays, captures = [], {"bindGroups": 0, "uniformWrites": 0}, {}
    decoder = _decoder(workload, variants) if "deviceCache" in workload else None
    cache = DeviceKvCache(decoder, session) if decoder is not None else None
    for index, (graph, variant) in enumerate(workload["schedule"]):
        feed = decoder.schedule[index] if decoder is not None else None
        inputs = cache.inputs_to_write(feed) if cache is not None else variants[variant]
        before = device.counters.snapshot()
        if feed is not None and feed.prefill:
            prefill = session_for(inputs, decoder.shape_of(feed.variant), "prefill")
            outputs.append(decoder.defined(feed.variant, prefill.run_eager(inputs)[0]))
            cache.prefilled(feed, prefill)
            continue
        records = graph not in captures
        if capture:
            if records:
                captures[graph], _ = session.capture(faults, graph, variants[variant])
            run, _ = session.replay(captures[graph], inputs, index, buffers)
        else:
            captures[graph] = None
            run, _ = session.run_eager(inputs, graph)
        if cache is not None:
            cache.stepped(feed)
        if not records:  # bind groups created and uniforms written by a replay
            after = device.counters.snapshot()
            replays["bindGroups"] += after[0] - before[0]
            replays["uniformWrites"] += after[1] - before[1]
        outputs.append(decoder.defined(feed.variant, run) if decoder is not None else run)
    return {"status": "ok", "runs": outputs, "replays": replays}


def run_scenario(folder: Path, manifest: Mapping[str, Any], faults_on: bool, adapter: str | None):
    """A scenario bundle's steps on one device, through the suite's own scenario runner."""
    bundled = BundledScenario.of(manifest)
    entry = manifest["workloads"][MAIN]
    inputs = {
        variant: _tensors(folder, v["inputs"])
        for variant, v in zip(bundled.variants, entry["variants"], strict=True)
    }
    workload = Workload(
        key=manifest["result"],
        model=(folder / entry["model"]).read_bytes(),
        inputs=inputs[bundled.variants[0]],
        output_names=tuple(entry["outputs"]),
        shape=entry["freeDimensionOverrides"],
        uniform_order=tuple(entry["uniformOrder"]),
        variants=inputs,
    )
    sessions = {
        name: ScenarioSession(name, s["capture"], s["outputs"], s["location"])
        for name, s in bundled.sessions.items()
    }
    faults = Faults.of(manifest["faults"] if faults_on else ())
    steps = bundled.judged.steps
    run = run_steps(
        Device.open(adapter), workload, sessions, steps, bundled.feeds, faults, TIMEOUT_S
    )
    for index, step in enumerate(steps[: len(run.steps)], 1):
        print(f"step {index}/{len(steps)}: {step.describe()}")
    if run.status != "ok":
        print(f"step {len(run.steps) + 1}/{len(steps)}: {run.status}: {run.message}")
    return run


def main(folder: Path, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", choices=("on", "off"), default="on")
    parser.add_argument("--adapter", help="wgpu adapter: name substring or backend type")
    args = parser.parse_args(argv)
    manifest = json.loads((folder / "repro.json").read_text())
    faults_on = args.faults == "on"
    if manifest["faults"]:
        print(f"injected fault(s) {', '.join(manifest['faults'])}: {args.faults}")

    def references(workload: str, variant: int) -> dict[str, np.ndarray]:
        return _tensors(folder, manifest["workloads"][workload]["variants"][variant]["cpu"])

    if "scenario" in manifest:
        run = run_scenario(folder, manifest, faults_on, args.adapter)
        judgement, lines = judge_scenario(manifest, run, references, NUMPY)
    else:
        results = run_sessions(folder, manifest, faults_on, args.adapter)
        judgement, lines = judge_steps(manifest, results, references, NUMPY)
    print("\n".join(lines))
    return 0 if judgement.verdict == "pass" else 1


if __name__ == "__main__":
    sys.exit(main(Path(__file__).resolve().parent, sys.argv[1:]))
