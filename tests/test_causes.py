"""Root causes (``runner.cause``): one bug one cause, whichever op carries it; a declared cause
checked by ``run``; a finding pinned by the bugs suite declaring its cause.

The tests marked ``pypi`` run ONNX Runtime's C++ WebGPU EP on lavapipe (``ort-native``), which
replays a graph output copied from an input stale under capture
(suites/bugs/ort-reshape-output-stale.yaml).
"""

from __future__ import annotations

import json
import shutil

import pytest

from runner.cause import Cause, cause_of, parse_cause
from tests.conftest import REPO, regress

IDENTITY = REPO / "suites" / "bugs" / "models" / "identity-output.onnx"


def node(op: str, against: str = "eager", copy: bool = False) -> dict:
    """A first divergent node as localization reports it."""
    return {"op_type": op, "against": against, "copy": copy}


CPU = "onnxruntime CPU"


@pytest.mark.parametrize(
    ("verdict", "divergent", "cause"),
    [
        ("stale-input", node("Reshape", copy=True), "stale-copy-output"),
        ("capture-mismatch", node("Identity", copy=True), "stale-copy-output"),
        ("capture-mismatch", node("MatMul"), "wrong-replay of MatMul"),
        ("stale-layout", node("LayerNormalization"), "stale-layout of LayerNormalization"),
        ("reference-mismatch", node("Slice", CPU), "wrong-result of Slice"),
        ("reference-mismatch", None, "wrong-result of Gelu+Slice (not localized)"),
        ("reference-mismatch", {"error": "lost"}, "wrong-result of Gelu+Slice (not localized)"),
        ("capture-unsupported", None, "refusal"),
        ("error", None, "crash"),
        # the build's, whatever the model: one finding however many op sets show it
        ("capture-not-engaged", None, "capture-not-engaged"),
    ],
)  # fmt: skip
def test_a_cause_is_read_off_the_verdict_and_what_the_culprit_computes(verdict, divergent, cause):
    assert str(cause_of(verdict, divergent, "Gelu+Slice")) == cause


def test_a_declared_cause_is_spelled_as_localization_names_it():
    assert parse_cause("wrong-result of Slice") == Cause("wrong-result", "Slice")
    assert parse_cause("stale-copy-output") == Cause("stale-copy-output")
    for wrong in ("stale-copy-output of Reshape", "wrong-result", "refusal of Cast", "stale"):
        with pytest.raises(ValueError, match="expected 'MECHANISM of OP'"):
            parse_cause(wrong)


def test_a_misspelt_cause_is_exit_2_with_file_and_line(write_suite):
    suite = write_suite(
        """
        name: s
        models:
          m: {path: identity-output.onnx}
        backends: [wgpu]
        cases:
          - match: {capture: capture}
            expect: stale-input
            cause: stale-copy-output of Identity
        """
    )
    shutil.copy(IDENTITY, suite.parent)
    done = regress("validate", suite)
    assert done.returncode == 2
    assert f"{suite}:8:" in done.stderr and "cause" in done.stderr
    assert "Traceback" not in done.stderr


def _suite(write_suite, cause: str):
    suite = write_suite(
        f"""
        name: declared
        models:
          identity-output: {{path: identity-output.onnx}}
        backends: [ort-native]
        capture: [capture]
        tolerance: {{abs: 1.0e-4, rel: 1.0e-4}}
        cases:
          - match: {{capture: capture}}
            expect: stale-input
            reason: the C++ EP replays a copied output stale
            cause: {cause}
        """
    )
    shutil.copy(IDENTITY, suite.parent)
    return suite


@pytest.mark.pypi
def test_run_checks_a_declared_cause_against_the_localized_one(write_suite, tmp_path):
    """The lone Identity's stale replay, declared as what it is, is expected; declared as a
    kernel's wrong replay, the same failure is unexpected, saying which cause it had."""
    right = regress("run", _suite(write_suite, "stale-copy-output"), "--out", tmp_path / "right")
    assert right.returncode == 0, right.stdout + right.stderr
    wrong = regress("run", _suite(write_suite, "wrong-replay of Identity"), "--out", tmp_path / "w")
    assert wrong.returncode == 1
    (folder,) = (tmp_path / "w" / "runs").iterdir()
    (result,) = map(json.loads, (folder / "results.jsonl").read_text().splitlines())
    assert (result["verdict"], result["outcome"]) == ("stale-input", "unexpected")
    assert result["message"].endswith(
        "; localized cause stale-copy-output, where its rule declares wrong-replay of Identity"
    )


@pytest.mark.pypi
def test_a_stale_copy_is_one_finding_whichever_op_makes_it_pinned_by_its_bugs_suite(tmp_path):
    """explore on the C++ EP told Identity, then Reshape: each finds its op's output replayed
    stale. explore-report makes them one row, the cause stale-copy-output, pinned by the rules of
    ort-reshape-output-stale.yaml that declare it on ort-native."""
    for op in ("Identity", "Reshape"):
        explored = regress(
            "explore", "--models", "generated", "--backend", "ort-native", "--ops", op,
            "--budget", "10s", "--max-findings", "1", "--seed", "1",
            "--database", tmp_path / f"db-{op}",
            "--out", tmp_path / op, process=True,
        )  # fmt: skip
        assert explored.returncode == 1, explored.stdout + explored.stderr
    report = regress("explore-report", tmp_path / "Identity", tmp_path / "Reshape", "--out",
                     tmp_path / "report")  # fmt: skip
    assert report.returncode == 0, report.stderr
    (row,) = json.loads((tmp_path / "report" / "bugs.json").read_text())["bugs"]
    assert row["cause"] == "stale-copy-output" and not row["new"]
    assert sorted(f["yaml"].split("/")[-2] for f in row["findings"]) == ["Identity", "Reshape"]
    pin = "ort-reshape-output-stale.yaml: identity-output/layout=default/ort-native/capture"
    assert any(p.endswith(f"{pin} (its cause)") for p in row["pinned_by"]), row["pinned_by"]


@pytest.mark.pypi
def test_a_refusal_is_listed_once_not_written_as_a_bug(tmp_path):
    """onnxruntime-webgpu 1.27.0 runs an opset-20 AveragePool on the CPU (its WebGPU kernel is
    registered up to opset 18: suites/bugs/ort-webgpu-averagepool-19-cpu.yaml), so it refuses to
    capture it: explore lists that among what the target does not do, shrunk to the one node,
    writes no finding of it, and explore-report shows it apart from the bugs (of which an
    AveragePool may show the zoo's ceil divisor, #29835, pinned)."""
    explored = regress(
        "explore", "--models", "generated", "--backend", "ort-native", "--ops", "AveragePool",
        "--dtypes", "float32", "--budget", "10s", "--seed", "1",
        "--database", tmp_path / "db", "--out", tmp_path / "f",
        process=True,
    )  # fmt: skip
    assert explored.returncode in (0, 1), explored.stdout + explored.stderr
    written = [path.name for path in (tmp_path / "f").glob("*.yaml")]
    assert not [name for name in written if name.startswith("capture-unsupported")], written
    report = regress("explore-report", tmp_path / "f", "--out", tmp_path / "report")
    assert report.returncode == 0, report.stderr
    merged = json.loads((tmp_path / "report" / "bugs.json").read_text())
    assert [bug for bug in merged["bugs"] if bug["new"]] == []
    (refusal,) = [r for r in merged["refusals"] if r["verdict"] == "capture-unsupported"]
    (node,) = refusal["nodes"]
    assert node.startswith("AveragePool(") and node.endswith(" float32 -> float32")
    assert "partitioned to the WebGpuExecutionProvider" in refusal["message"]
    assert "What the targets do not do" in (tmp_path / "report" / "summary.md").read_text()
