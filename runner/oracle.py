"""Reference outputs from onnxruntime on the CPU, cached on disk by the workload's content hash.

One reference per input variant a case's runs use (its input sequence), each cached apart, those
missing computed in one CPU session. A rerun over the same models, shapes and inputs computes
nothing, whatever its number of runs: the cache key covers the model bytes, the shape and the
variant's input bytes (``runner.workload.variant_key``), and the oracle itself (onnxruntime's
version and provider), so upgrading onnxruntime recomputes every reference instead of judging
against the old version's outputs.
"""

from __future__ import annotations

import functools
import hashlib
import io
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from runner.files import write_atomic
from runner.schedule import BASE, Variant
from runner.workload import Workload, variant_key

References = dict[Variant, dict[str, np.ndarray]]  # per input variant, the outputs by name
PROVIDER = "CPUExecutionProvider"
# How far ``conditioning`` moves each floating-point input, in units in the last place of its
# type: the rounding a GPU's other order of operations, fused multiply-adds and approximate
# functions may cost along a graph. float32, measured on onnxruntime-web's webgpu build: a
# LayerNormalization over rows of 2 close values came back 1.77e-4 off (1.29.0) and, after a Sub,
# 2.17e-4 (1.30.0), where 16 ulps of input moved them by a quarter of that; 64 ulps cover both
# (a variance computed as E[x^2] - E[x]^2 loses more where the row's values nearly agree), and
# move a well-conditioned one by 1e-5, so a real 1e-3 error still fails. float16 rounds at every
# op on both sides: 4 ulps, the relative step of its tolerance (``runner.measure.FLOAT16``).
CONDITIONING_ULPS = {np.dtype(np.float16): 4}
DEFAULT_CONDITIONING_ULPS = 64
# perturbations, the largest move counts: signs alternating along the flat input (neighbours
# moved apart, as in a row of two), then random signs
CONDITIONING_DRAWS = 3


@functools.cache
def onnxruntime_version() -> str:
    import onnxruntime as ort  # not on the import path of `list` and `validate`

    return ort.__version__


def cache_key(workload: Workload, variant: Variant) -> str:
    """A variant's content hash, with the onnxruntime version and provider that answer it."""
    oracle = f"onnxruntime {onnxruntime_version()} {PROVIDER}"
    return hashlib.sha256(f"{variant_key(workload, variant)}/{oracle}".encode()).hexdigest()


class ReferenceCache:
    """References kept in memory and, given a folder, on disk for the next run."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.computed = 0  # references (one per variant) computed here; the rest came from disk
        self._memory: dict[str, dict[str, np.ndarray]] = {}  # variant key -> outputs

    def references(self, workload: Workload) -> References:
        """Every variant's outputs; raises what onnxruntime raises if it cannot run the model."""
        keys = {variant: cache_key(workload, variant) for variant in workload.all_variants()}
        missing = [variant for variant, key in keys.items() if not self._load(key, workload)]
        sessions = CpuSessions(workload)
        for variant in missing:
            outputs = _outputs(
                sessions.of(variant), workload.output_names, workload.inputs_of(variant)
            )
            self.computed += 1
            if self.folder is not None:
                self._store(self.folder / f"{keys[variant]}.npz", outputs)
            self._memory[keys[variant]] = outputs
        return {variant: self._memory[key] for variant, key in keys.items()}

    def _load(self, key: str, workload: Workload) -> bool:
        if key not in self._memory:
            if self.folder is None:
                return False
            try:
                with np.load(self.folder / f"{key}.npz") as stored:
                    self._memory[key] = {name: stored[name] for name in workload.output_names}
            except (OSError, KeyError, ValueError):
                return False
        return True

    @staticmethod
    def _store(path: Path, outputs: dict[str, np.ndarray]) -> None:
        """Written whole, so a killed run never leaves a truncated cache entry."""
        data = io.BytesIO()
        np.savez(data, **outputs)
        write_atomic(path, data.getvalue())


def cpu_session(model: bytes, free_dims: Mapping[str, int] | None = None):
    """An onnxruntime CPU session for `model`, its symbolic dims pinned to `free_dims`."""
    import onnxruntime as ort  # not on the import path of `list` and `validate`

    options = ort.SessionOptions()
    options.log_severity_level = 3
    for dim, value in (free_dims or {}).items():
        options.add_free_dimension_override_by_name(dim, value)
    return ort.InferenceSession(model, options, providers=[PROVIDER])


class CpuSessions:
    """A CPU session per shape `workload`'s variants are pinned to (a decoder's prefill has its
    own; `dynamic`: one, pinning nothing), each made on first use."""

    def __init__(self, workload: Workload, dynamic: bool = False):
        self.workload, self.dynamic = workload, dynamic
        self._sessions: dict[tuple, object] = {}

    def of(self, variant: Variant):
        shape = None if self.dynamic else self.workload.shape_of(variant)
        key = tuple(sorted((shape or {}).items()))
        if key not in self._sessions:
            self._sessions[key] = cpu_session(self.workload.model, shape)
        return self._sessions[key]


def compute_reference(workload: Workload, variant: Variant = BASE) -> dict[str, np.ndarray]:
    """One variant's outputs."""
    session = CpuSessions(workload).of(variant)
    return _outputs(session, workload.output_names, workload.inputs_of(variant))


def _outputs(session, names, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return dict(zip(names, session.run(list(names), dict(inputs)), strict=True))


def conditioning(workload: Workload, variant: Variant = BASE) -> dict[str, np.ndarray]:
    """Per output, how far each element moves when every floating-point input is moved by
    ``CONDITIONING_ULPS`` units in its last place: the error rounding alone explains there.
    Small where a computation is well conditioned, large where it amplifies rounding (a
    normalization over a near-constant row, a sum of cancelling terms), whatever its ops: the
    judge allows it against onnxruntime CPU (``runner.compare``). Integer inputs stay as
    they are."""
    session = CpuSessions(workload).of(variant)
    inputs = workload.inputs_of(variant)
    names = workload.output_names
    base = _outputs(session, names, inputs)
    slack = {name: np.zeros(np.shape(value)) for name, value in base.items()}
    rng = np.random.default_rng(0)
    for draw in range(CONDITIONING_DRAWS):
        moved = {name: _perturbed(v, rng, alternating=draw == 0) for name, v in inputs.items()}
        for name, value in _outputs(session, names, moved).items():
            reference = base[name]
            if np.asarray(reference).dtype.kind != "f" or np.shape(value) != np.shape(reference):
                continue
            with np.errstate(invalid="ignore"):
                delta = np.abs(value.astype(np.float64) - reference.astype(np.float64))
            slack[name] = np.fmax(slack[name], np.nan_to_num(delta, nan=0.0))
    return slack


def _perturbed(value: np.ndarray, rng: np.random.Generator, alternating: bool) -> np.ndarray:
    value = np.asarray(value)
    if value.dtype.kind != "f":
        return value
    ulp = np.spacing(np.abs(value).astype(value.dtype))
    if alternating:
        signs = np.where(np.arange(value.size) % 2, -1, 1).astype(value.dtype).reshape(value.shape)
    else:
        signs = rng.choice(np.array([-1, 1], dtype=value.dtype), size=value.shape)
    ulps = CONDITIONING_ULPS.get(value.dtype, DEFAULT_CONDITIONING_ULPS)
    return (value + signs * ulp * ulps).astype(value.dtype)
