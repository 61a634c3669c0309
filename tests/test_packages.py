"""Models from packages (`package:` in a suite): fetched by real pip from a real wheel, checked,
kept in the cache; a package that cannot be had skips its cases, one that is not what the suite
says stops the run at the model's line. The wheels here are made by the test and served to pip
from a folder (as a mirror would serve them), so nothing leaves this machine."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from runner.errors import InvalidInput
from runner.packages import LISTING, PackageFile, PackageMismatch, PackageUnavailable, materialize
from runner.suite import load_suite

from .conftest import regress

MODEL_FILE = "tinymodel/data/relu.onnx"


def relu_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


RELU = relu_model()
DIGEST = hashlib.sha256(RELU).hexdigest()


def write_wheel(folder: Path, package: str, files: dict[str, bytes]) -> None:
    """`package` 1.0 as a wheel holding `files`, with the metadata pip reads."""
    info = f"{package}-1.0.dist-info"
    with zipfile.ZipFile(folder / f"{package}-1.0-py3-none-any.whl", "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n"
        )
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")


@pytest.fixture
def mirror(tmp_path, monkeypatch) -> Path:
    """A folder pip takes `tinymodel 1.0` from (no index), and a cache folder of this test's own."""
    folder = tmp_path / "mirror"
    folder.mkdir()
    write_wheel(folder, "tinymodel", {MODEL_FILE: RELU})
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path / "cache"))
    return folder


def left_in_cache(folder: Path) -> list[Path]:
    """What fetching left in the cache folder but wheels' listings (``LISTING``): a listing
    records what a wheel holds, whether or not that is what the suite says."""
    return [p for p in folder.rglob("*") if p.is_file() and p.name != LISTING]


def source(**changes) -> PackageFile:
    fields = {"package": "tinymodel", "version": "1.0", "file": MODEL_FILE, "sha256": DIGEST}
    return PackageFile(**{**fields, **changes}, license="MIT")


def test_a_package_file_is_fetched_once_then_found_offline(mirror, tmp_path):
    said: list[str] = []
    path = materialize(source(), said.append)
    assert path == tmp_path / "cache/packages/tinymodel/1.0" / MODEL_FILE
    assert path.read_bytes() == RELU
    assert said == [
        f"fetching {MODEL_FILE} from tinymodel 1.0 from PyPI (pip download) into {path.parent}"
    ]
    for wheel in mirror.iterdir():
        wheel.unlink()  # the mirror is gone: the cache answers
    assert materialize(source(), said.append) == path and len(said) == 1


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"sha256": "0" * 64}, f"{MODEL_FILE} from tinymodel 1.0 has sha256 {DIGEST}, not the"),
        (
            {"file": "tinymodel/other.onnx"},
            f"tinymodel 1.0 has no file 'tinymodel/other.onnx' (its ONNX files: {MODEL_FILE})",
        ),
    ],
)
def test_a_package_that_is_not_what_the_suite_says_leaves_nothing_in_the_cache(
    mirror, tmp_path, changes, message
):
    with pytest.raises(PackageMismatch, match=message.replace("(", r"\(").replace(")", r"\)")):
        materialize(source(**changes), lambda _: None)
    assert left_in_cache(tmp_path / "cache") == []
    assert source().wheel_files()[MODEL_FILE] == DIGEST


def test_a_package_pip_cannot_download_is_unavailable(mirror):
    with pytest.raises(PackageUnavailable, match="pip cannot download tinymodel: ERROR: .*2.0"):
        materialize(source(version="2.0"), lambda _: None)


def suite_text(version: str = "1.0", sha256: str = DIGEST, input_name: str = "x") -> str:
    return f"""
name: packaged
models:
  relu:
    package:
      name: tinymodel
      version: "{version}"
      file: {MODEL_FILE}
      sha256: {sha256}
      license: MIT
    inputs: {{{input_name}: {{range: [-1, 1]}}}}
    shapes: [{{batch: 2}}]
backends: [reference]
"""


def packaged_suite(write_suite, **changes) -> Path:
    return write_suite(suite_text(**changes))


def test_a_run_fetches_its_package_model_and_runs_it(mirror, write_suite, tmp_path):
    suite = packaged_suite(write_suite)
    proc = regress("validate", suite)  # files alone cannot tell what the wheel holds
    assert (
        proc.stdout.strip()
        == "1 suite(s), 2 case(s): 1 unchecked (the notes say what), the rest ok"
    )
    assert proc.stderr == (
        f"note: {suite}:5:7: model 'relu': {MODEL_FILE} from tinymodel 1.0 was not checked (not "
        "fetched yet): a run fetches it and checks its file and sha256\n"
    )
    out = tmp_path / "reports"
    proc = regress("run", suite, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert regress("validate", suite).stdout.strip() == "ok: 1 suite(s), 2 case(s)"
    assert "fetching tinymodel/data/relu.onnx from tinymodel 1.0" in proc.stdout + proc.stderr
    [run] = (out / "runs").iterdir()
    results = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [(r["verdict"], r["model_digest"]) for r in results] == [("pass", DIGEST)] * 2


def test_a_package_model_the_run_cannot_fetch_is_skipped_with_the_reason(
    mirror, write_suite, tmp_path
):
    suite = packaged_suite(write_suite, version="2.0")
    out = tmp_path / "reports"
    proc = regress("run", suite, "--out", out)
    assert proc.returncode == 0, proc.stderr
    told = proc.stdout + proc.stderr
    assert "pip cannot download tinymodel" in told
    assert "the cases of model 'relu' are skipped" in told
    [run] = (out / "runs").iterdir()
    results = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert {r["verdict"] for r in results} == {"skipped"}
    assert results[0]["message"] == (
        f"{MODEL_FILE} from tinymodel 2.0 is not in the cache folder: the run could not fetch it "
        "(its notes say why)"
    )


def test_a_wrong_digest_stops_the_run_at_the_models_line(mirror, write_suite, tmp_path):
    suite = packaged_suite(write_suite, sha256="f" * 64)
    out = tmp_path / "reports"
    proc = regress("run", suite, "--out", out)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{suite}:3:1: model 'relu': {MODEL_FILE} from tinymodel 1.0 has sha256" in proc.stderr
    assert not (out / "runs").exists() and left_in_cache(tmp_path / "cache") == []
    # the wheel's listing is kept: `validate` now points at the line at fault, offline
    proc = regress("validate", suite)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{suite}:8:15: model 'relu': {MODEL_FILE} from tinymodel 1.0 has sha256 " in (
        proc.stderr
    )


def test_once_fetched_a_package_models_inputs_are_checked(mirror, write_suite):
    from runner.backends import REGISTRY

    suite = packaged_suite(write_suite, input_name="z")
    load_suite(suite, REGISTRY)  # not fetched yet: nothing to check its inputs against
    materialize(source(), lambda _: None)
    with pytest.raises(InvalidInput, match="model 'relu' has no input 'z'; expected one of x"):
        load_suite(suite, REGISTRY)


@pytest.mark.parametrize(
    "package, expected",
    [
        ("file: ../escape.onnx", "text matching"),
        ("sha256: ABC", "text matching ^[0-9a-f]{64}$"),
    ],
)
def test_a_package_entry_is_checked_by_the_schema(write_suite, package, expected):
    key = package.split(":")[0]
    text = "\n".join(
        f"      {package}" if line.strip().startswith(f"{key}:") else line
        for line in suite_text().splitlines()
    )
    proc = regress("validate", write_suite(text))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert expected in proc.stderr


def test_a_packaged_hugging_face_encoder_is_exported_once_and_runs(tmp_path, monkeypatch):
    """`export: transformers`: a zipped Hugging Face folder (a 1-layer BERT made here with
    transformers' own classes) becomes an ONNX model of symbolic batch and sequence, which a run
    takes like any package model."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=32,
    )  # fmt: skip
    BertModel(config).save_pretrained(tmp_path / "bert")
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for file in (tmp_path / "bert").iterdir():
            zipped.write(file, file.name)
    data = archive.read_bytes()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    write_wheel(mirror, "tinybert", {"tinybert/model.zip": data})
    env = {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(mirror),
        "REGRESS_CACHE_DIR": str(tmp_path / "cache"),
    }
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "models:\n"
        "  tinybert:\n"
        "    package:\n"
        "      name: tinybert\n"
        '      version: "1.0"\n'
        "      file: tinybert/model.zip\n"
        f"      sha256: {hashlib.sha256(data).hexdigest()}\n"
        "      license: MIT\n"
        "      export: transformers\n"
        "    inputs: {input_ids: {range: [0, 50]}, attention_mask: {fill: 1}, "
        "token_type_ids: {fill: 0}}\n"
        "    shapes: [{batch: 2, sequence: 8}, {batch: 1, sequence: 16}]\n"
        "backends: [reference]\n"
    )
    out = tmp_path / "reports"
    proc = regress("run", suite, "--out", out, env=env)
    assert proc.returncode == 0, proc.stderr
    told = proc.stdout + proc.stderr
    assert "exporting tinybert/model.zip from tinybert 1.0 to ONNX (transformers)" in told
    exported = tmp_path / "cache/packages/tinybert/1.0/tinybert/model.zip.transformers.onnx"
    inputs = onnx.load(str(exported)).graph.input
    assert [(i.name, [d.dim_param for d in i.type.tensor_type.shape.dim]) for i in inputs] == [
        (name, ["batch", "sequence"]) for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    [run] = (out / "runs").iterdir()
    results = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [r["verdict"] for r in results] == ["pass"] * 4  # 2 shapes x eager, capture
    # the reference backend is onnxruntime itself: the export's own worth is its agreement
    # with the model it came from
    import numpy as np
    import onnxruntime

    ids = np.random.default_rng(0).integers(0, 50, (1, 16), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids}
    [ours] = onnxruntime.InferenceSession(str(exported)).run(None, feeds)
    with torch.no_grad():
        theirs = BertModel.from_pretrained(tmp_path / "bert", attn_implementation="eager")(
            **{key: torch.tensor(value) for key, value in feeds.items()}
        ).last_hidden_state.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def tiny_llama_gguf() -> bytes:
    """A 2-layer Llama of random weights as a GGUF file, written by gguf's own writer with the
    metadata transformers reads (a vocabulary of 64 characters, no merges)."""
    import tempfile

    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    vocab, hidden, layers, heads, kv_heads, inner = 64, 64, 2, 4, 2, 128
    kv_width = kv_heads * hidden // heads
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tiny.gguf"
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_block_count(layers)
        writer.add_context_length(64)
        writer.add_embedding_length(hidden)
        writer.add_feed_forward_length(inner)
        writer.add_head_count(heads)
        writer.add_head_count_kv(kv_heads)
        writer.add_layer_norm_rms_eps(1e-5)
        writer.add_rope_freq_base(10000.0)
        writer.add_tokenizer_model("gpt2")
        characters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        writer.add_token_list(["<s>", "</s>", *characters[: vocab - 2]])
        writer.add_token_types([3, 3] + [1] * (vocab - 2))
        writer.add_token_scores([0.0] * vocab)
        writer.add_token_merges([])
        writer.add_bos_token_id(0)
        writer.add_eos_token_id(1)
        shapes = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,)}
        for i in range(layers):
            shapes |= {
                f"blk.{i}.attn_norm.weight": (hidden,),
                f"blk.{i}.ffn_norm.weight": (hidden,),
                f"blk.{i}.attn_q.weight": (hidden, hidden),
                f"blk.{i}.attn_k.weight": (kv_width, hidden),
                f"blk.{i}.attn_v.weight": (kv_width, hidden),
                f"blk.{i}.attn_output.weight": (hidden, hidden),
                f"blk.{i}.ffn_gate.weight": (inner, hidden),
                f"blk.{i}.ffn_up.weight": (inner, hidden),
                f"blk.{i}.ffn_down.weight": (hidden, inner),
            }
        for name, shape in shapes.items():
            writer.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


def packaged_llm_suite(mirror: Path, tmp_path: Path, package: str, data: bytes, loop: str) -> Path:
    """`package` 1.0 in the mirror, its wheel holding `data` as PACKAGE/model.gguf, and a suite
    declaring that a decoder built by `export: genai-webgpu-fp32` with `generate: LOOP`, on
    wgpu."""
    write_wheel(mirror, package, {f"{package}/model.gguf": data})
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "models:\n"
        f"  {package}:\n"
        "    package:\n"
        f"      name: {package}\n"
        '      version: "1.0"\n'
        f"      file: {package}/model.gguf\n"
        f"      sha256: {hashlib.sha256(data).hexdigest()}\n"
        "      license: MIT\n"
        "      export: genai-webgpu-fp32\n"
        "    max_length: 16\n"
        f"    generate: {loop}\n"
        "backends: [wgpu]\n"
    )
    return suite


@pytest.mark.gpu
def test_a_packaged_gguf_llm_is_built_by_genai_and_decodes_under_capture(mirror, tmp_path):
    """`export: genai-webgpu-fp32`: a GGUF causal LM becomes what onnxruntime-genai's builder
    writes for WebGPU graph capture (its 4-bit embedding, MatMulNBits, GroupQueryAttention over a
    static cache, head size symbolic in the IO), which a suite declares a decoder of a given
    prompt; wgpu decodes it eager and under capture as onnxruntime CPU does."""
    loop = "{prompt: [0, 7, 11, 3, 9], steps: 3}"
    suite = packaged_llm_suite(mirror, tmp_path, "tinyllm", tiny_llama_gguf(), loop)
    assert regress("list", suite).stdout.split() == [  # the file's dims, unknown until fetched
        f"tinyllm/layout=default/wgpu/{mode}" for mode in ("eager", "capture")
    ]
    out = tmp_path / "reports"
    proc = regress("run", suite, "--out", out)
    assert proc.returncode == 0, proc.stderr
    told = proc.stdout + proc.stderr
    assert "exporting tinyllm/model.gguf from tinyllm 1.0 to ONNX (genai-webgpu-fp32)" in told
    exported = tmp_path / "cache/packages/tinyllm/1.0/tinyllm/model.gguf.genai-webgpu-fp32.onnx"
    ops = {node.op_type for node in onnx.load(str(exported)).graph.node}
    assert {"GatherBlockQuantized", "MatMulNBits", "GroupQueryAttention"} <= ops
    [run] = (out / "runs").iterdir()
    results = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    dims = "batch_size=1,sequence_length=1,total_sequence_length=16,past_sequence_length=16"
    assert [(r["case_id"], r["verdict"], r["timings"]["runs"]) for r in results] == [
        (f"tinyllm/{dims},kv_cache_dim=16/layout=default/wgpu/{mode}", "pass", 4)
        for mode in ("eager", "capture")
    ]  # the decode steps timed: 3, the last again (wgpu prefills in a session of its own)


def test_a_file_the_export_cannot_convert_stops_the_run_at_the_models_line(mirror, tmp_path):
    """A wheel whose file is no GGUF: the export's own error, at the model's line, exit 2, and
    nothing in the cache."""
    suite = packaged_llm_suite(mirror, tmp_path, "notallm", RELU, "{prompt: 2, steps: 1}")
    out = tmp_path / "reports"
    proc = regress("run", suite, "--out", out)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{suite}:2:1: model 'notallm': genai-webgpu-fp32 on notallm/model.gguf from " in (
        proc.stderr
    )
    assert "expected a file that `export: genai-webgpu-fp32` converts" in proc.stderr
    assert not (out / "runs").exists() and left_in_cache(tmp_path / "cache") == []


def test_bisect_fetches_its_cases_package_model_first(mirror, tmp_path):
    """`bisect` on a case of a package model the cache lacks: the model is fetched (and built)
    as `run` would, so the id a report shows (with the decoder's dims, known once fetched) names
    it; here wgpu then refuses, having no versions."""
    suite = packaged_llm_suite(mirror, tmp_path, "tinyllm", tiny_llama_gguf(), "{prompt: 5}")
    dims = "batch_size=1,sequence_length=1,total_sequence_length=16,past_sequence_length=16"
    case = f"tinyllm/{dims},kv_cache_dim=16/layout=default/wgpu/capture"
    proc = regress("bisect", case, suite, "--good", "1.24.3", "--bad", "1.30.0")
    assert proc.returncode == 2 and "wgpu has no versions" in proc.stderr, proc.stderr
    assert "exporting tinyllm/model.gguf from tinyllm 1.0 to ONNX" in proc.stdout + proc.stderr
    assert (
        tmp_path / "cache/packages/tinyllm/1.0/tinyllm/model.gguf.genai-webgpu-fp32.onnx"
    ).is_file()
