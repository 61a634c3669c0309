"""The ort-native backend: versions (onnxruntime + plugin pairs, onnxruntime-webgpu builds),
their environments, ONNX Runtime's C++ WebGPU EP run for real on lavapipe (Mesa 25, fetched into
the cache folder) on a machine without a GPU, the plugin's skip there, and the bindings and
faults on onnxruntime's CPU EP (``--adapter cpu``). Tests marked ``ort_gpu`` need a GPU that ONNX
Runtime's WebGPU EP finds: ``nox -s gpu`` runs them (README: GPU runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions, VersionProblem
from runner.backends.isolated import IsolatedBackend
from runner.backends.ortnative import versions
from runner.backends.ortnative.environments import install, site_for
from runner.backends.ortnative.replays import logged_errors, ort_log, replayed_graphs
from runner.backends.ortnative.versions import NativeVersion
from runner.errors import InvalidInput
from tests.conftest import REPO, regress

# Two lines onnxruntime 1.32.0 logged on an NVIDIA H200 (a replay; a session's plan); the
# second must not count.
REPLAY_LOG = [
    "2026-11-30 21:42:36.313447940 [I:onnxruntime:, inference_session.cc:3912 RunImpl] Replaying"
    " the captured WebGpuExecutionProvider graph for this model with tag:  with graph annotation"
    " id: 1",
    "2026-11-30 21:42:36.311112607 [I:onnxruntime:, inference_session.cc:3285 operator()] This "
    "session will use the graph capture feature as requested by the user with "
    "WebGpuExecutionProvider.",
    "2026-11-30 21:42:36.4 [E:onnxruntime:, sequential_executor.cc:572 ExecuteKernel] Non-zero "
    "status code returned while running MatMul node.",
]

SUITE = """
name: native
models:
  enc: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}
  two: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32, graphs: 2}
shapes:
  - {batch: 1, sequence: 8}
layouts:
  - label: base
  - label: eps
    values: {eps: 1.0e-2}
backends: [ort-native]
"""


def results_of(out) -> dict[str, dict]:
    """The stored results of the one run under `out`, by case id."""
    (folder,) = (out / "runs").iterdir()
    lines = (folder / "results.jsonl").read_text().splitlines()
    return {r["case_id"]: r for r in map(json.loads, lines)}


@pytest.mark.parametrize(
    ("text", "exact"),
    [
        ("1.31.1", f"1.31.1+ep{versions.PINNED_EP}"),
        ("ep0.3.0", f"{versions.PINNED_ORT}+ep0.3.0"),
        ("1.31.1+ep0.3.0", "1.31.1+ep0.3.0"),
        ("1.33.0rc1+ep0.5.0", "1.33.0rc1+ep0.5.0"),
        ("webgpu-1.25.1", "webgpu-1.25.1"),
    ],
)
def test_a_version_names_an_onnxruntime_and_plugin_pair_or_an_onnxruntime_webgpu(text, exact):
    assert NativeVersion.parse(text).exact == exact
    assert NativeVersion.parse(exact) == NativeVersion.parse(text)
    assert NativeVersion.parse(text).builtin == exact.startswith("webgpu-")


@pytest.mark.parametrize("gpu", [True, False])
def test_pinned_is_the_plugin_where_onnxruntime_finds_a_gpu_else_onnxruntime_webgpu(
    gpu, monkeypatch
):
    monkeypatch.setattr(versions, "gpu_found", lambda: gpu)
    pinned = f"{versions.PINNED_ORT}+ep{versions.PINNED_EP}" if gpu else "webgpu-1.27.0"
    assert NativeVersion.parse(None).exact == NativeVersion.parse("pinned").exact == pinned


@pytest.mark.parametrize("text", ["", "latest", "ep", "1.31.1+0.3.0", "ep0.3.0+1.31.1", "v1.2"])
def test_a_version_of_another_form_is_refused_with_the_forms(text):
    with pytest.raises(VersionProblem) as refused:
        NativeVersion.parse(text)
    assert "pinned" in refused.value.expected and "1.31.1+ep0.3.0" in refused.value.expected


def test_suites_name_versions_and_ids_carry_them(write_suite):
    path = write_suite(
        SUITE.replace("[ort-native]", "[{name: ort-native, version: [pinned, ep0.3.0]}]")
    )
    listed = regress("list", path)
    assert listed.returncode == 0, listed.stderr
    ids = listed.stdout.split()
    assert "enc/batch=1,sequence=8/layout=base/ort-native@pinned/eager" in ids
    assert "enc/batch=1,sequence=8/layout=base/ort-native@ep0.3.0/capture" in ids


def test_a_bad_version_in_a_suite_is_exit_2_with_file_and_line(write_suite):
    path = write_suite(SUITE.replace("[ort-native]", "[{name: ort-native, version: 'one.two'}]"))
    proc = regress("validate", path)
    assert proc.returncode == 2
    assert f"{path}:11:" in proc.stderr and "ort-native version 'one.two'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bisect_walks_the_component_that_differs(monkeypatch):
    published = {
        "onnxruntime": ["1.30.0", "1.31.0", "1.31.1", "1.32.0"],
        "onnxruntime-ep-webgpu": ["0.1.0", "0.2.1", "0.3.0", "0.4.0"],
    }
    monkeypatch.setattr(versions, "published", published.__getitem__)
    index = REGISTRY["ort-native"].history()
    assert index.between("1.31.0+ep0.4.0", "1.32.0+ep0.4.0") == [
        "1.31.0+ep0.4.0",
        "1.31.1+ep0.4.0",
        "1.32.0+ep0.4.0",
    ]
    assert index.between("ep0.2.1", "ep0.4.0") == [
        f"{versions.PINNED_ORT}+ep{v}" for v in ("0.2.1", "0.3.0", "0.4.0")
    ]
    assert "v1.31.0...v1.32.0" in index.compare_url("1.31.0", "1.32.0")
    with pytest.raises(InvalidInput, match="differ in both"):
        index.between("1.31.0+ep0.3.0", "1.32.0+ep0.4.0")
    with pytest.raises(InvalidInput, match="not a published version"):
        index.between("1.29.9", "1.32.0")


def test_replays_are_read_from_onnxruntimes_log_lines():
    assert replayed_graphs(REPLAY_LOG) == [1]
    assert logged_errors(REPLAY_LOG) == ["Non-zero status code returned while running MatMul node."]


def test_the_log_of_a_block_is_what_was_written_to_descriptor_2():
    with ort_log() as lines:
        os.write(2, b"first\nsecond\n")
    assert lines == ["first", "second"]


def test_the_descriptor_imports_no_onnxruntime():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, runner.backends; print('onnxruntime' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout.strip() == "False", proc.stderr


@pytest.mark.pypi
@pytest.mark.skipif(os.environ.get("REGRESS_GPU_TESTS") == "1", reason="a GPU is promised here")
def run_json(out) -> dict:
    (folder,) = (out / "runs").iterdir()
    return json.loads((folder / "run.json").read_text())


@pytest.mark.pypi
def test_without_a_gpu_the_cpp_ep_runs_on_lavapipe_and_says_so(write_suite, tmp_path):
    """No GPU here: pinned is onnxruntime-webgpu on lavapipe (Mesa 25 in the cache folder), every
    case runs on ONNX Runtime's C++ WebGPU EP, each replay proved by onnxruntime's log, and the
    run names the build and the Vulkan driver the process loaded. The plugin, named, finds no
    GPU: its cases skip with the reason; on lavapipe it is refused, naming the build that runs."""
    assert not versions.gpu_found()
    path = write_suite(SUITE)
    proc = regress("run", path, "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    results = results_of(tmp_path / "out")
    assert len(results) == 10 and {r["verdict"] for r in results.values()} == {"pass"}
    assert {r["version"] for r in results.values()} == {"webgpu-1.27.0"}
    captured = [r for r in results.values() if r["capture"] == "capture"]
    assert captured and all(r["trace"]["replay_reruns"] == 0 for r in captured)
    [environment] = run_json(tmp_path / "out")["environment"]["backends"]["ort-native"][
        "versions"
    ].values()
    assert environment["build"] == "onnxruntime-webgpu"
    assert environment["onnxruntime"] == "1.27.0" and environment["onnxruntime_ep_webgpu"] is None
    assert environment["device"].startswith("lavapipe (Mesa's Vulkan on the CPU): ")
    assert "/mesa/25.0.7" in environment["device"]

    plugin = f"{versions.PINNED_ORT}+ep{versions.PINNED_EP}"
    for extra, said in [
        ((), "no WebGPU EP device: ONNX Runtime found no GPU"),
        (("--adapter", "lavapipe"), "never on lavapipe: name an onnxruntime-webgpu build"),
    ]:
        out = tmp_path / f"plugin{len(extra)}"
        regress("run", path, "--ort-native-version", plugin, *extra, "--out", out)
        for result in results_of(out).values():
            assert result["verdict"] == "skipped" and said in result["message"]
    checks = {check.check: check for check in REGISTRY["ort-native"].checks()}
    assert checks["onnxruntime-webgpu on lavapipe"].ok
    assert not checks["the plugin on a GPU"].ok and checks["the plugin on a GPU"].skips


@pytest.mark.pypi
def test_a_webgpu_ep_that_will_not_start_fails_its_cases_never_the_cpu(
    write_suite, tmp_path, monkeypatch
):
    """Dawn without an adapter (an ICD file naming no driver): onnxruntime would fall back to
    its CPU EP without raising; the cases skip with the EP's own error instead."""
    monkeypatch.setenv("REGRESS_LAVAPIPE_ICD", str(tmp_path / "no-driver.json"))
    (tmp_path / "no-driver.json").write_text('{"file_format_version": "1.0.0", "ICD": {}}')
    path = write_suite(SUITE)
    regress("run", path, "--out", tmp_path / "out")
    for result in results_of(tmp_path / "out").values():
        assert result["verdict"] == "skipped"
        assert "WebGPU EP did not start" in result["message"], result["message"]


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("ort-native", marks=pytest.mark.pypi),
        pytest.param("wgpu", marks=pytest.mark.gpu),
    ],
)
def test_float16_captures_on_lavapipe_and_a_stale_layout_shows(tmp_path, backend):
    """suites/float16.yaml on lavapipe (shader-f16), ONNX Runtime's C++ EP and wgpu: a float16
    MLP and encoder in three layouts, eager and captured within float16's tolerance of
    onnxruntime CPU, every replay without a rerun. With captures keyed on shapes alone
    (``shape-only-capture-cache``), the content variant replays the first layout's capture and
    ``stale-layout`` says so, on both models and nowhere else."""
    selected = ["run", "suites/float16.yaml", "--filter", f"backend={backend}"]
    clean = regress(*selected, "--out", tmp_path / "clean")
    assert clean.returncode == 0, clean.stderr
    results = list(results_of(tmp_path / "clean").values())
    assert len(results) == 14 and {r["verdict"] for r in results} == {"pass"}
    # each result names the adapter as the backend's process found it: the driver it loaded
    adapter = {"ort-native": "lavapipe (Mesa's Vulkan on the CPU): ", "wgpu": "llvmpipe ("}
    assert all(r["adapter"].startswith(adapter[backend]) for r in results), results[0]["adapter"]
    assert all(r["trace"]["replay_reruns"] == 0 for r in results if r["capture"] != "eager")
    mlp = max(r["max_abs_error"] for r in results if r["model"] == "float16-mlp")
    assert 0 < mlp <= 3.90625e-3  # float16's rounding, not zero

    regress(*selected, "--inject", "shape-only-capture-cache", "--out", tmp_path / "fault")
    failed = {
        i: r["verdict"] for i, r in results_of(tmp_path / "fault").items() if r["verdict"] != "pass"
    }
    assert failed == {
        f"float16-mlp/layout=eps-0.5/{backend}/capture": "stale-layout",
        f"encoder-small-f16/batch=1,sequence=16/layout=eps-0.5/{backend}/capture": "stale-layout",
    }


@pytest.mark.pypi
def test_float16_decoders_decode_under_capture_on_lavapipe_and_a_stale_input_shows(tmp_path):
    """suites/float16-decoder.yaml on ONNX Runtime's C++ EP (lavapipe): the tiny Llama decoder
    in float16, plain and q4f16 (4-bit weights), prefilled on the device, every decode step
    captured and replayed in two uniform orders, each step within the suite's stated float16
    tolerance of onnxruntime CPU's float16 loop. With the recording run's inputs bound in place
    of the application's (``input-snapshot-at-capture``), every capture case is stale-input."""
    selected = ["run", "suites/float16-decoder.yaml", "--filter", "backend=ort-native"]
    clean = regress(*selected, "--out", tmp_path / "clean")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    results = list(results_of(tmp_path / "clean").values())
    assert len(results) == 10 and {r["verdict"] for r in results} == {"pass"}
    assert all(r["trace"]["replay_reruns"] == 0 for r in results if r["capture"] != "eager")
    assert all(0 < r["max_abs_error"] <= 1.5625e-2 for r in results)  # float16's rounding

    regress(*selected, "--inject", "input-snapshot-at-capture", "--out", tmp_path / "fault")
    faulty = results_of(tmp_path / "fault").values()
    verdicts = sorted((r["capture"], r["verdict"]) for r in faulty)
    assert verdicts == [("capture", "stale-input")] * 6 + [("eager", "pass")] * 4


@pytest.mark.pypi
def test_the_ort_native_canaries_fire_on_lavapipe(tmp_path):
    """suites/canaries.yaml's ort-native canaries on real capture (lavapipe): each fault seen by
    its detector, the clean cases passing."""
    out = tmp_path / "out"
    proc = regress("run", "suites/canaries.yaml", "--filter", "backend=ort-native", "--out", out)
    assert proc.returncode == 0, proc.stderr
    verdicts = {r["verdict"] for r in results_of(out).values() if r["injected"]}
    assert verdicts == {"stale-layout", "stale-input", "wrong-graph", "capture-not-engaged"}


@pytest.mark.pypi
def test_bindings_and_faults_run_on_onnxruntimes_cpu_ep(write_suite, tmp_path):
    """The capture path's bindings (fixed values written in place, a binding per graph) on the
    CPU EP: outputs right for every run's inputs, each API-level fault seen by its detector,
    and, since the CPU EP captures nothing, every replay seen re-executing the model."""
    path = write_suite(SUITE)
    clean = regress("run", path, "--adapter", "cpu", "--out", tmp_path / "clean")
    results = results_of(tmp_path / "clean")
    for case_id, result in results.items():
        expected = {"capture-not-engaged"} if "/capture" in case_id else {"pass"}
        assert set(result["verdicts"]) == expected, (case_id, result["message"])
    assert clean.returncode == 1  # the capture cases: capture-not-engaged, expected pass
    faults = {
        "shape-only-capture-cache": (
            "enc/batch=1,sequence=8/layout=eps/ort-native/capture",
            "stale-layout",
        ),
        "input-snapshot-at-capture": (
            "enc/batch=1,sequence=8/layout=base/ort-native/capture",
            "stale-input",
        ),
        "graphs-share-inputs": (
            "two/batch=1,sequence=8/layout=base/ort-native/capture",
            "wrong-graph",
        ),
    }
    for fault, (case_id, verdict) in faults.items():
        out = tmp_path / fault
        regress("run", path, "--adapter", "cpu", "--inject", fault, "--out", out)
        results = results_of(out)
        assert verdict in results[case_id]["verdicts"], (fault, results[case_id]["message"])
        eager = results[case_id.replace("/capture", "/eager")]
        assert eager["verdicts"] == ["pass"]


SCENARIOS = """
name: native-scenarios
models:
  enc: {builtin: encoder, layers: 1}
shapes: [{batch: 1, sequence: 8}]
backends: [ort-native]
exclude: [{model: enc}]
scenarios:
  - name: eager
    model: enc
    sessions: {e: {capture: false}}
    steps:
      - run: e
      - run: e
        inputs: fresh
      - release: e
      - create: e
      - run: e
  - name: captured
    model: enc
    sessions: {p: {outputs: rewrite}, q: {}}
    steps:
      - run: p
      - run: q
      - run: p
      - release-graph: p
      - run: p
        graph: 1
"""


@pytest.mark.pypi
def test_scenarios_run_their_steps_on_onnxruntimes_cpu_ep(write_suite, tmp_path):
    """Every step of the vocabulary through the Python API (release-graph is
    release_captured_graph), judged run by run: right outputs for each run's inputs, the CPU
    EP's replays seen re-executing the model, and an injected fault named at its step."""
    path = write_suite(SCENARIOS)
    regress("run", path, "--adapter", "cpu", "--out", tmp_path / "clean")
    clean = results_of(tmp_path / "clean")
    assert clean["scenario=eager/ort-native"]["verdicts"] == ["pass"]
    captured = clean["scenario=captured/ort-native"]
    assert captured["verdicts"] == ["capture-not-engaged"]
    assert captured["message"].startswith("step 3 (run: p, line 24): 1 replays executed")
    regress(
        "run",
        path,
        "--adapter",
        "cpu",
        "--inject",
        "input-snapshot-at-capture",
        "--out",
        tmp_path / "fault",
    )
    faulty = results_of(tmp_path / "fault")["scenario=captured/ort-native"]
    assert "stale-input" in faulty["verdicts"], faulty["message"]
    assert faulty["message"].startswith("step 3 (run: p, line 24)")


@pytest.mark.pypi
def test_each_version_installs_apart_and_runs_in_a_child_of_its_own(tmp_path, monkeypatch):
    """The versions axis for real: onnxruntime 1.31.1 (not the runner's own) with the plugin,
    installed by pip into the cache, imported only by the child that runs that version."""
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path / "cache"))
    version = NativeVersion.parse("1.31.1")
    site = install(version)
    assert site == site_for(version) and (site / "onnxruntime").is_dir()
    child = IsolatedBackend(
        "ort-native",
        "runner.backends.ortnative.ep:EpBackend",
        BackendOptions(adapter="cpu"),
        path=(str(site),),
    )
    try:
        environment = child.environment()
    finally:
        child.close()
    assert (environment["onnxruntime"], environment["onnxruntime_ep_webgpu"]) == (
        "1.31.1",
        versions.PINNED_EP,
    )


# --- on a GPU (nox -s gpu) ---------------------------------------------------------------------


@pytest.mark.ort_gpu
def test_bundled_smoke_suite_captures_on_the_gpu(tmp_path):
    proc = regress(
        "run", REPO / "suites/smoke.yaml", "--filter", "backend=ort-native", "--out", tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = results_of(tmp_path)
    assert results and all(r["verdict"] == "pass" for r in results.values())
    for case_id, result in results.items():
        if "/capture" in case_id:
            assert result["trace"]["replay_reruns"] == 0


@pytest.mark.ort_gpu
def test_canaries_are_caught_on_the_gpu(tmp_path):
    proc = regress(
        "run", REPO / "suites/canaries.yaml", "--filter", "backend=ort-native", "--out", tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = {r["verdict"] for r in results_of(tmp_path).values()}
    assert {"stale-layout", "capture-not-engaged", "stale-input", "wrong-graph"} <= verdicts


@pytest.mark.ort_gpu
def test_a_new_buffer_after_capture_is_refused_by_the_api(tmp_path):
    proc = regress(
        "run",
        REPO / "suites/bugs/ort-fresh-buffers.yaml",
        "--backend",
        "ort-native",
        "--out",
        tmp_path,
    )
    results = results_of(tmp_path)
    fresh = [r for i, r in results.items() if i.startswith("fresh-") and i.endswith("/capture")]
    assert len(fresh) == 2
    for result in fresh:
        assert result["verdict"] == "capture-unsupported"
        assert "release_captured_graph" in result["message"]
    kept = [r for i, r in results.items() if i.startswith("kept-")]
    assert kept and all(r["verdict"] == "pass" for r in kept)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.pypi
def test_bisect_probes_plugin_versions_from_pypi_each_in_its_environment(write_suite, tmp_path):
    """A real bisect over onnxruntime-ep-webgpu 0.2.1 .. 0.4.0 (PyPI's list, each version
    installed), on the CPU EP: every probe runs, and none differs from the first."""
    path = write_suite(
        """
        name: one
        models: {enc: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}}
        shapes: [{batch: 1, sequence: 8}]
        backends: [ort-native]
        """
    )
    case = "enc/batch=1,sequence=8/layout=default/ort-native/capture"
    proc = regress(
        "bisect", case, path, "--good", "ep0.2.1", "--bad", "ep0.4.0", "--adapter", "cpu",
        "--out", tmp_path / "out", env={"REGRESS_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said  # nothing differs
    pin = versions.PINNED_ORT
    assert f"3 probe(s) over 3 versions ({pin}+ep0.2.1 .. {pin}+ep0.4.0)" in said
    assert f"{pin}+ep0.3.0: capture-not-engaged" in said
    assert sorted(p.name for p in (tmp_path / "cache/ort-native").iterdir()) == [
        f"{pin}+ep{v}" for v in ("0.2.1", "0.3.0", "0.4.0")
    ]


@pytest.mark.ort_gpu
def test_scenarios_capture_on_the_gpu_and_a_rebinding_is_the_apis_refusal(write_suite, tmp_path):
    rebinding = """  - name: rebinding
    model: enc
    sessions: {p: {}}
    steps:
      - run: p
      - run: p
        inputs: fresh
    expect: capture-unsupported
"""
    proc = regress("run", write_suite(SCENARIOS + rebinding), "--out", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = results_of(tmp_path)
    assert results["scenario=captured/ort-native"]["verdict"] == "pass"
    refused = results["scenario=rebinding/ort-native"]
    assert refused["message"].startswith("step 2 (run: p, inputs: fresh, line"), refused
