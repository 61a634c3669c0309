"""Reference outputs from onnxruntime on the CPU, cached on disk by the workload's content hash.

A rerun over the same models, shapes and inputs computes nothing: the cache key covers the model
bytes, the shape and every input's bytes (``Workload.key``), and the oracle itself (onnxruntime's
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
from runner.workload import Workload

PROVIDER = "CPUExecutionProvider"


@functools.cache
def onnxruntime_version() -> str:
    import onnxruntime as ort  # not on the import path of `list` and `validate`

    return ort.__version__


def cache_key(workload: Workload) -> str:
    """The workload's content hash, with the onnxruntime version and provider that answer it."""
    oracle = f"onnxruntime {onnxruntime_version()} {PROVIDER}"
    return hashlib.sha256(f"{workload.key}/{oracle}".encode()).hexdigest()


class ReferenceCache:
    def __init__(self, folder: Path):
        self.folder = folder
        self.computed = 0  # references computed by this instance (the rest came from disk)
        self._memory: dict[str, dict[str, np.ndarray]] = {}

    def reference(self, workload: Workload) -> dict[str, np.ndarray]:
        key = cache_key(workload)
        if key in self._memory:
            return self._memory[key]
        path = self.folder / f"{key}.npz"
        try:
            with np.load(path) as stored:
                outputs = {name: stored[name] for name in workload.output_names}
        except (OSError, KeyError, ValueError):
            outputs = compute_reference(workload)
            self.computed += 1
            self._store(path, outputs)
        self._memory[key] = outputs
        return outputs

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


def compute_reference(workload: Workload) -> dict[str, np.ndarray]:
    session = cpu_session(workload.model, workload.shape)
    values = session.run(list(workload.output_names), dict(workload.inputs))
    return dict(zip(workload.output_names, values, strict=True))
