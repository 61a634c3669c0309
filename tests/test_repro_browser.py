"""``repro`` end to end in headless Chromium, on the ort-web canaries of suites/canaries.yaml.

Each fault's canary sequence runs through the pipeline; its failing result is bundled with
``--with-fault --local`` as a user would (the CLI), the folder is moved elsewhere, served over
``python -m http.server``'s handler on 127.0.0.1 and opened in Chromium: the page must give
the result's verdict, pass with ``?faults=off``, and fetch nothing from outside the folder.
The real bug of suites/bugs/ort-fresh-buffers.yaml is bundled likewise, without a fault, and
a decoder's loops (a device prefill, and the cache-frozen-at-capture canary) replay as the
suite's page runs them.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import threading
from pathlib import Path

import onnx
import pytest
from playwright.sync_api import sync_playwright

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions
from runner.backends.ortweb.browser import chromium_flags, find_chromium
from runner.matrix import expand_matrix, select_cases
from runner.pipeline import execute
from runner.selection import RunPlan
from runner.suite import load_suite

from .conftest import REPO, regress

pytestmark = pytest.mark.browser

# fault -> the filters selecting its canary's sequence on one build, and the verdict it gives
CANARIES = {
    "stale-uniform-binding": (["model=stale-cache", "backend=ort-web:jsep"], "stale-layout"),
    "ep-name-as-string": (["model=lazy-capture", "backend=ort-web:webgpu"], "capture-not-engaged"),
    "input-snapshot-at-capture": (["model=input-snapshot", "backend=ort-web:jsep"], "stale-input"),
    "graphs-share-inputs": (["model=crossed-graphs", "backend=ort-web:webgpu"], "wrong-graph"),
}
FULL_NODES = 30  # the canaries' encoder


@pytest.fixture(scope="module")
def canary_results(canary_run):
    """Each fault's failing result in the canary run (tests/conftest.py), on its build."""
    out, summary = canary_run
    assert summary.status == "complete"
    cases = expand_matrix([load_suite(REPO / "suites/canaries.yaml", REGISTRY)])
    ids = {case.id for filters, _ in CANARIES.values() for case in select_cases(cases, filters)}
    return out, {r.injected[0]: r for r in summary.results if r.injected and r.case_id in ids}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def served(folder: Path):
    """`python -m http.server`'s handler on 127.0.0.1 (WebGPU needs a secure context)."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def open_bundle(url: str, queries=("", "?faults=off")) -> list[tuple[dict, list[str]]]:
    """The page's result and every URL it requested, for the page and with ?faults=off."""
    found = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(find_chromium().path), args=list(chromium_flags())
        )
        try:
            for query in queries:
                page = browser.new_page()
                requests: list[str] = []
                page.on("request", lambda request, into=requests: into.append(request.url))
                page.goto(f"{url}/{query}")
                page.wait_for_function("() => window.reproResult !== undefined", timeout=180_000)
                found.append((page.evaluate("() => window.reproResult"), requests))
                page.close()
        finally:
            browser.close()
    return found


@pytest.mark.parametrize("fault", list(CANARIES))
def test_a_canary_bundle_reproduces_in_chromium_from_another_folder(
    canary_results, fault, tmp_path
):
    out, results = canary_results
    result, verdict = results[fault], CANARIES[fault][1]
    assert result.verdict == verdict
    made = tmp_path / "made"
    proc = regress(
        "repro", result.result_id, "--reports", out, "--out", made, "--with-fault", "--local"
    )
    assert proc.returncode == 0, proc.stderr
    assert f"model.onnx: 1 of {FULL_NODES} nodes" in proc.stdout
    assert f"reproduced: {verdict}" in proc.stdout
    bundle = Path(shutil.move(made, tmp_path / "elsewhere" / "bundle"))
    assert not made.exists()

    manifest = json.loads((bundle / "repro.json").read_text())
    cut = onnx.load(bundle / "model.onnx")
    assert len(cut.graph.node) == 1 and cut.graph.node[0].op_type == "LayerNormalization"
    assert manifest["faults"] == [fault]
    issue = (bundle / "ISSUE.md").read_text()
    assert issue.startswith(f"# [injected fault {fault}] [WebGPU] ")
    assert "**Injected fault, not a bug to report.**" in issue
    assert f"Cut away: {FULL_NODES - 1} nodes" in issue
    assert "| onnxruntime-web | 1.30.0 |" in issue and "| Chromium | " in issue
    steps = [(s["name"], s["workload"], s["faults"]) for s in manifest["steps"]]
    if verdict == "stale-layout":  # the earlier layout's capture first, as the suite ran it
        assert steps == [
            ("layout base, capture", "sequence/1-base", []),
            ("layout eps-1e-2, eager", "main", []),
            ("layout eps-1e-2, capture", "main", [fault]),
        ]
        assert (bundle / "faults.js").read_bytes() == (
            REPO / "runner/backends/ortweb/assets/faults.js"
        ).read_bytes()
        assert "`/layers.0.norm1/LayerNormalization` (LayerNormalization)" in issue
    else:
        assert steps == [
            ("layout base, eager", "main", []),
            ("layout base, capture", "main", [fault]),
        ]
        # ep-name-as-string lives in the session options, the others in faults.js
        assert (bundle / "faults.js").exists() == (fault != "ep-name-as-string")
    # every run gets the inputs it got in the suite, on the graph it ran
    schedule = manifest["workloads"]["main"]["schedule"]
    graphs = 2 if fault == "graphs-share-inputs" else 1
    assert [graph for graph, _ in schedule] == ([0, 1] * 3 if graphs == 2 else [0, 0, 0])
    assert len({variant for _, variant in schedule}) == 2 * graphs
    assert manifest["steps"][-1]["graphs"] == graphs

    with served(bundle) as url:
        (with_fault, asked), (without, asked_again) = open_bundle(url)
    assert with_fault["verdict"] == verdict, with_fault["lines"]
    assert verdict in with_fault["verdicts"] and with_fault["faults"] == [fault]
    assert with_fault["lines"][-1] == f"FAIL: {verdict}"
    assert without["verdict"] == "pass" and without["verdicts"] == [], without["lines"]
    assert without["lines"][-1] == "PASS"
    assert all(u.startswith(url) or u.startswith("data:") for u in asked + asked_again), asked


def test_the_real_fresh_input_buffer_bug_reproduces_in_a_one_node_bundle(tmp_path):
    """suites/bugs/ort-fresh-buffers.yaml: a new GPU input buffer every run, on the C++ build.
    No fault: the bundle shows onnxruntime-web's own bug, cut down to one node."""
    out = tmp_path / "reports"
    cases = expand_matrix([load_suite(REPO / "suites/bugs/ort-fresh-buffers.yaml", REGISTRY)])
    selected = select_cases(cases, ["model=fresh-inputs", "backend=ort-web:webgpu"])
    summary = execute(RunPlan(tuple(selected)), out, BackendOptions(runs=3))
    [result] = [r for r in summary.results if r.capture == "capture"]
    assert result.verdict == "stale-input" and not result.injected
    made = tmp_path / "made"
    proc = regress("repro", result.result_id, "--reports", out, "--out", made, "--local")
    assert proc.returncode == 0, proc.stderr
    assert f"model.onnx: 1 of {FULL_NODES} nodes" in proc.stdout
    bundle = Path(shutil.move(made, tmp_path / "elsewhere" / "bundle"))
    manifest = json.loads((bundle / "repro.json").read_text())
    assert manifest["faults"] == [] and not (bundle / "faults.js").exists()
    assert manifest["steps"][-1]["buffers"] == {
        "inputs": "fresh",
        "outputs": "none",
        "allocator": "page",
    }
    issue = (bundle / "ISSUE.md").read_text()
    assert issue.startswith(
        "# [WebGPU] graph capture replays return an earlier run's inputs' output at "
        "LayerNormalization in onnxruntime-web 1.30.0, ort.webgpu.mjs"
    )
    assert "run 1 `inputs/`; run 2 `inputs/0-1/`; run 3 `inputs/0-1/`" in issue
    assert "each run in a new GPU buffer (`Tensor.fromGpuBuffer` of a fresh buffer)" in issue

    with served(bundle) as url:
        [(page, asked)] = open_bundle(url, queries=("",))  # no fault to turn off
    assert page["verdict"] == "stale-input", page["lines"]
    assert "stale-input: run 2 returned the output for run 1's inputs" in "\n".join(page["lines"])
    assert page["lines"][-1] == "FAIL: stale-input"
    assert all(u.startswith(url) or u.startswith("data:") for u in asked), asked


def test_a_scenario_bundle_replays_an_injected_stale_replay_in_chromium(write_suite, tmp_path):
    """A scenario on the webgpu build with input-snapshot-at-capture: the bundle's page runs its
    steps through scenario.mjs, as the suite's page does, arms the fault as the suite's page
    does, and the suite's scenario judging (under Pyodide) names the same verdict and failing
    step; with ?faults=off the same steps pass."""
    suite = write_suite(
        """
        models:
          encoder-tiny: {builtin: encoder, layers: 1, hidden: 32, heads: 4, ffn: 64}
        shapes: [{batch: 1, sequence: 16}]
        backends: [{name: ort-web, bundle: webgpu}]
        exclude: [{model: encoder-tiny}]
        scenarios:
          - name: rewritten-inputs
            model: encoder-tiny
            sessions: {p: {}}
            steps: [{run: p}, {run: p}, {run: p}]
        """
    )
    out = tmp_path / "reports"
    fault = ("--inject", "input-snapshot-at-capture")
    ran = regress("run", suite, *fault, "--out", out, "-q", "--no-localize")
    (lines,) = [p.read_text() for p in (out / "runs").glob("*/results.jsonl")]
    result = json.loads(lines.splitlines()[-1])
    assert result["verdict"] == "stale-input", ran.stdout + ran.stderr
    assert result["message"].startswith("step 2 (run: p, line ")
    made = tmp_path / "made"
    proc = regress(
        "repro", result["result_id"], "--reports", out, "--out", made, "--local", "--with-fault"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reproduced: stale-input" in proc.stdout
    bundle = Path(shutil.move(made, tmp_path / "elsewhere" / "bundle"))
    manifest = json.loads((bundle / "repro.json").read_text())
    assert [s["action"] for s in manifest["scenario"]["steps"]] == ["run"] * 3
    assert (bundle / "scenario.mjs").read_bytes() == (
        REPO / "runner/backends/ortweb/assets/scenario.mjs"
    ).read_bytes()

    with served(bundle) as url:
        (faulty, asked), (clean, _) = open_bundle(url)
    assert faulty["verdict"] == "stale-input", faulty["lines"]
    assert faulty["lines"][-2:] == [result["message"], "FAIL: stale-input"]
    assert clean["verdict"] == "pass" and clean["lines"][-1] == "PASS", clean["lines"]
    assert all(u.startswith(url) or u.startswith("data:") for u in asked), asked


@pytest.mark.slow  # 90 s; tests/test_repro_wgpu.py bundles a decoder on wgpu
def test_a_decoder_bundle_replays_the_suites_loop_in_chromium(tmp_path):
    """A decoder's bundle (``deviceCache``) runs its loop as the suite's page does (feeds.mjs):
    the eager loop's prefill at the prompt's length, its caches fed back from its outputs, passes
    whole; the capture loop writes each present cache in place into its past cache's buffer and
    feeds the decode steps only token and mask, so the page gives the suite's
    cache-frozen-at-capture failure, and with ?faults=off the same loop replays right."""
    out = tmp_path / "reports"
    cases = expand_matrix([load_suite(REPO / "suites/decoder.yaml", REGISTRY)])
    on = ["backend=ort-web:webgpu", "layout=default"]  # the C++ build, onnxruntime-web 1.30.0
    # llama-tiny prefills on the device, eager only there (its capture traps after the prefill)
    selected = [
        *select_cases(cases, ["model=llama-tiny", *on]),
        *select_cases(cases, ["model=frozen-cache", *on]),
    ]
    summary = execute(RunPlan(tuple(selected)), out, BackendOptions(runs=3))
    found = {(r.model, r.capture): r for r in summary.results}
    assert sorted(found) == [
        ("frozen-cache", "capture"),
        ("frozen-cache", "eager"),
        ("llama-tiny", "eager"),
    ]
    eager, capture = found["llama-tiny", "eager"], found["frozen-cache", "capture"]
    assert eager.verdict == "pass", eager.message
    assert capture.verdict == "capture-mismatch", capture.message
    bundles = {}
    for name, result, flags in (
        ("eager", eager, ("--force",)),
        ("capture", capture, ("--with-fault", "--full-model")),
    ):
        made = tmp_path / f"made-{name}"
        proc = regress(
            "repro", result.result_id, "--reports", out, "--out", made, "--local", *flags
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        bundles[name] = Path(shutil.move(made, tmp_path / "elsewhere" / name))
    assert "reproduced: capture-mismatch" in proc.stdout
    for name, bundle in bundles.items():
        workload = json.loads((bundle / "repro.json").read_text())["workloads"]["main"]
        draws = [workload["variants"][variant]["draw"] for _, variant in workload["schedule"]]
        cache = workload["deviceCache"]
        assert len(cache["inputs"]) == 4 and sorted(cache["inPlace"].values()) == cache["inputs"]
        if name == "eager":  # the prompt first, then the 4 decode steps, the last one twice
            assert draws == [-1, 0, 1, 2, 3, 3]
            assert cache["prefillShape"]["sequence_length"] == 4
        else:  # onnxruntime CPU's prefill: its caches are the first decode step's inputs
            assert draws == [0, 1, 2, 3, 3] and cache["prefillShape"] == {}

    with served(bundles["eager"]) as url:
        [(page, asked)] = open_bundle(url, queries=("",))
    assert page["verdict"] == "pass" and page["lines"][-1] == "PASS", page["lines"]
    assert all(u.startswith(url) or u.startswith("data:") for u in asked), asked
    with served(bundles["capture"]) as url:
        (faulty, _), (clean, _) = open_bundle(url)
    assert faulty["verdict"] == "capture-mismatch", faulty["lines"]
    assert f"capture-mismatch: {capture.message}" in faulty["lines"]
    assert faulty["lines"][-1] == "FAIL: capture-mismatch"
    assert clean["verdict"] == "pass" and clean["lines"][-1] == "PASS", clean["lines"]
