"""ort-genai: onnxruntime-genai's own generator loop (``og.Generator``) as a second driver of a
decoder case's model. Without a GPU its cases skip with what was tried; with ``--adapter cpu``
genai's loop runs for real on onnxruntime's CPU EP, its greedy tokens and every step's outputs
those of onnxruntime CPU's reference loop."""

from __future__ import annotations

import json
import os

import onnx
import pytest

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions, CaseWork
from runner.backends.ortgenai.generator import GenaiSteps
from runner.matrix import expand_matrix
from runner.schedule import PREFILL_DRAW
from runner.suite import load_suite
from runner.suite.spec import DecoderParams
from runner.workload import materialize
from runner.workload.decoder import build_decoder

from .conftest import regress

pytest.importorskip("onnxruntime_genai")

SIZES = dict(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=96)
SUITE = """
models:
  llama: {path: llama.onnx, max_length: 16, generate: {prompt: 5, steps: 4}}
  llama-rewind:
    path: llama.onnx
    max_length: 16
    generate: {prompt: 4, steps: 4, rewind: {after: 2, by: 1}}
  encoder:
    builtin: encoder
    layers: 1
    hidden: 16
    heads: 2
    ffn: 32
    shapes: [{batch: 1, sequence: 8}]
backends: [ort-genai]
"""


@pytest.fixture
def suite(write_suite):
    path = write_suite(SUITE)
    params = DecoderParams(**SIZES, max_length=16, static_mask=True, accuracy_level=0)
    onnx.save(build_decoder(params), path.parent / "llama.onnx")
    return path


def results_of(out) -> dict[tuple[str, str], dict]:
    [results] = out.glob("runs/*/results.jsonl")
    records = [json.loads(line) for line in results.read_text().splitlines()]
    return {(r["case_id"].split("/")[0], r["capture"]): r for r in records}


def test_genai_s_loop_on_the_cpu_ep_is_judged_like_any_backend_s(suite, tmp_path):
    """Every step's logits and present caches within the tolerance of onnxruntime CPU's loop
    (eager passes; the CPU EP captures nothing, so capture is capture-not-engaged, as
    ort-native's CPU EP runs are); what genai cannot drive is skipped, saying why."""
    out = tmp_path / "out"
    proc = regress("run", suite, "--adapter", "cpu", "--out", out, "--no-localize")
    assert proc.returncode in (0, 1), proc.stderr
    results = results_of(out)
    assert results["llama", "eager"]["verdicts"] == ["pass"]
    assert results["llama", "eager"]["timings"]["runs"] == 4  # the decode steps, each once
    assert results["llama", "capture"]["verdicts"] == ["capture-not-engaged"]
    assert results["llama", "capture"]["max_abs_error"] <= 1e-3
    for mode in ("eager", "capture"):
        assert results["llama-rewind", mode]["verdict"] == "skipped"
        assert "`rewind:` is not driven through genai" in results["llama-rewind", mode]["message"]
        assert results["encoder", mode]["verdict"] == "skipped"
        assert results["encoder", mode]["message"].startswith("ort-genai runs decoder cases only")


def test_genai_chooses_the_tokens_onnxruntime_cpu_s_loop_feeds(suite):
    """The driver itself: genai's greedy tokens are the reference loop's, its runs the prefill
    and each decode step once."""
    [case] = [
        c for c in expand_matrix([load_suite(suite, REGISTRY)])
        if c.model.name == "llama" and c.mode == "eager"
    ]  # fmt: skip
    workload = materialize(case, runs=3)
    steps = GenaiSteps(BackendOptions(adapter="cpu"))
    ran = steps.run(CaseWork(case, workload))
    assert ran.status == "ok", ran.message
    fed = [
        int(workload.inputs_of(feed.variant)["input_ids"][0, -1])
        for feed in workload.schedule
        if feed.variant[1] != PREFILL_DRAW
    ]
    assert ran.details["tokens"][:-1] == fed[:-1]  # the schedule repeats the last step
    assert len(ran.runs) == 1 + 4 and ran.runs[0]["logits"].shape == (1, 5, SIZES["vocab"])
    caches = {f"present.{layer}.{kv}" for layer in (0, 1) for kv in ("key", "value")}
    assert all(set(run) == {"logits", *caches} for run in ran.runs)


@pytest.mark.pypi
@pytest.mark.skipif(os.environ.get("REGRESS_GPU_TESTS") == "1", reason="a GPU is promised here")
def test_without_a_gpu_a_decoder_case_is_skipped_saying_what_was_tried(suite, tmp_path):
    out = tmp_path / "out"
    proc = regress("run", suite, "--filter", "model=llama", "--out", out, "--no-localize")
    assert proc.returncode == 0, proc.stderr
    for mode in ("eager", "capture"):
        message = results_of(out)["llama", mode]["message"]
        assert message.startswith("onnxruntime-genai ") and "registered onnxruntime-ep-webgpu" in (
            message
        )
        assert "no WebGPU EP device: ONNX Runtime found no GPU" in message
        assert "--adapter cpu runs genai's loop on the CPU EP" in message
