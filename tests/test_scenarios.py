"""Scenarios: the vocabulary's FILE:LINE errors, the feeds, a wgpu scenario clean and with an
injected fault (naming the failing step) and its repro bundle, the held-output TypeError on
onnxruntime-web, and explore's scenarios sharing one page there."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runner.backends import REGISTRY
from runner.compare import NUMPY
from runner.errors import InvalidInput
from runner.measure import Tolerance
from runner.scenario.judging import judge_steps
from runner.scenario.values import ScenarioRun, StepRun
from runner.schedule import Feed
from runner.step import judged_scenario
from runner.suite.loader import load_suite

from .conftest import REPO, regress

HEADER = """name: scenarios
models:
  enc:
    builtin: encoder
    layers: 1
shapes: [{batch: 1, sequence: 8}]
backends: [wgpu]
exclude: [{model: enc}]
scenarios:
  - name: s
    model: enc
    sessions:
      p: {outputs: rewrite}
      h: {}
    steps:
"""

CLEAN_STEPS = """      - run: p
      - run: h
        hold: true
      - run: p
      - run: p
        inputs: fresh
      - run: p
        inputs: same
      - run: p
        graph: 1
      - release-graph: p
      - run: p
      - dispose: h
      - release: p
      - create: p
      - run: p
"""


def _suite(tmp_path: Path, steps: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(HEADER + steps)
    return path


def _problems(path: Path) -> list[tuple[int, str]]:
    with pytest.raises(InvalidInput) as raised:
        load_suite(path, REGISTRY)
    return [(p.line, p.message) for p in raised.value.problems]


def test_a_step_on_an_unknown_or_released_session_is_refused_at_its_line(tmp_path):
    path = _suite(
        tmp_path,
        "      - run: q\n"  # line 16
        "      - run: p\n"
        "        inputs: same\n"  # 18: nothing to repeat
        "      - release: p\n"
        "      - run: p\n"  # 20: released
        "      - dispose: h\n",  # 21: never created
    )
    assert _problems(path) == [
        (16, "unknown session 'q'"),
        (17, "inputs: same, but session 'p' has not run graph 0"),
        (20, "session 'p' was released"),
        (21, "session 'h' does not exist here"),
    ]


def test_a_misspelt_step_is_a_schema_error_at_its_line_with_exit_2(tmp_path):
    path = _suite(tmp_path, "      - run: p\n      - rerun: p\n")
    result = regress("validate", path)
    assert result.returncode == 2
    assert f"{path}:17:" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_runs_with_new_inputs_draw_their_own_and_same_repeats_the_sessions_last(tmp_path):
    scenario = load_suite(_suite(tmp_path, CLEAN_STEPS), REGISTRY).scenarios[0]
    feeds = [f for f in scenario.feeds() if f is not None]
    assert feeds[:4] == [Feed(0, (0, d)) for d in range(4)]
    assert feeds[4] == feeds[3]  # inputs: same
    assert feeds[5] == Feed(1, (1, 4))


def test_a_failure_after_the_last_step_is_the_last_steps_named_as_the_clean_ups(tmp_path):
    """scenario.mjs reports every step and an error of its clean-up when disposing an output
    held past its session's release throws (it traps the C++ builds): judged at the last step,
    saying so, not at step 1 as when the page lost the steps."""
    steps = "      - run: p\n        hold: true\n      - release: p\n"
    scenario = load_suite(_suite(tmp_path, steps), REGISTRY).scenarios[0]
    feeds = scenario.feeds()
    output = {"y": np.arange(4, dtype=np.float32)}
    references = {feeds[0].variant: output}
    message = "the clean-up after the last step failed, disposing the outputs p held: unreachable"
    run = ScenarioRun("error", message, (StepRun(output, records=True), StepRun()))
    judged = judge_steps(judged_scenario(scenario, Tolerance()), run, feeds, references, NUMPY)
    assert (judged.step, judged.failing) == (1, True)
    assert judged.judgement.verdicts == {"error"}
    assert judged.judgement.message == f"step 2 (release: p, line 18): {message}"


def _run(path: Path, out: Path, *extra: str) -> tuple[int, dict]:
    result = regress("run", path, "--out", out, "-q", *extra)
    (lines,) = [p.read_text() for p in (out / "runs").glob("*/results.jsonl")][-1:]
    return result.returncode, json.loads(lines.splitlines()[-1])


@pytest.mark.gpu
def test_a_wgpu_scenario_passes_clean_and_names_the_step_a_fault_fails(tmp_path):
    path = _suite(tmp_path, CLEAN_STEPS)
    code, clean = _run(path, tmp_path / "clean")
    assert (code, clean["case_id"], clean["verdict"]) == (0, "scenario=s/wgpu", "pass")
    assert clean["adapter"].startswith("llvmpipe (")  # the device wgpu opened for its steps
    code, faulty = _run(path, tmp_path / "faulty", "--inject", "input-snapshot-at-capture")
    assert (code, faulty["verdict"], faulty["outcome"]) == (1, "stale-input", "unexpected")
    assert faulty["message"].startswith("step 3 (run: p, line 19)")
    assert faulty["stale_from"] == "run 1"
    (run_json,) = (tmp_path / "faulty" / "runs").glob("*/run.json")
    assert "adapter" in json.loads(run_json.read_text())["environment"]["backends"]["wgpu"]

    # Its repro bundle, moved elsewhere, replays the steps and judges them as the suite did;
    # without the fault, the same steps pass.
    made = tmp_path / "made"
    bundled = regress(
        "repro", faulty["result_id"], "--reports", tmp_path / "faulty", "--out", made,
        "--with-fault",
    )  # fmt: skip
    assert bundled.returncode == 0, bundled.stderr
    assert "reproduced: stale-input" in bundled.stdout
    bundle = shutil.move(made, tmp_path / "elsewhere")
    script = [sys.executable, "repro.py"]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    with_fault = subprocess.run(script, cwd=bundle, env=env, capture_output=True, text=True)
    assert with_fault.returncode == 1, with_fault.stdout + with_fault.stderr
    assert with_fault.stdout.splitlines()[-2:] == [faulty["message"], "FAIL: stale-input"]
    without = subprocess.run(
        [*script, "--faults", "off"], cwd=bundle, env=env, capture_output=True, text=True
    )
    assert without.returncode == 0, without.stdout + without.stderr
    assert without.stdout.splitlines()[-1] == "PASS"


@pytest.mark.gpu
def test_a_capture_session_that_runs_eager_is_capture_not_engaged_at_its_first_replay(tmp_path):
    """The fault reaches scenarios as it reaches cases: every run of a capture session makes its
    bind groups anew, and the first replay (step 3, p's second run) shows it."""
    code, faulty = _run(
        _suite(tmp_path, CLEAN_STEPS), tmp_path / "out", "--inject", "capture-falls-back-to-eager"
    )
    assert (code, faulty["verdict"]) == (1, "capture-not-engaged")
    assert faulty["message"].startswith("step 3 (run: p, line 19)"), faulty["message"]
    assert "replays created" in faulty["message"]


@pytest.mark.gpu
def test_the_run_timeout_stops_scenarios_as_it_stops_cases(tmp_path):
    path = _suite(tmp_path, "      - run: p\n")
    result = regress("run", path, "--out", tmp_path, "-q", "--run-timeout", "0.000001")
    (run_json,) = (tmp_path / "runs").glob("*/run.json")
    run = json.loads(run_json.read_text())
    assert (run["status"], run["message"]) == (
        "incomplete",
        "run timeout: 1e-06 s passed with 1 case(s) not run",
    ), result.stderr


@pytest.mark.browser
def test_the_held_output_type_error_on_the_pinned_cpp_build(tmp_path):
    """Replaying a capture session with pre-allocated outputs while another session's GPU
    output is held throws on onnxruntime-web 1.30.0's C++ builds (suites/bugs)."""
    code, result = _run(
        REPO / "suites" / "bugs" / "ort-held-output.yaml",
        tmp_path,
        "--backend",
        "ort-web:webgpu",
        "--no-localize",
    )
    assert (code, result["verdict"], result["outcome"]) == (0, "error", "expected")
    assert result["message"] == (
        "step 3 (run: preallocated, line 36): Cannot set properties of undefined "
        "(setting 'Symbol(gpuBufferMetadata)')"
    )


@pytest.mark.browser
def test_an_output_disposed_after_its_release_is_named_the_clean_ups_error(tmp_path):
    """The C++ builds trap when the page's clean-up disposes an output held past its session's
    release: every step is reported and the error named as the clean-up's (suites/bugs)."""
    code, result = _run(
        REPO / "suites" / "bugs" / "ort-output-after-release.yaml",
        tmp_path,
        "--backend",
        "ort-web:webgpu",
        "--filter",
        "capture-output-disposed-after-release",
        "--no-localize",
    )
    assert (code, result["verdict"], result["outcome"]) == (0, "error", "expected")
    assert result["message"] == (
        "step 2 (release: s1, line 32): the clean-up after the last step failed, disposing the "
        "outputs s1 held: null function"
    )
    assert result["trace"]["steps"] == 2


ORT_WEB_STEPS = """      - run: c
      - run: e
      - run: c
      - release: c
      - create: c
      - run: c
      - run: c
        inputs: same
"""


@pytest.mark.browser
def test_an_ort_web_scenario_carries_the_injected_fault_and_passes_clean(tmp_path):
    """``--inject`` reaches a scenario's capture sessions in the page as it reaches a case's:
    input-snapshot-at-capture fails the first replay with new inputs; clean, it passes."""
    from runner.backends import open_backend
    from runner.backends.base import BackendOptions
    from runner.matrix import ScenarioTarget
    from runner.oracle import ReferenceCache
    from runner.step import Step

    header = HEADER.replace("backends: [wgpu]", "backends: [{name: ort-web, bundle: webgpu}]")
    header = header.replace(
        "p: {outputs: rewrite}\n      h: {}", "c: {}\n      e: {capture: false}"
    )
    path = tmp_path / "s.yaml"
    path.write_text(header + ORT_WEB_STEPS)
    suite = load_suite(path, REGISTRY)
    item = ScenarioTarget(suite, suite.scenarios[0], suite.backends[0])
    backend = open_backend("ort-web", BackendOptions())
    references = ReferenceCache(None).references
    try:
        fault = BackendOptions(inject=frozenset({"input-snapshot-at-capture"}))
        faulty = Step(references, fault).run(item, backend).result("t")
        clean = Step(references, BackendOptions()).run(item, backend).result("t")
    finally:
        backend.close()
    assert (faulty.verdict, faulty.stale_from) == ("stale-input", "run 1")
    assert faulty.message.startswith("step 3 (run: c, line 18)")
    assert faulty.trace["faults"] == ["input-snapshot-at-capture"]
    assert (clean.verdict, clean.message) == ("pass", "")
    assert "faults" not in clean.trace


EXPLORED_SCENARIOS = """    steps:
      - run: c
      - run: c
  - name: destroys
    model: enc
    sessions: {c: {}}
    steps:
      - run: c
      - release: c
      - create: c
      - run: c
"""


# The third step traps 1.30.0's jspi build (suites/bugs/ort-graph1-first-then-graph0.yaml)
TRAPS = """name: traps
models:
  enc: {builtin: encoder, style: compact, layers: 2, hidden: 32, heads: 4, ffn: 64}
shapes: [{batch: 1, sequence: 16}]
backends: [{name: ort-web, bundle: jspi}]
exclude: [{model: enc}]
scenarios:
  - name: plain
    model: enc
    sessions: {c: {}}
    steps:
      - run: c
      - run: c
  - name: traps
    model: enc
    sessions: {s1: {}, s2: {}}
    steps:
      - run: s1
        graph: 1
      - run: s2
      - run: s1
"""

# What an onnxruntime-web that used what a destroy of its had ended would do (none measured so
# far): a call on the device after destroying it, or an object made before the destroy (a program
# cache that outlived its device) passed to the device it asked for after it
MISUSE = """(misuse) => {
  const requestDevice = GPUAdapter.prototype.requestDevice;
  window.__unmisuse = () => {
    GPUAdapter.prototype.requestDevice = requestDevice;
  };
  let module = null;
  GPUAdapter.prototype.requestDevice = async function (...args) {
    const device = await requestDevice.apply(this, args);
    if (misuse === 'use-after-destroy') {
      const destroy = device.destroy;
      device.destroy = function () {
        destroy.call(this);
        this.createBuffer({size: 4, usage: GPUBufferUsage.STORAGE});
      };
    } else if (module) {
      device.createComputePipeline({layout: 'auto', compute: {module, entryPoint: 'main'}});
      module = null;
    } else {
      module = device.createShaderModule({code: '@compute @workgroup_size(1) fn main() {}'});
    }
    return device;
  };
}"""


@pytest.mark.browser
def test_explores_scenarios_share_a_page_and_what_one_destroys_reaches_no_other(tmp_path):
    """explore's scenarios on ort-web (``fresh_sequences``) each run on a new onnxruntime-web
    instance in one page, on the device pool's devices (devicepool.js): the second compiles
    nothing the first compiled, and each gives, bit for bit, what it gives in a page of its
    own. One that releases its last session mid-steps has the C++ build destroy its device,
    which ends the instance's lease of it (the device stays in the pool, nothing destroyed for
    real), and ask for another: a new lease of the same device, with what it compiled. An
    instance that used its device after destroying it, or passed the device it got next an
    object of the destroyed one's (both injected), would have done so with a destroyed device:
    its scenario runs again with real destroys, in the same page, on a new device."""
    from runner.backends import open_backend
    from runner.backends.base import BackendOptions
    from runner.matrix import ScenarioTarget
    from runner.oracle import ReferenceCache
    from runner.step import Step

    header = HEADER.replace("backends: [wgpu]", "backends: [{name: ort-web, bundle: webgpu}]")
    header = header.replace("name: s\n", "name: plain\n")
    header = header.replace("p: {outputs: rewrite}\n      h: {}", "c: {}")
    path = tmp_path / "s.yaml"
    path.write_text(header.removesuffix("    steps:\n") + EXPLORED_SCENARIOS)
    suite = load_suite(path, REGISTRY)
    plain, destroys = (ScenarioTarget(suite, s, suite.backends[0]) for s in suite.scenarios)
    order = (plain, plain, destroys, plain, destroys, destroys)
    misuses = {4: "use-after-destroy", 5: "stale-object"}
    references = ReferenceCache(None).references
    pools, fresh_runs, own_page = [], [], {}
    backend = open_backend("ort-web", BackendOptions(fresh_sequences=True))
    try:
        for i, item in enumerate(order):
            if i in misuses:
                backend._pages["webgpu"]._page.evaluate(MISUSE, misuses[i])
            fresh_runs.append(Step(references, backend.options).run(item, backend))
            page = backend._pages["webgpu"]._page
            pools.append(page.evaluate("() => window.__devicePool"))
            page.evaluate("() => window.__unmisuse?.()")
        assert backend.page_loads()["webgpu"] == 1
    finally:
        backend.close()
    backend = open_backend("ort-web", BackendOptions())
    try:  # each scenario once in a page of its own: what the fresh instances must give
        for item in (plain, destroys):
            own_page[item.scenario.name] = Step(references, backend.options).run(item, backend)
        assert backend.page_loads()["webgpu"] == 2
    finally:
        backend.close()
    for item, fresh_run in zip(order, fresh_runs, strict=True):
        alone = own_page[item.scenario.name]
        assert fresh_run.judgement.verdicts == alone.judgement.verdicts == {"pass"}
        for fresh_step, own_step in zip(fresh_run.run.steps, alone.run.steps, strict=True):
            for name, array in own_step.outputs.items():
                np.testing.assert_array_equal(fresh_step.outputs[name], array)
    counts = [(p["devices"], p["spared"], p["destroyed"], p["usedAfterDestroy"]) for p in pools]
    # the last two: spared, misused, then run again with their device destroyed for real
    assert counts == [
        (1, 0, 0, False),
        (1, 0, 0, False),
        (1, 1, 0, False),
        (1, 1, 0, False),
        (2, 2, 1, False),
        (3, 3, 2, False),
    ]
    assert pools[1]["reused"] > pools[0]["reused"]
    assert pools[0]["made"] == pools[1]["made"] == pools[2]["made"] == pools[3]["made"]
    assert pools[4]["made"] > pools[3]["made"]  # the new device compiles everything again


@pytest.mark.browser
def test_a_trap_in_an_explored_scenario_ends_its_instance_not_the_page(tmp_path):
    """A scenario that traps onnxruntime-web's wasm (1.30.0's jspi build: a capture session's
    graph 0 after its graph 1 and another session's run, "unreachable") leaves that instance
    dead, not the page: explore's next scenario runs on a new instance in the same page, its
    leases retired (devicepool.js), and gives, bit for bit, what it gave before the trap."""
    from runner.backends import open_backend
    from runner.backends.base import BackendOptions
    from runner.matrix import ScenarioTarget
    from runner.oracle import ReferenceCache
    from runner.step import Step

    path = tmp_path / "s.yaml"
    path.write_text(TRAPS)
    suite = load_suite(path, REGISTRY)
    plain, traps = (ScenarioTarget(suite, s, suite.backends[0]) for s in suite.scenarios)
    options = BackendOptions(fresh_sequences=True)
    step = Step(ReferenceCache(None).references, options)
    backend = open_backend("ort-web", options)
    try:
        before, trapped, after = (step.run(item, backend) for item in (plain, traps, plain))
        loads = backend.page_loads()["jspi"]
    finally:
        backend.close()
    assert (trapped.run.status, trapped.run.message) == ("error", "unreachable")
    assert loads == 1
    assert before.judgement.verdicts == after.judgement.verdicts == {"pass"}
    for earlier, later in zip(before.run.steps, after.run.steps, strict=True):
        for name, array in earlier.outputs.items():
            np.testing.assert_array_equal(later.outputs[name], array)
