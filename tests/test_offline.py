"""Suites load, validate and run on other backends with no npm and no network: versions are
resolved only for the ort-web cases selected. Targets naming one exact version are one column
of the report, however the suites spell it."""

from __future__ import annotations

import os
import shutil

import pytest

from runner.backends import REGISTRY, resolve_targets
from runner.backends.base import BackendRun
from runner.history import RunRecord
from runner.judge import Judgement
from runner.matrix import select_resolved
from runner.report import analysis
from runner.report.history import History
from runner.step import case_result
from runner.suite import load_suites
from runner.verdicts import Outcome

from .conftest import regress

PINNED_BY_NAME = """
name: {name}
models:
  enc: {{builtin: encoder, layers: 1, hidden: 8, heads: 2, ffn: 16}}
shapes: [{{batch: 1, sequence: 4}}]
backends:
  - {backend}
"""


@pytest.fixture
def no_npm(tmp_path) -> dict[str, str]:
    """A PATH holding git and nothing of Node.js, and an empty cache folder."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    for tool in ("git",):
        (bin_folder / tool).symlink_to(shutil.which(tool))
    (tmp_path / "empty-cache").mkdir()
    return {"PATH": str(bin_folder), "REGRESS_CACHE_DIR": str(tmp_path / "empty-cache")}


def test_validate_and_list_every_bundled_suite_without_npm(no_npm):
    validated = regress("validate", "suites", env=no_npm, process=True)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout == (
        "65 suite(s), 933 case(s): 66 unchecked (the notes say what), the rest ok\n"
    )
    notes = validated.stderr.splitlines()
    assert notes == [
        "note: suites/bugs/ort-1.23-capture-option-ignored.yaml:38:15: ort-web version "
        "'1.23.2' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-27068-destroyed-buffer-dev.yaml:23:14: ort-web version "
        "'1.25.0-dev.20260228-6e72d31970' was not checked (only a registry knows it): it is "
        "resolved when its cases run or are listed",
        "note: suites/bugs/ort-29273-cpp-capture-1.24.yaml:22:15: ort-web version '1.24.3' was "
        "not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-gqa-prefill-1.27.yaml:40:15: ort-web version '1.24.3' was not "
        "checked (only a registry knows it): it is resolved when its cases run or are listed",
        "note: suites/bugs/ort-gqa-prefill-1.27.yaml:40:25: ort-web version '1.27.0' was not "
        "checked (only a registry knows it): it is resolved when its cases run or are listed",
        "note: suites/bugs/ort-gqa-prefill-1.27.yaml:40:35: ort-web version '1.29.0' was not "
        "checked (only a registry knows it): it is resolved when its cases run or are listed",
        "note: suites/bugs/ort-graph-ids-1.24.yaml:22:15: ort-web version '1.24.3' was not "
        "checked (only a registry knows it): it is resolved when its cases run or are listed",
        "note: suites/bugs/ort-graph1-first-then-graph0.yaml:24:15: ort-web version '1.27.0' "
        "was not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-jsep-1.17.0-capture-not-engaged.yaml:14:15: ort-web version "
        "'1.17.0' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-1.17.0-capture-not-engaged.yaml:14:25: ort-web version "
        "'1.17.3' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-add-beside-rank1-transpose.yaml:16:15: ort-web version "
        "'1.20.1' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-add-beside-rank1-transpose.yaml:16:25: ort-web version "
        "'1.21.0' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-cancelled-transposes.yaml:27:15: ort-web version '1.25.1' "
        "was not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-jsep-clip-no-bounds.yaml:15:15: ort-web version '1.19.2' was "
        "not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-jsep-conv-leakyrelu-1.17.0.yaml:15:15: ort-web version "
        "'1.17.0' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-conv-leakyrelu-1.17.0.yaml:15:25: ort-web version "
        "'1.17.3' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-conv2d-default-attributes.yaml:21:15: ort-web version "
        "'1.17.0' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-conv2d-default-attributes.yaml:21:25: ort-web version "
        "'1.19.2' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-conv2d-default-attributes.yaml:21:43: ort-web version "
        "'1.31.1' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-conv3d-default-strides.yaml:20:15: "
        "ort-web version '1.19.2' was not checked (only a registry knows it): it is "
        "resolved when its cases run or are listed",
        "note: suites/bugs/ort-jsep-conv3d-default-strides.yaml:20:33: "
        "ort-web version '1.31.1' was not checked (only a registry knows it): it is "
        "resolved when its cases run or are listed",
        "note: suites/bugs/ort-jsep-convtranspose-1d.yaml:15:15: ort-web version "
        "'1.17.3' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-convtranspose-1d.yaml:15:25: ort-web version "
        "'1.18.0' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-instancenorm-rank3.yaml:17:15: ort-web version '1.17.3' "
        "was not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-jsep-instancenorm-rank3.yaml:17:25: ort-web version '1.19.2' "
        "was not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-jsep-lone-cpu-node-replayed.yaml:28:15: ort-web version "
        "'1.19.2' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-jsep-maxpool-1d.yaml:19:15: ort-web version '1.17.3' was not "
        "checked (only a registry knows it): it is resolved when its cases run or are listed",
        "note: suites/bugs/ort-jsep-maxpool-1d.yaml:19:25: ort-web version '1.19.2' was not "
        "checked (only a registry knows it): it is resolved when its cases run or are listed",
        "note: suites/bugs/ort-jsep-maxpool-1d.yaml:19:35: ort-web version '1.20.1' was not "
        "checked (only a registry knows it): it is resolved when its cases run or are listed",
        "note: suites/bugs/ort-jsep-silero-state.yaml:26:7: model 'silero-vad-jsep-state': "
        "silero_vad/data/silero_vad_openvino_16k.onnx from silero-vad 6.2.3 was not checked "
        "(not fetched yet): a run fetches it and checks its file and sha256",
        "note: suites/bugs/ort-jsep-silero-state.yaml:43:15: ort-web version '1.20.1' was not "
        "checked (only a registry knows it): it is resolved when its cases run or are listed",
        "note: suites/bugs/ort-jsep-silero-state.yaml:43:25: ort-web version "
        "'1.21.0-dev.20241205-d27fecd3d3' was not checked (only a registry knows it): it is "
        "resolved when its cases run or are listed",
        "note: suites/bugs/ort-jsep-where-bool-condition-nondeterministic.yaml:20:15: ort-web "
        "version '1.17.3' was not checked (only a registry knows it): it is resolved when its "
        "cases run or are listed",
        "note: suites/bugs/ort-prealloc-handle.yaml:30:15: ort-web version '1.29.0' was not "
        "checked (only a registry knows it): it is resolved when its cases run or are listed",
        "note: suites/bugs/ort-prealloc-handle.yaml:30:33: ort-web version '1.31.1' was not "
        "checked (only a registry knows it): it is resolved when its cases run or are listed",
        "note: suites/bugs/ort-silero-capture-1.31.1.yaml:23:7: model "
        "'silero-vad-capture-1-31': silero_vad/data/silero_vad_openvino_16k.onnx from "
        "silero-vad 6.2.3 was not checked (not fetched yet): a run fetches it and checks its "
        "file and sha256",
        "note: suites/bugs/ort-silero-capture-1.31.1.yaml:39:15: ort-web version "
        "'1.31.0-dev.20260914-8d85527a0' was not checked (only a registry knows it): it is "
        "resolved when its cases run or are listed",
        "note: suites/bugs/ort-silero-capture-1.31.1.yaml:39:48: ort-web version '1.31.1' was "
        "not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-webgpu-averagepool-19-cpu.yaml:29:15: ort-web version '1.24.3' "
        "was not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-webgpu-averagepool-19-cpu.yaml:29:25: ort-web version '1.27.0' "
        "was not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-webgpu-gqa-capture-no-present.yaml:23:15: ort-web version "
        "'1.27.0' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/ort-webgpu-mha-sequence-32.yaml:24:15: ort-web version '1.24.3' was "
        "not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-webgpu-mha-sequence-32.yaml:24:25: ort-web version '1.29.0' was "
        "not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-webgpu-mha-sequence-32.yaml:24:43: ort-web version '1.31.1' was "
        "not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-webgpu-slice-negative-step.yaml:38:15: ort-web version '1.17.0' "
        "was not checked (only a registry knows it): it is resolved when its cases run or are "
        "listed",
        "note: suites/bugs/ort-webgpu-where-scalar-condition.yaml:22:15: ort-web version "
        "'1.24.3' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/upstream/ort-19009-jsep-where-one-condition.yaml:13:15: ort-web "
        "version '1.17.0' was not checked (only a registry knows it): it is resolved when its "
        "cases run or are listed",
        "note: suites/bugs/upstream/ort-19201-jsep-tanh-large.yaml:14:15: ort-web version "
        "'1.17.0' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/upstream/ort-21467-jsep-conv-tanh.yaml:13:15: ort-web version "
        "'1.17.0' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/upstream/ort-21467-jsep-conv-tanh.yaml:13:25: ort-web version "
        "'1.18.0' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/upstream/ort-22231-jsep-softmax-middle-axis.yaml:13:15: ort-web "
        "version '1.19.2' was not checked (only a registry knows it): it is resolved when its "
        "cases run or are listed",
        "note: suites/bugs/upstream/ort-22997-transpose-rank1.yaml:19:15: ort-web version "
        "'1.24.3' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/upstream/ort-22997-transpose-rank1.yaml:22:15: ort-web version "
        "'1.20.1' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/upstream/ort-24681-averagepool-end-pad.yaml:22:15: ort-web version "
        "'1.24.3' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/upstream/ort-27107-skip-layernorm-skip-broadcast.yaml:17:15: "
        "ort-web version '1.24.3' was not checked (only a registry knows it): it is resolved "
        "when its cases run or are listed",
        "note: suites/bugs/upstream/ort-27749-convtranspose-odd-channels.yaml:20:15: ort-web "
        "version '1.24.3' was not checked (only a registry knows it): it is resolved when its "
        "cases run or are listed",
        "note: suites/bugs/upstream/ort-27917-conv3d.yaml:22:15: "
        "ort-web version '1.24.3' was not checked (only a registry knows it): it is "
        "resolved when its cases run or are listed",
        "note: suites/bugs/upstream/ort-28356-convtranspose-3d.yaml:18:23: "
        "ort-web version '1.31.1' was not checked (only a registry knows it): it is "
        "resolved when its cases run or are listed",
        "note: suites/bugs/upstream/ort-28424-skip-simplified-layernorm-bias.yaml:22:15: "
        "ort-web version '1.25.1' was not checked (only a registry knows it): it is resolved "
        "when its cases run or are listed",
        "note: suites/bugs/upstream/ort-29835-averagepool-ceil-pad.yaml:24:15: ort-web version "
        "'1.27.0' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/upstream/ort-29835-averagepool-ceil-pad.yaml:29:15: ort-web version "
        "'1.20.1' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/upstream/ort-32228-gemm-transpose-fusion-identity.yaml:18:15: "
        "ort-web version '1.27.0' was not checked (only a registry knows it): it is resolved "
        "when its cases run or are listed",
        "note: suites/bugs/upstream/ort-32228-gemm-transpose-fusion-identity.yaml:21:15: "
        "ort-web version '1.20.1' was not checked (only a registry knows it): it is resolved "
        "when its cases run or are listed",
        "note: suites/bugs/upstream/ort-shader-cache-and-broadcast.yaml:16:15: ort-web version "
        "'1.23.2' was not checked (only a registry knows it): it is resolved when its cases "
        "run or are listed",
        "note: suites/bugs/upstream/ort-shader-cache-instancenorm-epsilon.yaml:18:15: ort-web "
        "version '1.23.2' was not checked (only a registry knows it): it is resolved when its "
        "cases run or are listed",
        "note: suites/bugs/upstream/ort-shader-cache-instancenorm-epsilon.yaml:23:15: ort-web "
        "version '1.17.3' was not checked (only a registry knows it): it is resolved when its "
        "cases run or are listed",
    ]
    listed = regress("list", "suites", "--backend", "wgpu", env=no_npm, process=True)
    assert listed.returncode == 0, listed.stderr
    ids = listed.stdout.splitlines()
    assert len(ids) == 248 and all("/wgpu/" in i for i in ids)
    pinned_only = regress("list", "suites", "--filter", "version=1.30.0", env=no_npm, process=True)
    assert pinned_only.returncode == 3  # the filter needs every version: npm must say
    wgpu_filtered = regress("list", "suites", "--filter", "backend=wgpu", env=no_npm, process=True)
    assert wgpu_filtered.returncode == 0, wgpu_filtered.stderr
    native = regress(
        "list", "suites", "--backend", "ort-native", env=no_npm, process=True
    )  # pip's versions
    assert native.returncode == 0 and len(native.stdout.splitlines()) == 236, native.stderr


def test_an_ort_web_selection_without_npm_exits_3_saying_why(no_npm, tmp_path):
    for command in (
        ["list", "suites/bugs/ort-29273-cpp-capture-1.24.yaml"],
        ["run", "suites", "--filter", "backend=ort-web:webgpu", "--out", tmp_path / "out"],
    ):
        proc = regress(*command, env=no_npm, process=True)
        assert proc.returncode == 3, proc.stderr
        assert proc.stderr == (
            "environment unusable: npm is not installed: onnxruntime-web versions come from "
            "the npm registry (install Node.js with npm, e.g. apt-get install nodejs npm)\n"
        )
    assert not (tmp_path / "out").exists()  # refused before anything ran


@pytest.mark.gpu
def test_a_wgpu_run_of_a_suite_naming_unpublished_versions_needs_no_npm(no_npm, tmp_path):
    proc = regress(
        "run", "suites/bugs/ort-29273-cpp-capture-1.24.yaml", "--backend", "wgpu",
        "--out", tmp_path / "out", "--runs", "2", "--no-localize",
        env={**no_npm, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", str(tmp_path))},
        process=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [results] = (tmp_path / "out" / "runs").glob("*/results.jsonl")
    assert len(results.read_text().splitlines()) == 2


def test_one_target_and_one_column_per_exact_version(write_suite, tmp_path, monkeypatch):
    """`pinned` in one suite, nothing (the pin) in the other: one version, one column per
    build, labelled by the suite's spelling beside the exact version."""
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path / "cache"))
    named = write_suite(
        PINNED_BY_NAME.format(
            name="named", backend="{name: ort-web, version: [pinned], bundle: [jsep, webgpu]}"
        ),
        "a-named.yaml",
    )
    default = write_suite(
        PINNED_BY_NAME.format(name="default", backend="{name: ort-web, bundle: [jsep, webgpu]}"),
        "b-default.yaml",
    )
    cases = select_resolved(load_suites([named, default], REGISTRY), [], resolve_targets)
    assert len(cases) == 8
    targets = list(dict.fromkeys(case.backend for case in cases))
    assert [t.id for t in targets] == ["ort-web:jsep", "ort-web:webgpu"]
    assert {(t.version, t.declared) for t in targets} == {(cases[0].backend.version, "pinned")}
    records = [
        case_result(
            "R",
            case,
            BackendRun(),
            Judgement(frozenset({"pass"}), "pass", Outcome.EXPECTED, "", 0.0, 0.0),
            wall_ms=1.0,
        )
        for case in cases
    ]
    history = History.of([RunRecord("R", "2026-11-30T10:00:00+00:00")], records)
    pivot = analysis.latest_pivot(history.results)
    assert sorted({backend for backend, _ in pivot["verdict"].columns}) == [
        "ort-web:jsep",
        "ort-web:webgpu",
    ]
    assert len(pivot) == 1  # the two suites' case is one row: enc/batch=1,sequence=4/...


def test_several_versions_name_the_pin_by_its_spelling(monkeypatch, tmp_path, write_suite):
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path / "cache"))
    installed = tmp_path / "cache" / "onnxruntime-web" / "1.24.3"
    installed.mkdir(parents=True)
    (installed / ".complete").touch()
    two = write_suite(
        PINNED_BY_NAME.format(
            name="two", backend="{name: ort-web, version: ['1.24.3', pinned], bundle: webgpu}"
        ),
        "a-two.yaml",
    )
    default = write_suite(
        PINNED_BY_NAME.format(name="default", backend="{name: ort-web, bundle: webgpu}"),
        "b-default.yaml",
    )
    cases = select_resolved(load_suites([default, two], REGISTRY), [], resolve_targets)
    # grouped by version (one page each), the version first met first
    assert [c.id.split("/")[-2] for c in cases] == [
        "ort-web@pinned:webgpu",
        "ort-web@pinned:webgpu",
        "ort-web@pinned:webgpu",
        "ort-web@pinned:webgpu",
        "ort-web@1.24.3:webgpu",
        "ort-web@1.24.3:webgpu",
    ]
    assert [c.suite.name for c in cases] == ["default"] * 2 + ["two"] * 4
    assert len({c.backend for c in cases}) == 2
