"""OrtWebBackend end to end in headless Chromium with onnxruntime-web 1.30.0 from npm: the builtin
encoders on the three WebGPU builds, eager and capture, against onnxruntime on the CPU; the
WebGPU tracer's counts; capture refused, errors, timeouts and a stuck page; page and session
reuse, and explore's page per sequence. One backend (one browser) serves the module, but for
the test that compares two modes; keep the cases small, the machine is slow."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from runner.backends import open_backend
from runner.backends.base import BackendOptions, BackendRun, CaseWork
from runner.backends.ortweb import browser
from runner.backends.ortweb import page as page_module
from runner.backends.ortweb.backend import OrtWebBackend
from runner.backends.ortweb.browser import CHROMIUM_ENV, descendant_pids
from runner.backends.ortweb.diagnose import diagnose
from runner.backends.ortweb.package import BUILDS, pinned_version
from runner.compare import compare
from runner.errors import EnvironmentUnusable
from runner.matrix import Case
from runner.oracle import compute_reference
from runner.suite.spec import (
    BackendTarget,
    BufferModes,
    EncoderParams,
    Layout,
    ModelSpec,
    Shape,
    Suite,
    Tolerance,
)
from runner.workload import Workload, materialize
from tests.conftest import continuing, opening

pytestmark = pytest.mark.browser

BUNDLES = sorted(BUILDS)
SHAPE = Shape((("batch", 1), ("sequence", 8)))
USAGE_FLAGS = {"MAP_READ", "MAP_WRITE", "COPY_SRC", "COPY_DST", "INDEX", "VERTEX", "UNIFORM",
               "STORAGE", "INDIRECT", "QUERY_RESOLVE"}  # fmt: skip
ENCODERS = {
    "compact": EncoderParams(style="compact", layers=1, hidden=32, heads=4, ffn=64),
    "exported": EncoderParams(style="exported", layers=1, hidden=32, heads=2, ffn=64),
}


def open_ortweb(**options) -> OrtWebBackend:
    try:
        backend = OrtWebBackend(BackendOptions(**options))
        backend.environment()  # launches Chromium and asks for the adapter
    except EnvironmentUnusable as error:
        pytest.skip(f"ort-web cannot run here: {error}")
    return backend


@pytest.fixture(scope="module")
def backend():
    opened = open_ortweb(runs=3)
    yield opened
    opened.close()


def make_case(
    bundle: str,
    capture: bool,
    spec: ModelSpec | None = None,
    shape: Shape = SHAPE,
    timeout_s: float = 120.0,
) -> Case:
    spec = spec or ModelSpec("m")
    target = BackendTarget("ort-web", bundle)
    layout = Layout("default")
    suite = Suite(
        "ortweb-tests", Path("ortweb.yaml"), (spec,), (shape,), (layout,), (target,),
        timeout_s=timeout_s,
    )  # fmt: skip
    return Case(suite, spec, shape, layout, target, capture, Tolerance())


def encoder_case(style: str, bundle: str, capture: bool) -> tuple[Case, Workload]:
    spec = ModelSpec(f"encoder-{style}", builtin="encoder", encoder=ENCODERS[style])
    case = make_case(bundle, capture, spec)
    return case, materialize(case)


def model_workload(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> Workload:
    data = model.SerializeToString()
    outputs = tuple(o.name for o in model.graph.output)
    key = hashlib.sha256(data + b"".join(v.tobytes() for v in feeds.values())).hexdigest()
    return Workload(key, data, feeds, outputs, {})


def one_node_model(op: str, inputs: dict[str, int], output_type: int, **attrs) -> onnx.ModelProto:
    """``op`` over [2, 3, 3] inputs of the given element types (opset 20)."""
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), ["y"], **attrs)],
        op.lower(),
        [helper.make_tensor_value_info(n, t, [2, 3, 3]) for n, t in inputs.items()],
        [helper.make_tensor_value_info("y", output_type, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def assert_matches_onnxruntime(result: BackendRun, workload: Workload) -> None:
    assert result.status == "ok", result.message
    expected = compute_reference(workload)
    for number, run in enumerate(result.runs):
        for name, value in expected.items():
            comparison = compare(run[name], value, Tolerance())
            assert comparison.ok, f"run {number} output {name}: {comparison}"


def test_environment_names_versions_and_the_adapter(backend):
    environment = backend.environment()
    assert environment["ort_web_pinned"] == "1.30.0"
    assert environment["ort_web_versions"] == {"1.30.0": "1.30.0"}
    assert environment["bundles"] == {"1.30.0": {"jsep": "ort.mjs", "webgpu": "ort.webgpu.mjs",
                                                 "jspi": "ort.jspi.mjs"}}  # fmt: skip
    assert environment["chromium"].split(".")[0].isdigit()
    assert "--enable-unsafe-webgpu" in environment["chromium_flags"]
    adapter = environment["adapter"]
    assert adapter["vendor"] and adapter["architecture"]
    assert adapter["features"] == sorted(adapter["features"])


@pytest.mark.parametrize("bundle", BUNDLES)
def test_compact_encoder_eager_and_capture_match_onnxruntime(backend, bundle):
    for capture in (False, True):
        case, workload = encoder_case("compact", bundle, capture)
        result = backend.run(CaseWork(case, workload))
        assert_matches_onnxruntime(result, workload)
        assert len(result.runs) == 3 and result.timings.runs == 3
        assert result.timings.session_ms > 0 and result.timings.first_run_ms > 0
        assert result.timings.median_run_ms > 0
        assert (result.details["bundle"], result.details["ort_web_version"]) == (bundle, "1.30.0")
        assert result.details["warnings"] == []  # every node on the EP
        assert len(result.details["run_counts"]) == 3
        assert result.trace.errors == ()
    assert backend.page_loads()[bundle] == 1  # both cases in one page


@pytest.mark.parametrize("bundle", BUNDLES)
def test_tracer_sees_capture_replay_without_bind_groups(backend, bundle):
    """Eager rebuilds every bind group and uniform on every run; a captured replay none."""
    case, workload = encoder_case("compact", bundle, capture=False)
    eager = backend.run(CaseWork(case, workload))
    steps = len(eager.trace.dispatches)
    assert steps > 0
    assert eager.trace.replay_bind_groups_created == 2 * steps  # runs 2 and 3
    assert eager.trace.replay_uniform_writes == 2 * steps
    assert [counts["dispatchWorkgroups"] for counts in eager.details["run_counts"]] == [steps] * 3
    for counts in [eager.details["session_counts"], *eager.details["run_counts"]]:
        by_usage = {k: n for k, n in counts.items() if k.startswith("createBuffer[")}
        assert sum(by_usage.values()) == counts.get("createBuffer", 0)  # each by its usage
        assert {flag for k in by_usage for flag in k[13:-1].split("|")} <= USAGE_FLAGS

    case, workload = encoder_case("compact", bundle, capture=True)
    captured = backend.run(CaseWork(case, workload))
    assert captured.trace.bind_groups_created > 0  # recorded by the first run
    assert captured.trace.replay_bind_groups_created == 0
    assert captured.trace.replay_uniform_writes == 0
    replays = captured.details["run_counts"][1:]
    assert [r.get("setBindGroup") for r in replays] == [steps, steps]
    assert [r.get("createBuffer", 0) for r in replays] == [0, 0]
    pipelines = [d.pipeline for d in captured.trace.dispatches]
    assert pipelines == [d.pipeline for d in eager.trace.dispatches]
    roles = {b.role for d in captured.trace.dispatches for b in d.bindings}
    assert roles == {"input", "output", "weight", "intermediate", "uniform"}
    assert all(d.workgroups[0] >= 1 for d in captured.trace.dispatches)
    assert pipelines[0].startswith("LayerNorm")  # labelled by ORT's program names


def test_exported_encoder_takes_int64_token_ids_and_a_mask(backend):
    """Eager runs everywhere; under capture JSEP refuses the int64 mask arithmetic it leaves to
    the CPU, while the C++ EP builds take every node and capture."""
    for bundle in BUNDLES:
        case, workload = encoder_case("exported", bundle, capture=False)
        assert workload.inputs["input_ids"].dtype == np.int64
        assert_matches_onnxruntime(backend.run(CaseWork(case, workload)), workload)
        case, workload = encoder_case("exported", bundle, capture=True)
        result = backend.run(CaseWork(case, workload))
        if bundle == "jsep":
            assert result.status == "capture-unsupported"
            assert "graph capture" in result.message
            assert result.runs == ()
        else:
            assert_matches_onnxruntime(result, workload)
            assert result.trace.replay_bind_groups_created == 0


@pytest.mark.parametrize("bundle", BUNDLES)
def test_nodes_the_ep_cannot_take_make_capture_unsupported(backend, bundle):
    model = one_node_model("Det", {"x": TensorProto.FLOAT}, TensorProto.FLOAT)
    x = np.random.default_rng(0).standard_normal((2, 3, 3)).astype(np.float32)
    workload = model_workload(model, {"x": x})
    eager = backend.run(CaseWork(make_case(bundle, False), workload))
    assert_matches_onnxruntime(eager, workload)  # Det falls back to the CPU
    captured = backend.run(CaseWork(make_case(bundle, True), workload))
    assert captured.status == "capture-unsupported"
    assert "graph capture" in captured.message, captured.message
    # ORT's time up to the refusal is the backend's, not the harness's
    assert captured.timings.session_ms > 0 and captured.timings.runs == 0


def test_a_failing_case_is_an_error_and_the_page_goes_on(backend):
    model = one_node_model("Add", {"a": TensorProto.FLOAT, "b": TensorProto.FLOAT},
                           TensorProto.FLOAT)  # fmt: skip
    a = np.ones((2, 3, 3), np.float32)
    wrong = model_workload(model, {"a": a, "b": np.ones((2, 3, 3), np.int32)})
    loads = backend._loaded_page(pinned_version(), "webgpu").loads  # open, as it stays
    failed = backend.run(CaseWork(make_case("webgpu", False), wrong))
    assert failed.status == "error"
    assert "type" in failed.message.lower(), failed.message
    right = model_workload(model, {"a": a, "b": 2 * a})
    result = backend.run(CaseWork(make_case("webgpu", False), right))
    assert_matches_onnxruntime(result, right)
    assert backend.page_loads()["webgpu"] == loads  # no reload


def test_float16_runs_only_where_the_adapter_has_shader_f16(backend):
    model = one_node_model("Add", {"a": TensorProto.FLOAT16, "b": TensorProto.FLOAT16},
                           TensorProto.FLOAT16)  # fmt: skip
    a = np.linspace(-2, 2, 18, dtype=np.float16).reshape(2, 3, 3)
    workload = model_workload(model, {"a": a, "b": a})
    result = backend.run(CaseWork(make_case("jsep", True), workload))
    if "shader-f16" in backend.adapter["features"]:
        assert_matches_onnxruntime(result, workload)
        assert result.outputs["y"].dtype == np.float16
    else:
        assert result.status == "skipped"
        assert "shader-f16" in result.message


NOTHING_HELD = {"sessions": [], "outputs": 0, "buffers": 0, "deviceAlive": True}


def test_after_a_case_the_page_holds_nothing_the_case_made(backend):
    """Eager, capture with pre-allocated outputs, a case that fails in ORT: each leaves no
    session, GPU output or buffer behind, in one page; the page's own session keeps ORT's
    device alive (the C++ builds would destroy it with their last session)."""
    page = backend._loaded_page(pinned_version(), "webgpu")
    loads = page.loads
    for capture, fields in [(False, {}), (True, {"buffers": BufferModes(outputs="rewrite")})]:
        case, workload = sequence_case("webgpu", capture, **fields)
        assert backend.run(CaseWork(case, workload)).status == "ok"
        assert page.holdings() == NOTHING_HELD
    model = one_node_model("Add", {"a": TensorProto.FLOAT, "b": TensorProto.FLOAT},
                           TensorProto.FLOAT)  # fmt: skip
    a = np.ones((2, 3, 3), np.float32)
    wrong = model_workload(model, {"a": a, "b": np.ones((2, 3, 3), np.int32)})
    assert backend.run(CaseWork(make_case("webgpu", False), wrong)).status == "error"
    assert page.holdings() == NOTHING_HELD
    assert page.loads == loads  # all in one page


def test_the_browser_keeps_compiled_wasm_in_a_profile_of_its_own_until_closed():
    """Chromium runs on a profile on disk, so that its code cache keeps onnxruntime-web's
    compiled wasm for every later page (an in-memory context has none, and each page compiled
    about 20 MB of wasm again); the profile is the backend's, gone once it closes."""
    opened = open_ortweb()
    try:
        profile = Path(opened._profile.name)
        code_cache = profile / "Default" / "Code Cache" / "wasm"
        case, workload = sequence_case("jsep", False)
        assert opened.run(CaseWork(case, workload)).status == "ok"

        def cached() -> int:
            return sum(f.stat().st_size for f in code_cache.rglob("*") if f.is_file())

        # Chromium writes the module's code once its background compile is done: on a busy
        # machine after the run returned
        deadline = time.monotonic() + 120
        while cached() <= 1_000_000 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert cached() > 1_000_000  # the module's code, not an empty cache's index
    finally:
        opened.close()
    assert not profile.exists()


def test_a_revisited_case_keeps_its_session_until_its_revisit(backend):
    """Layouts A, B, then A again (revisit): A's session lives through B and is run again, not
    created again, then released; a kept session whose revisit never comes goes when its
    sequence closes, or else when the next one opens."""
    page = backend._loaded_page(pinned_version(), "webgpu")
    spec = ModelSpec("encoder-compact", builtin="encoder", encoder=ENCODERS["compact"])
    first = dataclasses.replace(make_case("webgpu", True, spec), revisited=True)
    second = dataclasses.replace(
        first, layout=Layout("eps", values=(("eps", 1e-2),)), revisited=False
    )
    workload = materialize(first)
    recorded = backend.run(opening(first, workload))
    assert recorded.trace.bind_groups_created > 0 and not recorded.details["reused_session"]
    held = page.holdings()
    assert held["sessions"] == [f"{workload.key}/capture"] and held["buffers"] > 0
    assert backend.run(continuing(second, materialize(second))).status == "ok"
    assert page.holdings() == held  # B ran next to A's session, and left nothing of its own

    revisit = backend.run(
        CaseWork(dataclasses.replace(first, revisit=True, revisited=False), workload, False, True)
    )
    assert revisit.details["reused_session"]
    assert revisit.timings.session_ms is None
    assert revisit.trace.bind_groups_created == 0  # every run, the first too, replays
    assert revisit.details["run_counts"][0]["dispatchWorkgroups"] == len(revisit.trace.dispatches)
    assert_matches_onnxruntime(revisit, workload)
    assert page.holdings() == NOTHING_HELD

    assert backend.run(CaseWork(first, workload)).status == "ok"  # a sequence of its own
    assert page.holdings() == NOTHING_HELD
    assert backend.run(opening(first, workload)).status == "ok"  # its revisit never comes
    assert page.holdings()["sessions"] == held["sessions"]
    other = make_case("webgpu", False, spec, shape=Shape((("batch", 1), ("sequence", 4))))
    assert backend.run(CaseWork(other, materialize(other))).status == "ok"
    assert page.holdings() == NOTHING_HELD


def pipelines_compiled(result: BackendRun) -> int:
    """Compute pipelines the case created: ORT compiles a program it has not cached."""
    assert result.status == "ok", result.message
    counts = [result.details["session_counts"], *result.details["run_counts"]]
    return sum(c.get("createComputePipeline", 0) for c in counts)


@pytest.mark.parametrize("bundle", ["jsep", "webgpu"])
def test_explores_examples_compile_every_shader_themselves_where_a_run_reuses_the_pages(bundle):
    """explore's isolation (``fresh_sequences``: each sequence on a new instance of the bundle,
    imported into the page) holds: the same model as the next example asks for every program
    again, so nothing of the first example's program cache reaches it, and gives the outputs
    a run's kept page gives, bit for bit; only the device pool (devicepool.js) answers those
    asks from what the page compiled. A run's kept page hands the second example the first
    one's programs: it asks for none. JSEP keeps its program cache for its instance, the C++
    builds theirs with the page's own session (docs/throughput.md, where an ort-web example's
    time goes)."""
    first, workload = sequence_case(bundle, True)
    again = dataclasses.replace(first, model=dataclasses.replace(first.model, name="again"))
    compiled, outputs = {}, {}
    for fresh in (True, False):
        backend = open_ortweb(runs=3, fresh_sequences=fresh)
        try:
            results = [backend.run(CaseWork(case, workload)) for case in (first, again)]
            compiled[fresh] = [pipelines_compiled(result) for result in results]
            outputs[fresh] = [result.runs for result in results]
            page = backend._pages[bundle]
            if fresh:
                pool = page._page.evaluate("() => window.__devicePool")
                assert page.loads == 1  # both examples in one page
        finally:
            backend.close()
    assert compiled[True][0] > 0
    assert compiled == {True: [compiled[True][0]] * 2, False: [compiled[True][0], 0]}
    # the pool made each of the first example's objects once and gave the second all of them
    assert pool["devices"] == 1 and pool["made"] > 0 and pool["reused"] >= compiled[True][0]
    # and each example's outputs are, bit for bit, what a run's kept page gives
    for fresh_runs, kept_runs in zip(outputs[True], outputs[False], strict=True):
        for fresh_run, kept_run in zip(fresh_runs, kept_runs, strict=True):
            for name, array in kept_run.items():
                np.testing.assert_array_equal(fresh_run[name], array)


def test_a_capture_that_throws_inside_onnxruntime_reloads_the_page(backend):
    """JSEP refusing a capture session (Det stays on the CPU) or a run (a new input buffer): the
    next case gets a fresh page, since later sessions in that page would be broken."""
    model = one_node_model("Det", {"x": TensorProto.FLOAT}, TensorProto.FLOAT)
    x = np.random.default_rng(0).standard_normal((2, 3, 3)).astype(np.float32)
    det = model_workload(model, {"x": x})
    fresh, fresh_workload = sequence_case("jsep", True, buffers=BufferModes(inputs="fresh"))
    for case, workload in [(make_case("jsep", True), det), (fresh, fresh_workload)]:
        assert (
            backend.run(CaseWork(make_case("jsep", False), det)).status == "ok"
        )  # the page is open
        loads = backend.page_loads()["jsep"]
        assert backend.run(CaseWork(case, workload)).status == "capture-unsupported"
        assert backend.run(CaseWork(make_case("jsep", False), det)).status == "ok"
        assert backend.page_loads()["jsep"] == loads + 1


def test_a_case_past_its_timeout_times_out_and_the_browser_is_relaunched(backend):
    case, workload = encoder_case("compact", "webgpu", capture=False)
    backend.run(CaseWork(case, workload))  # the page is open
    launches = backend.launches
    spec = ModelSpec("encoder-compact", builtin="encoder", encoder=ENCODERS["compact"])
    hurried = make_case("webgpu", False, spec, timeout_s=0.001)
    result = backend.run(CaseWork(hurried, materialize(hurried)))
    assert result.status == "timeout"
    assert "the next case runs in a new browser" in result.message
    assert backend.run(CaseWork(case, workload)).status == "ok"
    assert backend.launches == launches + 1
    assert backend.page_loads() == {"webgpu": 1}


def test_a_page_stuck_in_a_loop_is_killed_and_the_run_goes_on(backend, monkeypatch):
    monkeypatch.setattr(page_module, "KILL_GRACE_S", 0.5)  # the kill, not its patience, is tested
    case, workload = encoder_case("compact", "jsep", capture=False)
    assert backend.run(CaseWork(case, workload)).status == "ok"
    page = backend._loaded_page(pinned_version(), "jsep")
    launches = backend.launches
    page._page.evaluate("() => { setTimeout(() => { for (;;) {} }, 50); }")  # a wasm-like hang
    spec = ModelSpec("encoder-compact", builtin="encoder", encoder=ENCODERS["compact"])
    stuck = make_case("jsep", False, spec, timeout_s=0.5)
    result = backend.run(CaseWork(stuck, materialize(stuck)))
    assert result.status == "timeout"
    assert backend.run(CaseWork(case, workload)).status == "ok"
    assert backend.launches == launches + 1


def test_a_page_load_past_its_bound_fails_and_a_new_browser_runs_on(backend, monkeypatch):
    """A load that outlives LOAD_TIMEOUT_S (here shortened below a real load) kills Chromium:
    a hung load cannot hold the run; the next case launches a new browser."""
    case, workload = encoder_case("compact", "jsep", capture=False)
    backend._loaded_page(pinned_version(), "jsep").close()  # the next case loads it again
    launches = backend.launches
    monkeypatch.setattr(page_module, "LOAD_TIMEOUT_S", 0.05)
    result = backend.run(CaseWork(case, workload))
    assert result.status == "error"
    assert result.message.startswith("loading onnxruntime-web (ort.mjs) did not finish in 0.05 s")
    monkeypatch.undo()
    again = backend.run(CaseWork(case, workload))
    assert again.status == "ok", again.message
    assert backend.launches == launches + 1


def test_a_browser_killed_is_launched_again_even_while_playwright_thinks_it_connected(backend):
    """kill_browsers (a hung load's watchdog) is a SIGKILL: Playwright reads of it later, so
    the backend does not ask it whether the browser lives; it launches a new one."""
    backend.environment()
    launches = backend.launches
    browser.kill_browsers()
    backend._start()
    assert backend.launches == launches + 1
    case, workload = encoder_case("compact", "jsep", capture=False)
    assert backend.run(CaseWork(case, workload)).status == "ok"


def test_open_backend_finds_chromium_and_close_leaves_no_process():
    before = _chromium_processes()
    opened = open_backend("ort-web", BackendOptions())
    assert isinstance(opened, OrtWebBackend)
    opened.environment()
    assert _chromium_processes() - before
    opened.close()
    opened.close()  # idempotent
    assert not _chromium_processes() - before


def test_a_chromium_override_that_is_no_executable_is_unusable(monkeypatch):
    monkeypatch.setenv(CHROMIUM_ENV, "/nonexistent/chromium")
    with pytest.raises(EnvironmentUnusable, match=CHROMIUM_ENV):
        OrtWebBackend(BackendOptions())
    with pytest.raises(EnvironmentUnusable, match="--chromium"):
        OrtWebBackend(BackendOptions(chromium="/nonexistent/chrome"))
    monkeypatch.delenv(CHROMIUM_ENV)
    on_path = browser.find_chromium(None)
    assert on_path.found_by in ("PATH", "playwright")
    assert browser.find_chromium(str(on_path.path)) == browser.ChromiumExecutable(
        on_path.path, "--chromium"
    )


def test_diagnose_reports_every_check():
    checks = diagnose()
    assert [c.check for c in checks] == ["chromium", "playwright", "onnxruntime-web",
                                         "webgpu adapter"]  # fmt: skip
    assert all(c.ok for c in checks), checks
    assert "1.30.0" in checks[2].detail
    broken = diagnose(chromium="/nonexistent/chrome")
    assert broken[0].ok is False and "--chromium" in broken[0].detail
    assert len(broken) == 3  # no adapter check without a browser


def _chromium_processes() -> set[int]:
    """Chromium processes this test process started (and that are still running)."""
    found = set()
    for pid in descendant_pids(os.getpid()):
        try:
            status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if status != "Z" and b"chrom" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:
            pass
    return found


# -- new inputs every run, buffer modes, graphs, dynamic -------------------------------------------


def sequence_case(bundle: str, capture: bool, **fields) -> tuple[Case, Workload]:
    """The compact encoder with three rounds of new inputs (``fields``: buffers, graphs...)."""
    spec = ModelSpec("encoder-compact", builtin="encoder", encoder=ENCODERS["compact"])
    case = dataclasses.replace(make_case(bundle, capture, spec), **fields)
    return case, materialize(case, runs=3)


def errors_per_run(result: BackendRun, workload: Workload) -> list[float]:
    """Each run's max abs error against the reference for its own inputs."""
    assert result.status == "ok", result.message
    return [
        max(compare(run[k], v, Tolerance()).max_abs for k, v in expected.items())
        for run, feed in zip(result.runs, workload.feeds(3), strict=True)
        for expected in [compute_reference(workload, feed.variant)]
    ]


@pytest.mark.parametrize("bundle", BUNDLES)
def test_every_run_gets_new_inputs_in_every_buffer_mode_that_works(backend, bundle):
    """Rewriting the same input buffers, and the same pre-allocated output buffers, is right on
    every build; dynamic (no freeDimensionOverrides) too."""
    for capture, fields in [
        (False, {"dynamic": True}),
        (True, {}),
        (True, {"buffers": BufferModes(outputs="rewrite")}),
    ]:
        case, workload = sequence_case(bundle, capture, **fields)
        assert len({feed.variant for feed in workload.feeds(3)}) == 2
        result = backend.run(CaseWork(case, workload))
        assert max(errors_per_run(result, workload)) < 1e-3, fields
        assert result.trace.replay_bind_groups_created == 0 or not capture


@pytest.mark.parametrize("bundle", BUNDLES)
def test_a_new_input_buffer_per_run_replays_the_first_or_is_refused(backend, bundle):
    case, workload = sequence_case(bundle, True, buffers=BufferModes(inputs="fresh"))
    result = backend.run(CaseWork(case, workload))
    if bundle == "jsep":
        assert result.status == "capture-unsupported"
        assert result.message.startswith("run 2: Registering a different external buffer")
        return
    first = compute_reference(workload)
    for run in result.runs:  # every replay computes run 1's inputs again
        assert all(compare(run[k], v, Tolerance()).ok for k, v in first.items())
    assert min(errors_per_run(result, workload)[1:]) > 0.1


@pytest.mark.parametrize("bundle", BUNDLES)
def test_graph_ids_record_a_graph_each_on_the_cpp_builds(backend, bundle):
    # In a page of its own: on 1.30.0's jspi build, graph 1's first run traps ("unreachable")
    # after dynamic, capture, pre-allocated-output and new-input-buffer sessions of this encoder
    # were created and released in turn in the page (each case released, as the harness does)
    backend._loaded_page(pinned_version(), bundle).close()
    case, workload = sequence_case(bundle, True, graphs=2)
    assert [feed.graph for feed in workload.feeds(3)] == [0, 1] * 3
    result = backend.run(CaseWork(case, workload))
    if bundle == "jsep":  # one graph per session: the second graph's buffers are refused
        assert result.status == "capture-unsupported"
        assert result.message.startswith("run 2 (gpu_graph_id 1): Registering a different")
        return
    assert max(errors_per_run(result, workload)) < 1e-3
    assert [counts.get("createBindGroup", 0) > 0 for counts in result.details["run_counts"]] == [
        True, True, False, False, False, False,  # each graph's first run records
    ]  # fmt: skip
    assert result.trace.replay_bind_groups_created == 0 and result.trace.unrecorded_graphs == ()


@pytest.mark.parametrize("bundle", ["jsep", "webgpu"])
def test_a_layouts_preferred_layout_reaches_the_ep(backend, bundle):
    """A MaxPool runs in NHWC by default, between two Transposes (3 dispatches a run); a
    session of a layout preferring NCHW runs it as it is (1): the EP took the option. Both agree
    with onnxruntime CPU."""
    x = np.random.default_rng(0).uniform(-1, 1, (1, 4, 8, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        "maxpool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    workload = model_workload(model, {"x": x})
    dispatches = {}
    for preferred in (None, "NCHW", "NHWC"):
        run = backend.run(
            CaseWork(
                make_case(bundle, False), dataclasses.replace(workload, preferred_layout=preferred)
            )
        )
        assert_matches_onnxruntime(run, workload)
        dispatches[preferred] = len(run.trace.dispatches)
    assert dispatches == {None: 3, "NCHW": 1, "NHWC": 3}
