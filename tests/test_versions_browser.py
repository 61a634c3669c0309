"""Real onnxruntime-web versions from npm, installed into the cache and run in headless Chromium:
two versions in one run, a version that lacks a build, the first WebGPU release (a UMD script),
concurrent installs, and `bisect` between 1.24.3 and 1.30.0, whose answer is checked by running
the two versions it names."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

from .conftest import REPO, regress

pytestmark = [pytest.mark.browser, pytest.mark.npm]

# What smoke.yaml's bert-tiny-exported is: the int64 attention-mask path that 1.24.3's C++ EP
# leaves on the CPU (so it refuses to capture), which later versions capture.
SUITE = """
name: versions
models:
  bert:
    builtin: encoder
    style: exported
    layers: 1
    hidden: 32
    heads: 2
    ffn: 64
    vocab: 100
shapes: [{{batch: 1, sequence: 16}}]
backends:
  - {{name: ort-web, version: {versions}, bundle: {builds}}}
"""
CASE = "bert/batch=1,sequence=16/layout=default/ort-web:webgpu/capture"


def results(out) -> list[dict]:
    [jsonl] = out.glob("runs/*/results.jsonl")
    return [json.loads(line) for line in jsonl.read_text().splitlines()]


def test_two_versions_run_side_by_side(write_suite, tmp_path):
    suite = write_suite(SUITE.format(versions="['1.24.3', '1.30.0']", builds="webgpu"))
    proc = regress("run", suite, "--out", tmp_path, "--runs", "2", "--no-localize")
    verdicts = {(r["version"], r["capture"]): r["verdict"] for r in results(tmp_path)}
    assert verdicts == {
        ("1.24.3", "eager"): "pass",
        ("1.24.3", "capture"): "capture-unsupported",
        ("1.30.0", "eager"): "pass",
        ("1.30.0", "capture"): "pass",
    }
    assert proc.returncode == 1  # the refusal is not expected by this suite
    # every result names the adapter Chromium's page found: SwiftShader
    assert {r["adapter"] for r in results(tmp_path)} == {"google swiftshader"}
    ids = {r["case_id"] for r in results(tmp_path)}
    assert "bert/batch=1,sequence=16/layout=default/ort-web@1.24.3:webgpu/capture" in ids
    [run] = [json.loads(p.read_text()) for p in tmp_path.glob("runs/*/run.json")]
    assert run["environment"]["ort_web_versions"] == {"1.24.3": "1.24.3", "1.30.0": "1.30.0"}
    ran = run["environment"]["backends"]["ort-web"]["ort_web_versions"]
    assert ran == {"1.24.3": "1.24.3", "1.30.0": "1.30.0"}  # each package.json's own version


def test_a_version_without_a_build_skips_its_cases(write_suite, tmp_path):
    suite = write_suite(SUITE.format(versions="'1.22.0'", builds="[jsep, jspi]"))
    proc = regress("run", suite, "--out", tmp_path, "--runs", "2", "--no-localize")
    by_build = {(r["bundle"], r["capture"]): r for r in results(tmp_path)}
    assert by_build["jsep", "eager"]["verdict"] == "pass"
    for mode in ("eager", "capture"):
        skipped = by_build["jspi", mode]
        assert (skipped["verdict"], skipped["outcome"]) == ("skipped", "skipped")
        assert skipped["message"] == (
            "onnxruntime-web 1.22.0 has no jspi build (its dist/ lacks *.jspi.wasm)"
        )
        assert skipped["adapter"] is None  # nothing ran it
    assert proc.returncode in (0, 1), proc.stderr


def test_the_first_webgpu_release_loads_as_a_umd_script(write_suite, tmp_path):
    # 1.15.0's only WebGPU bundle is ort.webgpu.min.js (JSEP), a <script> defining
    # globalThis.ort; it has no GPU tensors yet, so its capture cases are skipped, saying why
    suite = write_suite(SUITE.format(versions="'1.15.0'", builds="jsep"))
    proc = regress("run", suite, "--out", tmp_path, "--runs", "2", "--no-localize")
    by_mode = {r["capture"]: r for r in results(tmp_path)}
    assert by_mode["eager"]["verdict"] == "pass", by_mode["eager"]["message"]
    assert (by_mode["capture"]["verdict"], by_mode["capture"]["message"]) == (
        "skipped",
        "onnxruntime-web 1.15.0 (ort.webgpu.min.js) cannot capture: it has no "
        "Tensor.fromGpuBuffer (GPU tensors and graph capture came in 1.17.0)",
    )
    assert proc.returncode == 0, proc.stderr


def test_concurrent_installs_of_one_version_leave_one_complete_folder(tmp_path):
    install = "from runner.backends.ortweb.package import package_for; package_for('1.22.0')"
    env = {"REGRESS_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", install], cwd=REPO, env={**os.environ, **env})
        for _ in range(2)
    ]
    assert [proc.wait(timeout=600) for proc in procs] == [0, 0]
    folder = tmp_path / "onnxruntime-web"
    assert sorted(p.name for p in folder.iterdir()) == ["1.22.0"]  # no staging left behind
    assert (folder / "1.22.0" / ".complete").is_file()
    manifest = folder / "1.22.0" / "node_modules" / "onnxruntime-web" / "package.json"
    assert json.loads(manifest.read_text())["version"] == "1.22.0"


@pytest.mark.slow  # 80 s; tests/test_versions.py and test_selection.py test bisect on wgpu
def test_bisect_finds_where_a_capture_refusal_ends(write_suite, tmp_path):
    suite = write_suite(SUITE.format(versions="'1.30.0'", builds="webgpu"))
    out = tmp_path / "bisect"
    proc = regress(
        "bisect",
        CASE,
        suite,
        "--good",
        "1.24.3",
        "--bad",
        "1.30.0",
        "--out",
        out,
        "--runs",
        "2",
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr
    said = proc.stderr
    candidates = int(re.search(r"over (\d+) versions \(1\.24\.3 \.\. 1\.30\.0\)", said).group(1))
    probes = int(re.search(r"(\d+) probe\(s\)", said).group(1))
    assert candidates == 14 and probes <= math.ceil(math.log2(candidates)) + 1
    last = re.search(r"last agreeing: (\S+) \((\S+)\)", said).groups()
    first = re.search(r"first differing: (\S+) \((\S+), was (\S+)\)", said).groups()
    assert last[1] == first[2] == "capture-unsupported" and first[1] != last[1]
    assert re.search(
        r"compare: https://github\.com/microsoft/onnxruntime/compare/\S+\.\.\.\S+", said
    )
    assert len(list(out.glob("runs/*/run.json"))) == probes  # every probe is a stored run

    # The answer holds when the two versions it names run the case again.
    check = tmp_path / "check"
    regress(
        "run",
        suite,
        "--out",
        check,
        "--ort-web-version",
        last[0],
        "--ort-web-version",
        first[0],
        "--filter",
        "capture=capture",
        "--runs",
        "2",
        "--no-localize",
    )
    verdicts = {r["version"]: r["verdict"] for r in results(check)}
    assert verdicts == {last[0]: last[1], first[0]: first[1]}
