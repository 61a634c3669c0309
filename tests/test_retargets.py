"""`--backend` moves the bundled suites onto other backends and builds, and the run is green where
nothing regressed: a case keeps only the expectations written for its new target, the suites
say what each build does where it differs, and an operator a backend has no kernel for skips a
moved case (the backend's own declaration: its kernels) where a suite written for that backend
fails on it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runner import cli
from runner.verdicts import SKIP_BACKEND, SKIP_OPTION

from .conftest import REPO


def results(out: Path) -> list[dict]:
    [run] = (out / "runs").iterdir()
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def unexpected(records: list[dict]) -> list[str]:
    return [
        f"{r['case_id']}: {r['verdict']} ({r['message'][:200]})"
        for r in records
        if r["outcome"] in ("unexpected", "unexpected-pass")
    ]


def test_the_bundled_suites_moved_to_wgpu_are_green(tmp_path, capsys):
    """wgpu has no kernel for Conv, ConvTranspose, Pad, LSTM, AveragePool, MaxPool,
    InstanceNormalization, SkipLayerNormalization or MultiHeadAttention, none for a Softmax over a
    middle axis, no float16 one for GroupQueryAttention and none for one without its KV cache:
    the moved cases that use them skip, naming the operator; everything else runs, as
    expected."""
    code = cli.main(["run", "suites", "--backend", "wgpu", "--out", str(tmp_path), "-q"])
    records = results(tmp_path)
    assert code == 0, unexpected(records)
    skipped = {r["case_id"]: r["message"] for r in records if r["verdict"] == "skipped"}
    float16 = {i: m for i, m in skipped.items() if i.startswith("llama-tiny-")}
    assert len(float16) == 10  # suites/float16-decoder.yaml, each its two layouts and modes
    for message in float16.values():
        assert message.startswith(f"{SKIP_BACKEND}: unsupported-op: ")
        assert message.endswith("only float32 inputs are implemented")
    # a layout preferring NCHW is an onnxruntime EP option, which wgpu has not
    preferred = {i: m for i, m in skipped.items() if "/layout=NCHW/" in i}
    assert preferred == {
        "conv1d-kernel1-bias/layout=NCHW/wgpu/eager": f"{SKIP_OPTION}: wgpu's sessions have no "
        "preferredLayout (layout NCHW asks for NCHW)"
    }
    assert sorted(skipped.keys() - float16.keys() - preferred.keys()) == sorted(
        f"{model}/layout=default/wgpu/{mode}"
        for model, modes in {
            "averagepool-opset18": ["eager", "capture"],
            "averagepool-opset19": ["eager", "capture"],
            "conv1d-129-channels": ["eager"],
            "conv1d-130-channels": ["eager"],
            "lstm-cast-head": ["eager"],
            "lstm-cast-relu": ["eager"],
            "lstm-concat-conv": ["eager"],
            "silero-vad-jsep-state": ["eager"],
            "silero-vad-capture-1-31": ["eager", "capture"],
            "relu-and-averagepool-on-cpu": ["eager", "capture"],
            "averagepool-alone-on-cpu": ["eager", "capture"],
            "instancenorm-rank3": ["eager", "capture"],
            "skiplayernorm-beta-omitted": ["eager"],
            "clip-no-bounds": ["eager"],
            "conv2d-attributes-written": ["eager"],
            "conv2d-defaults": ["eager"],
            "conv2d-no-kernel-shape": ["eager"],
            "conv1d-kernel1-bias": ["eager"],
            "maxpool-1d": ["eager"],
            "averagepool-1d": ["eager"],
            "convtranspose1d-kernel1": ["eager"],
            "conv1d-leakyrelu": ["eager"],
            "mha-head-4": ["eager", "capture"],
            "mha-head-6": ["eager", "capture"],
            "s8": ["eager"],  # ort-webgpu-mha-sequence-32.yaml
            "s31": ["eager"],
            "s32": ["eager"],
            "gqa-no-present": ["eager", "capture"],
            # the zoo (suites/bugs/upstream)
            "averagepool-ceil-pad-opset18": ["eager"],
            "averagepool-ceil-pad-opset19": ["eager"],
            "averagepool-end-pad": ["eager"],
            "conv-tanh": ["eager"],
            "conv3d": ["eager"],
            "conv3d-attributes-written": ["eager"],
            "conv3d-defaults": ["eager"],
            "conv3d-grouped": ["eager"],
            "convtranspose3d": ["eager"],
            "convtranspose-4-channels": ["eager"],
            "convtranspose-5-channels": ["eager"],
            "convtranspose-float16-2047": ["eager"],
            "convtranspose-float16-2100": ["eager"],
            "instancenorm-epsilon-twins": ["eager"],
            "skip-layernorm-skip-broadcast": ["eager"],
        }.items()
        for mode in modes
    )
    for case_id, message in skipped.items() - preferred.items():
        assert message.startswith(f"{SKIP_BACKEND}: unsupported-op: ")
        assert (
            case_id in float16
            or "no WGSL kernel for" in message
            or ("GroupQueryAttention (node 'n0'): only the form with past and present" in message)
        )
    assert len(records) > 100 and not unexpected(records)


CONV_SUITE = """
name: conv
models:
  conv:
    path: conv1d-130-channels.onnx
backends: [{backend}]
capture: eager
"""


def test_an_operator_wgpu_lacks_fails_a_suite_written_for_wgpu_and_skips_one_moved_there(
    write_suite, suite_dir, tmp_path, capsys
):
    shutil.copy(REPO / "suites/bugs/models/conv1d-130-channels.onnx", suite_dir)
    written = write_suite(CONV_SUITE.format(backend="wgpu"), "written.yaml")
    assert cli.main(["run", str(written), "--out", str(tmp_path / "a"), "-q"]) == 1
    [record] = results(tmp_path / "a")
    assert (record["verdict"], record["outcome"]) == ("unsupported-op", "unexpected")
    assert record["message"].startswith("Conv (node 'Conv_0'): no WGSL kernel for Conv")

    moved = write_suite(CONV_SUITE.format(backend="reference"), "moved.yaml")
    out = tmp_path / "b"
    assert cli.main(["run", str(moved), "--backend", "wgpu", "--out", str(out), "-q"]) == 0
    [record] = results(out)
    assert (record["verdict"], record["outcome"]) == ("skipped", "skipped")
    assert record["message"] == (
        f"{SKIP_BACKEND}: unsupported-op: Conv (node 'Conv_0'): no WGSL kernel for Conv"
    )


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("build", ["jsep", "webgpu", "jspi"])
def test_the_bundled_suites_moved_to_each_ort_web_build_are_green(build, tmp_path, capsys):
    """Each onnxruntime-web build at the pinned version (2-3 minutes each): the nightly job."""
    target = f"ort-web:{build}"
    code = cli.main(["run", "suites", "--backend", target, "--out", str(tmp_path), "-q"])
    records = results(tmp_path)
    assert code == 0, unexpected(records)
    assert len(records) > 100 and {r["backend"] for r in records} == {target}
