"""The zoo, suites/bugs/upstream/: upstream's own WebGPU bugs as regression guards. Its models
are what its script builds, every suite names its thread, and its native cases give on
lavapipe what their rules say (the browser's run with `nox -s regress`)."""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from .conftest import REPO, regress
from .test_ortnative import results_of

ZOO = REPO / "suites" / "bugs" / "upstream"
THREAD = "https://github.com/microsoft/onnxruntime/"


def test_the_committed_models_are_what_the_script_builds(tmp_path):
    spec = importlib.util.spec_from_file_location("build_models", ZOO / "build_models.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    built = script.build(tmp_path)
    assert {p.name for p in built} == {p.name for p in (ZOO / "models").glob("*.onnx")}
    for path in built:
        assert path.read_bytes() == (ZOO / "models" / path.name).read_bytes(), path.name


@pytest.mark.parametrize("suite", sorted(ZOO.glob("*.yaml")), ids=lambda p: p.stem)
def test_each_zoo_suite_names_its_thread_in_every_rule_of_a_wrong_result(suite):
    """A rule expecting a wrong result names its thread; one expecting an error or a refusal (a
    build that refuses the model, as JSEP refuses ceil_mode) says why."""
    data = yaml.safe_load(suite.read_text())
    assert data["name"] == suite.stem and "microsoft/onnxruntime" in data["description"]
    failing = [rule for rule in data["cases"] if rule.get("expect", "pass") != "pass"]
    assert failing and all(rule["reason"] for rule in failing)
    wrong = [rule for rule in failing if rule["expect"] not in ("error", "unsupported-op")]
    assert all(rule["bug"].startswith(THREAD) for rule in wrong)


@pytest.mark.pypi
def test_the_zoo_runs_green_natively_on_lavapipe(tmp_path):
    """Each bug where its rules say (1.25.1 and the pinned onnxruntime-webgpu), each control
    and each fixed version passing: a fix that regresses turns the run red."""
    out = tmp_path / "out"
    done = regress("run", ZOO, "--filter", "backend=ort-native", "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = {
        case_id.replace("/layout=default/ort-native@", " "): r["verdict"]
        for case_id, r in results_of(out).items()
    }
    assert verdicts["skip-simplified-layernorm-bias webgpu-1.25.1/eager"] == "reference-mismatch"
    assert verdicts["skip-simplified-layernorm-bias pinned/eager"] == "pass"
    assert verdicts["convtranspose-float16-2047 pinned/eager"] == "pass"
    assert verdicts["convtranspose-float16-2100 pinned/eager"] == "reference-mismatch"
