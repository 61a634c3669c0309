"""``repro`` end to end on wgpu: every wgpu canary of suites/canaries.yaml is bundled, moved
to another folder, and its ``repro.py`` (which imports this project's executor) gives the
result's verdict, and passes with ``--faults off``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import onnx
import pytest

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions
from runner.matrix import expand_matrix, select_cases
from runner.pipeline import execute
from runner.selection import RunPlan
from runner.suite import load_suite

from .conftest import REPO, regress

pytestmark = pytest.mark.gpu

# canary model -> (verdict, nodes in its cut model; the encoder has 30)
CANARIES = {
    "stale-cache": ("stale-layout", 1),
    "kernel-bug": ("reference-mismatch", 1),
    "lazy-capture": ("capture-not-engaged", 1),
    "racy-replay": ("nondeterministic", 8),  # widened until a MatMul is in
    "stale-input": ("capture-mismatch", 1),
    "input-snapshot": ("stale-input", 1),  # each run's inputs in the bundle
    "crossed-graphs": ("wrong-graph", 1),  # two graphs, interleaved
}


@pytest.fixture(scope="module")
def canary_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    cases = select_cases(
        expand_matrix([load_suite(REPO / "suites/canaries.yaml", REGISTRY)]), ["wgpu"]
    )
    summary = execute(RunPlan(tuple(cases)), out, BackendOptions(runs=3))
    assert summary.status == "complete"
    failing = {r.model: r for r in summary.results if r.injected and r.capture == "capture"}
    passing = next(r for r in summary.results if r.verdict == "pass")
    return out, failing, passing


def _script(folder, *args):
    return subprocess.run(
        [sys.executable, "repro.py", *args],
        cwd=folder,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("model", list(CANARIES))
def test_a_wgpu_canary_bundle_reproduces_from_another_folder(canary_results, model, tmp_path):
    out, failing, _ = canary_results
    result = failing[model]
    verdict, nodes = CANARIES[model]
    assert result.verdict == verdict
    made = tmp_path / "made"
    proc = regress("repro", result.result_id, "--reports", out, "--out", made, "--with-fault")
    assert proc.returncode == 0, proc.stderr
    assert f"model.onnx: {nodes} of 30 nodes" in proc.stdout
    bundle = shutil.move(made, tmp_path / "elsewhere")
    assert len(onnx.load(f"{bundle}/model.onnx").graph.node) == nodes
    with_fault, without = _script(bundle), _script(bundle, "--faults", "off")
    assert with_fault.returncode == 1, with_fault.stdout + with_fault.stderr
    assert with_fault.stdout.splitlines()[-1] == f"FAIL: {verdict}"
    assert without.returncode == 0, without.stdout + without.stderr
    assert without.stdout.splitlines()[-1] == "PASS"


def test_force_bundles_a_passing_result_whole(canary_results, tmp_path):
    out, _, passing = canary_results
    refused = regress("repro", passing.result_id, "--reports", out, "--out", tmp_path / "b")
    assert refused.returncode == 2 and "nothing to reproduce" in refused.stderr
    proc = regress("repro", passing.result_id, "--reports", out, "--out", tmp_path / "b", "--force")
    assert proc.returncode == 0, proc.stderr
    assert "model.onnx: the full model (30 nodes)" in proc.stdout
    assert "note: the result passed: there is no failure to cut towards" in proc.stdout
    assert _script(tmp_path / "b").stdout.splitlines()[-1] == "PASS"


DECODER_CANARY = """
models:
  frozen-cache:
    builtin: decoder
    max_length: 16
    generate: {prompt: 4, steps: 4}
backends: [wgpu]
cases:
  - match: {capture: capture}
    inject: [cache-frozen-at-capture]
    expect: pass
"""


def test_a_decoder_bundle_keeps_its_prefill_and_device_caches(write_suite, tmp_path):
    """A decoder's bundle carries its device cache: ``repro.py`` prefills on a session of its
    own and keeps the caches on the device, so it gives the suite's verdict with the fault and
    passes without it (run without them, its prefill's logits alone differ in shape)."""
    out = tmp_path / "reports"
    regress("run", write_suite(DECODER_CANARY), "--out", out, "--no-localize")
    [results] = out.glob("runs/*/results.jsonl")
    [capture] = [
        json.loads(line)
        for line in results.read_text().splitlines()
        if json.loads(line)["capture"] == "capture"
    ]
    assert capture["verdict"] == "capture-mismatch"
    made = tmp_path / "bundle"
    args = ("--reports", out, "--out", made, "--with-fault", "--full-model")
    proc = regress("repro", capture["result_id"], *args)
    assert proc.returncode == 0, proc.stderr
    cache = json.loads((made / "repro.json").read_text())["workloads"]["main"]["deviceCache"]
    assert cache["prefillShape"]["sequence_length"] == 4 and len(cache["inputs"]) == 4
    with_fault, without = _script(made), _script(made, "--faults", "off")
    assert with_fault.stdout.splitlines()[-1] == "FAIL: capture-mismatch", with_fault.stdout
    assert "(runs differ from run 3)" in with_fault.stdout
    assert without.stdout.splitlines()[-1] == "PASS", without.stdout + without.stderr
