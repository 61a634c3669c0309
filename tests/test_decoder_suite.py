"""A decoder in a suite: ``builtin: decoder`` with its generation loop (``generate:``), each
decode step a run judged against onnxruntime CPU's step, and the two decoder canaries on wgpu
(suites/decoder.yaml)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions, CaseWork
from runner.backends.ortnative.ep import EpBackend
from runner.backends.wgpu.backend import WgpuBackend
from runner.errors import InvalidInput
from runner.matrix import expand_matrix
from runner.oracle import ReferenceCache
from runner.schedule import BASE, PREFILL_DRAW
from runner.step import Step
from runner.suite import load_suite
from runner.suite.spec import DecoderParams, EncoderParams
from runner.workload import materialize
from runner.workload.decoder import build_decoder
from runner.workload.encoder import build_encoder

from .conftest import REPO, regress

DECODER = REPO / "suites" / "decoder.yaml"


def test_a_decoder_runs_its_loop_as_the_case_s_runs():
    suite = load_suite(DECODER, REGISTRY)
    [case] = [
        c
        for c in expand_matrix([suite])
        if c.id.startswith("llama-tiny/") and c.backend.name == "wgpu" and c.mode == "capture"
        and c.layout.label == "default" and not c.revisit
    ]  # fmt: skip
    assert case.shape.as_dict() == {
        "batch_size": 1,
        "sequence_length": 1,
        "total_sequence_length": 16,
        "past_sequence_length": 16,
    }
    workload = materialize(case, runs=3)  # the loop, not --runs, sets the runs
    variants = [feed.variant for feed in workload.schedule]
    # the prefill, then 4 steps, the last twice
    assert variants == [(0, PREFILL_DRAW), (0, 0), (0, 1), (0, 2), (0, 3), (0, 3)]
    assert [feed.prefill for feed in workload.schedule] == [True] + [False] * 5
    masks = [workload.inputs_of(v)["attention_mask"] for v in variants]
    assert [int(m.sum()) for m in masks] == [4, 5, 6, 7, 8, 8]  # prompt 4, one more per step
    assert all(m.shape == (1, 16) for m in masks)
    prefill = workload.inputs_of((0, PREFILL_DRAW))
    assert prefill["input_ids"].shape == (1, 4) and not prefill["past_key_values.0.key"].any()
    assert workload.shape_of((0, PREFILL_DRAW)) == {**case.shape.as_dict(), "sequence_length": 4}
    assert workload.shape_of((0, 2)) == case.shape.as_dict()
    step_3 = workload.inputs_of((0, 2))
    # the CPU's caches (the oracle's) hold the positions written so far, zeros past them
    cache = step_3["past_key_values.1.value"]
    assert np.abs(cache[:, :, :6]).min() > 0 and not cache[:, :, 6:].any()
    assert workload.in_place == {
        f"present.{layer}.{kv}": f"past_key_values.{layer}.{kv}"
        for layer in (0, 1)
        for kv in ("key", "value")
    }
    assert workload.device_cache.inputs == tuple(workload.in_place.values())
    assert workload.device_cache.rewinds == {}


def test_prefill_cpu_leaves_the_prompt_to_onnxruntime_cpu(write_suite):
    """``prefill: cpu``: no prefill run; the first decode step is fed the CPU's caches."""
    suite = write_suite(
        """
        models:
          llama: {builtin: decoder, max_length: 16, generate: {prompt: 4, steps: 3, prefill: cpu}}
        backends: [wgpu]
        """
    )
    [case] = [c for c in expand_matrix([load_suite(suite, REGISTRY)]) if c.mode == "capture"]
    workload = materialize(case, runs=3)
    assert [feed.variant for feed in workload.schedule] == [(0, 0), (0, 1), (0, 2), (0, 2)]
    assert workload.device_cache.prefill_shape == {}
    first = workload.inputs_of((0, 0))["past_key_values.0.key"]
    assert np.abs(first[:, :, :4]).min() > 0 and not first[:, :, 4:].any()


def capture_workload(model: str):
    [case] = [
        c
        for c in expand_matrix([load_suite(DECODER, REGISTRY)])
        if c.id.startswith(f"{model}/") and c.backend.name == "wgpu" and c.mode == "capture"
        and c.layout.label == "default" and not c.revisit
    ]  # fmt: skip
    return materialize(case, runs=3)


def test_the_loop_variants_rewind_swap_and_interleave_generators():
    rewind = capture_workload("llama-rewind")  # 5 steps, back 2 after step 3
    masks = [rewind.inputs_of(f.variant)["attention_mask"] for f in rewind.schedule]
    assert [int(m.sum()) for m in masks] == [4, 5, 6, 7, 6, 7, 7]
    first_again = rewind.inputs_of((0, 3))  # the step after the rewind: position 5 again
    assert first_again["input_ids"] == rewind.inputs_of((0, 1))["input_ids"]
    assert not first_again["past_key_values.0.key"][:, :, 5:].any()  # stale positions zeroed
    assert rewind.device_cache.rewinds == {(0, 3): 5}  # the device zeroes them too
    assert not rewind.swapped and capture_workload("llama-swapped").swapped
    two = capture_workload("llama-two-generators")  # 3 steps each, the last twice
    assert [(f.graph, f.variant) for f in two.schedule] == [(0, (0, -1)), (1, (1, -1))] + [
        (g, (g, d)) for d in (0, 1, 2, 2) for g in (0, 1)
    ]
    prompts = [two.inputs_of((g, PREFILL_DRAW))["input_ids"] for g in (0, 1)]
    assert not np.array_equal(*prompts)  # a prompt each


BAD = """
models:
  long-loop:
    builtin: decoder
    max_length: 8
    generate: {prompt: 4, steps: 5}
  mixed:
    builtin: decoder
    ffn: 64
  odd-heads:
    builtin: decoder
    heads: 3
  shaped:
    builtin: decoder
    shapes: [{batch_size: 1}]
  encoder:
    builtin: encoder
    kv_heads: 2
  rewound:
    builtin: decoder
    max_length: 8
    generate: {prompt: 2, steps: 3, rewind: {after: 3, by: 5}, caches: swapped}
layouts:
  - label: wider-eps
    values: {eps: 1.0e-2}
backends: [wgpu]
"""


def test_bad_decoder_entries_say_where_and_what_is_expected(write_suite):
    path = write_suite(BAD)
    with pytest.raises(InvalidInput) as info:
        load_suite(path, REGISTRY)
    problems = [str(p) for p in info.value.problems]
    expected = [
        f"{path}:5:15: a prompt of 4 tokens and 5 decode steps need 9 positions; model "
        "'long-loop' holds max_length 8; expected prompt + steps <= max_length (8)",
        f"{path}:8:5: 'ffn' is not a parameter of the builtin decoder; expected its own "
        "parameters (docs/writing-suites.md#decoders-and-generation-loops)",
        f"{path}:10:5: model 'odd-heads': heads=3 does not divide hidden=64; expected sizes "
        "GroupQueryAttention takes",
        f"{path}:14:5: model 'shaped' is a builtin decoder, whose shapes its generation loop "
        "sets; expected no `inputs:` or `shapes:` on a decoder (`generate:` sets its loop)",
        f"{path}:17:5: 'kv_heads' is not a parameter of the builtin encoder; expected its own "
        "parameters (docs/writing-suites.md#decoders-and-generation-loops)",
        f"{path}:21:53: a rewind after decode step 3 of 3; expected after < steps (3): a step "
        "must follow the rewind",
        f"{path}:21:60: a rewind by 5 after decode step 3 leaves 0 of the 2 + 3 positions; "
        "expected by < prompt + after (5): at least one stays",
        f"{path}:21:72: caches: swapped with a rewind: the swapped buffer's stale positions "
        "would differ from the reference's; expected a rewind or swapped caches, in two models",
    ]
    for message in expected:
        assert message in problems, problems
    assert any("layout 'wider-eps' changes eps, which model 'long-loop'" in p for p in problems)
    proc = regress("validate", path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert expected[0] in proc.stderr


BUDGET = "expected at most 1024 MiB per tensor (REGRESS_MAX_TENSOR_MIB raises it)"


def decoder_suite_with(write_suite, **sizes) -> tuple[Path, dict[str, int]]:
    """suites/decoder.yaml with llama-tiny's (its first model's) `sizes`, and their lines."""
    lines = DECODER.read_text().splitlines(keepends=True)
    at = {}
    for key, value in sizes.items():
        at[key] = next(i for i, text in enumerate(lines, 1) if text.startswith(f"    {key}: "))
        lines[at[key] - 1] = f"    {key}: {value}\n"
    return write_suite("".join(lines)), at


def test_a_decoder_that_cannot_be_built_is_refused_at_its_line(write_suite):
    """A size past the schema's maximum, or sizes whose largest tensor passes the memory budget,
    exit 2 at the size's line before anything is allocated (not a MemoryError per case)."""
    huge, at = decoder_suite_with(write_suite, vocab=1099511627776)
    proc = regress("validate", huge)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (
        f"{huge}:{at['vocab']}:12: 1099511627776 is greater than the maximum of 1048576; "
        "expected a number <= 1048576"
    )
    wide, at = decoder_suite_with(write_suite, hidden=1024, vocab=1048576)
    proc = regress("validate", wide)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (
        f"{wide}:{at['vocab']}:12: model 'llama-tiny' needs a tensor of 4,096 MiB for its "
        f"embedding and lm_head weights (vocab x hidden: 1048576 x 1024); {BUDGET}"
    )


def test_a_generation_loop_past_the_memory_budget_is_refused(write_suite, monkeypatch):
    """The loop's sizes are bounded too: the prefill's attention scores of the builtin, and a
    decoder file's KV caches, whose other sizes come from the file."""
    long, at = decoder_suite_with(
        write_suite, hidden=128, heads=8, max_length=8192, generate="{prompt: 8188, steps: 4}"
    )
    with pytest.raises(InvalidInput) as info:
        load_suite(long, REGISTRY)
    assert [str(p) for p in info.value.problems] == [
        f"{long}:{at['generate']}:24: model 'llama-tiny' needs a tensor of 2,047 MiB for the "
        f"prefill's attention scores (heads x prompt x max_length: 8 x 8188 x 8192); {BUDGET}"
    ]
    folder = write_suite("", name="models/.keep").parent
    params = DecoderParams(heads=4, kv_heads=4, static_mask=True)
    onnx.save(build_decoder(params), folder / "llama.onnx")
    cached = write_suite(
        """
        models:
          file:
            path: models/llama.onnx
            max_length: 8192
            generate: {prompt: 4, steps: 3}
        backends: [wgpu]
        """,
        name="file.yaml",
    )
    monkeypatch.setattr("runner.suite.builder.MAX_TENSOR_BYTES", 1 << 20)
    with pytest.raises(InvalidInput) as info:
        load_suite(cached, REGISTRY)
    assert [str(p) for p in info.value.problems] == [
        f"{cached}:4:17: model 'file' needs a tensor of 2 MiB for a KV cache (kv_heads x "
        "max_length x head_size: 4 x 8192 x 16); expected at most 1 MiB per tensor "
        "(REGRESS_MAX_TENSOR_MIB raises it)"
    ]


@pytest.mark.gpu
def test_every_decode_step_is_judged_and_the_canaries_fire_on_wgpu(tmp_path):
    out = tmp_path / "out"
    proc = regress("run", DECODER, "--backend", "wgpu", "--out", out, "--no-localize")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [results] = out.glob("runs/*/results.jsonl")
    found = {}
    for line in results.read_text().splitlines():
        result = json.loads(line)
        model, *_, layout, _, mode = result["case_id"].split("/")
        found[model, layout, mode] = result
    assert len(found) == 20
    clean = [r for (m, *_), r in found.items() if not m.startswith("frozen-")]
    assert {r["verdict"] for r in clean} == {"pass"} and len(clean) == 16
    lengths = found["frozen-lengths", "layout=default", "capture"]
    assert lengths["verdict"] == "capture-mismatch"
    # the canaries prefill on the CPU (as on ort-web): run 1 records, run 2 is the first replay
    assert "differs from eager in run 2 of 5" in lengths["message"]
    cache = found["frozen-cache", "layout=default", "capture"]
    assert cache["verdict"] == "capture-mismatch"
    assert "(runs differ from run 2)" in cache["message"], cache["message"]
    assert found["frozen-cache", "layout=default", "eager"]["verdict"] == "pass"


DEVICE_PREFILL_CANARIES = """
models:
  frozen-lengths: &llama
    builtin: decoder
    max_length: 16
    generate: {prompt: 4, steps: 4}
  frozen-cache: *llama
backends: [wgpu]
cases:
  - match: {model: frozen-lengths, capture: capture}
    inject: [lengths-frozen-at-capture]
    expect: capture-mismatch
  - match: {model: frozen-cache, capture: capture}
    inject: [cache-frozen-at-capture]
    expect: capture-mismatch
"""


@pytest.mark.gpu
def test_the_decoder_faults_fire_after_a_device_prefill_on_wgpu(write_suite, tmp_path):
    """With the prefill on the device (run 1) the canaries' faults still show from the first
    replay (run 3), and their eager twins pass."""
    out = tmp_path / "out"
    proc = regress("run", write_suite(DEVICE_PREFILL_CANARIES), "--out", out, "--no-localize")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [results] = out.glob("runs/*/results.jsonl")
    found = {}
    for line in results.read_text().splitlines():
        result = json.loads(line)
        found[result["model"], result["capture"]] = result
    assert found["frozen-lengths", "capture"]["verdict"] == "capture-mismatch"
    assert "differs from eager in run 3 of 6" in found["frozen-lengths", "capture"]["message"]
    assert "(runs differ from run 3)" in found["frozen-cache", "capture"]["message"]
    assert {found[m, "eager"]["verdict"] for m in ("frozen-lengths", "frozen-cache")} == {"pass"}


# The canaries on ort-web's C++ builds: the bundled suite's model and loop with onnxruntime CPU's
# prefill (as decoder.yaml runs ort-web's C++ captures), each fault on its own case, and the
# clean loop, in buffers onnxruntime-web allocated (the replays of pre-allocated outputs need
# them: suites/bugs/ort-prealloc-handle.yaml); `{allocator}` says whose they are.
ORT_WEB_CANARIES = """
models:
  clean: &llama
    builtin: decoder
    layers: 2
    hidden: 64
    heads: 4
    kv_heads: 2
    intermediate: 128
    vocab: 96
    max_length: 16
    generate: {{prompt: 4, steps: 4, prefill: cpu}}
  frozen-lengths: *llama
  frozen-cache: *llama
buffers: {{allocator: {allocator}}}
backends:
  - {{name: ort-web, bundle: [webgpu, jspi]}}
exclude:
  - {{capture: eager}}
cases:
  - match: {{model: frozen-lengths}}
    inject: [lengths-frozen-at-capture]
    expect: capture-mismatch
  - match: {{model: frozen-cache}}
    inject: [cache-frozen-at-capture]
    expect: capture-mismatch
"""


@pytest.mark.browser
def test_the_decoder_canaries_fire_on_ort_web_and_the_clean_loop_passes(write_suite, tmp_path):
    """In one page, one case after another: with the buffers onnxruntime-web allocated every
    replay runs, the clean loop matches onnxruntime CPU and both faults show on both C++ builds
    (frozen lengths from run 2, the first replay; a frozen cache from run 1 there, where it was
    run 2 in the page's buffers: not explained); with the page's own buffers replays throw
    instead (which ones depends on the handles the page's earlier allocations left)."""
    found = {}
    for allocator in ("onnxruntime", "page"):
        out = tmp_path / allocator
        suite = write_suite(ORT_WEB_CANARIES.format(allocator=allocator), name=f"{allocator}.yaml")
        proc = regress("run", suite, "--out", out, "--no-localize")
        expected_exit = 0 if allocator == "onnxruntime" else 1  # 1: an unexpected verdict
        assert proc.returncode == expected_exit, proc.stdout + proc.stderr
        [results] = out.glob("runs/*/results.jsonl")
        for result in map(json.loads, results.read_text().splitlines()):
            found[allocator, result["model"], result["bundle"]] = result
    for bundle in ("webgpu", "jspi"):
        assert found["onnxruntime", "clean", bundle]["verdict"] == "pass"
        for model in ("frozen-lengths", "frozen-cache"):
            result = found["onnxruntime", model, bundle]
            assert result["verdict"] == "capture-mismatch", result["message"]
        assert "in run 2 of 5" in found["onnxruntime", "frozen-lengths", bundle]["message"]
    page = [result for (allocator, *_), result in found.items() if allocator == "page"]
    assert any("gpuBufferMetadata" in (result["message"] or "") for result in page), page


def test_a_decoder_file_runs_as_the_builtin_and_one_without_caches_is_refused(write_suite):
    """The builtin exported to an ONNX file, declared with `path:` and `generate:`, gets the
    builtin's loop (the same decode steps, so every backend runs it alike); an encoder file
    declared as a decoder is refused at its `path:` with what a decoder file needs."""
    sizes = dict(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=96)
    params = DecoderParams(**sizes, max_length=16, static_mask=True, accuracy_level=0)
    folder = write_suite("", name="models/.keep").parent
    onnx.save(build_decoder(params), folder / "llama.onnx")
    onnx.save(build_encoder(EncoderParams(), {}), folder / "encoder.onnx")
    builtin = ", ".join(f"{k}: {v}" for k, v in sizes.items())
    loop = "max_length: 16, generate: {prompt: 4, steps: 3}"
    suite = write_suite(
        f"""
        models:
          builtin: {{builtin: decoder, {builtin}, {loop}}}
          file: {{path: models/llama.onnx, {loop}}}
        backends: [wgpu]
        """
    )
    cases = [c for c in expand_matrix([load_suite(suite, REGISTRY)]) if c.mode == "capture"]
    built, from_file = (materialize(c, runs=3) for c in cases)
    assert from_file.shape == built.shape and from_file.in_place == built.in_place
    assert from_file.schedule == built.schedule and from_file.key == built.key
    for feed in built.schedule:
        for name, value in built.inputs_of(feed.variant).items():
            np.testing.assert_array_equal(from_file.inputs_of(feed.variant)[name], value)
    bad = write_suite(
        """
        models:
          encoder:
            path: models/encoder.onnx
            max_length: 16
            generate: {prompt: 4, steps: 3}
        backends: [wgpu]
        """,
        name="bad.yaml",
    )
    with pytest.raises(InvalidInput) as info:
        load_suite(bad, REGISTRY)
    [problem] = info.value.problems
    assert str(problem) == (
        f"{bad}:3:11: model 'encoder' (encoder.onnx) is declared a decoder (`generate:`), but "
        "its inputs are x and its outputs y; expected onnxruntime-genai's decoder: inputs "
        "input_ids, attention_mask and past_key_values.N.key and .value for each layer N; "
        "outputs logits and present.N.key and .value"
    )


def test_ort_native_binds_the_loop_variants_right_on_the_cpu_ep(tmp_path):
    """ort-native's capture path for a rewind, swapped caches (two value sets rebound every
    run) and two generators (a binding per graph), on the CPU EP, which captures nothing: every
    step's logits and caches right, each replay seen executing the model again."""
    out = tmp_path / "out"
    args = ("--backend", "ort-native", "--adapter", "cpu", "--filter", "model=llama-[rst][ew]*")
    regress("run", DECODER, *args, "--out", out, "--no-localize")
    [results] = out.glob("runs/*/results.jsonl")
    verdicts = {}
    for line in results.read_text().splitlines():
        result = json.loads(line)
        verdicts[result["case_id"].split("/")[0], result["capture"]] = result["verdicts"]
    assert verdicts == {
        (model, mode): ["capture-not-engaged"] if mode == "capture" else ["pass"]
        for model in ("llama-rewind", "llama-swapped", "llama-two-generators")
        for mode in ("eager", "capture")
    }


def decoder_case(model: str, mode: str, backend: str = "wgpu"):
    [case] = [
        c
        for c in expand_matrix([load_suite(DECODER, REGISTRY)])
        if c.id.startswith(f"{model}/") and c.backend.name == backend and c.mode == mode
        and c.layout.label == "default" and not c.revisit
    ]  # fmt: skip
    return case


def open_backend_here(backend: str):
    """wgpu on this machine's adapter, or ort-native on onnxruntime's CPU EP."""
    if backend == "wgpu":
        return WgpuBackend(BackendOptions())
    return EpBackend(BackendOptions(adapter="cpu"))


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["wgpu", "ort-native"])
@pytest.mark.parametrize("mode", ["eager", "capture"])
@pytest.mark.parametrize("model", ["llama-tiny", "llama-rewind", "llama-two-generators"])
def test_decode_steps_read_the_caches_the_device_wrote(model, mode, backend):
    """The host's caches are the oracle's alone: with NaN in every decode step's (the prefill's
    zeros kept) each run still matches onnxruntime CPU's, the prefill's included."""
    case = decoder_case(model, mode, backend)
    workload = materialize(case, runs=3)
    references = ReferenceCache(None).references(workload)
    caches = workload.device_cache.inputs
    poisoned = {
        variant: {n: np.full_like(v, np.nan) if n in caches else v for n, v in inputs.items()}
        for variant, inputs in workload.all_variants().items()
        if variant[1] != PREFILL_DRAW
    }
    blind = dataclasses.replace(
        workload, inputs=poisoned[BASE], variants={**workload.variants, **poisoned}
    )
    run = run_on_a_new_backend(backend, case, blind)
    assert run.status == "ok", run.message
    assert len(run.runs) == len(workload.schedule)
    for outputs, feed in zip(run.runs, workload.schedule, strict=True):
        for name, expected in references[feed.variant].items():
            np.testing.assert_allclose(outputs[name], expected, atol=1e-3, err_msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["eager", "capture"])
def test_wgpu_decode_steps_start_from_the_prefills_caches(mode):
    """With the prefill's present caches not handed to the decode session (no `in_place`
    pairs), the first decode step reads zeros and goes wrong: the hand-off is what it reads."""
    case = decoder_case("llama-tiny", mode)
    workload = materialize(case, runs=3)
    dropped = run_on_a_new_backend("wgpu", case, dataclasses.replace(workload, in_place={}))
    first_step = workload.schedule[1]  # the run after the prefill
    logits = ReferenceCache(None).references(workload)[first_step.variant]["logits"]
    assert np.abs(dropped.runs[1]["logits"] - logits).max() > 0.1


def run_on_a_new_backend(backend: str, case, workload):
    """A run on a backend of its own: no buffer holds an earlier run's caches."""
    opened = open_backend_here(backend)
    try:
        return opened.run(CaseWork(case, workload))
    finally:
        opened.close()


def test_a_real_prompts_ids_are_the_prefill_and_one_past_the_vocabulary_is_refused(write_suite):
    """`prompt:` as token ids (a real prompt, as the model's tokenizer writes it): the prefill
    feeds exactly those; an id the vocabulary lacks exits 2 at that id."""
    text = (
        "models:\n"
        "  llama-prompted:\n"
        "    builtin: decoder\n"
        "    max_length: 16\n"
        "    generate: {prompt: [3, 95, 7], steps: 2}\n"
        "backends: [wgpu]\n"
    )
    [case, *_] = expand_matrix([load_suite(write_suite(text), REGISTRY)])
    workload = materialize(case, runs=1)
    assert workload.variants[(0, PREFILL_DRAW)]["input_ids"].tolist() == [[3, 95, 7]]
    refused = write_suite(text.replace("[3, 95, 7]", "[3, 96, 7]"))
    proc = regress("validate", refused)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (
        f"{refused}:5:28: token id 96 of model 'llama-prompted''s prompt; expected ids below "
        "its vocabulary (96)"
    )


class _CacheTail:
    """wgpu, with every run's present caches overwritten from position `start(length)` on, where
    `length` is the run's sequence length: what onnxruntime-web 1.29.0's GroupQueryAttention
    leaves there (another kernel's leftovers) when `start` is the length itself."""

    def __init__(self, start):
        self._backend = WgpuBackend(BackendOptions())
        self._start = start

    def run(self, work):
        run = self._backend.run(work)
        runs = []
        for feed, outputs in zip(work.workload.schedule, run.runs, strict=True):
            length = int(work.workload.inputs_of(feed.variant)["attention_mask"].sum())
            outputs = dict(outputs)
            for name in work.workload.in_place:
                outputs[name] = outputs[name].copy()
                outputs[name][:, :, self._start(length) :] = 7.0
            runs.append(outputs)
        return dataclasses.replace(run, runs=tuple(runs))


@pytest.mark.gpu
def test_cache_positions_past_the_sequence_are_not_judged():
    """No step reads a present cache's positions past its sequence (onnxruntime CPU leaves zeros
    there, 1.29.0's C++ EP leftovers): a backend writing anything there passes; one that
    overwrites the last position written fails on the cache."""
    step = Step(ReferenceCache(None).references, BackendOptions())
    case = decoder_case("llama-tiny", "eager")
    assert step.run(case, _CacheTail(lambda length: length)).judgement.verdict == "pass"
    wrong = step.run(case, _CacheTail(lambda length: length - 1)).judgement
    assert wrong.verdict == "reference-mismatch", wrong
    # one position: 2 KV heads of 16
    assert "on 'present." in wrong.message and ": 32/512 elements" in wrong.message, wrong
