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
