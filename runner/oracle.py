"""Reference outputs from onnxruntime on the CPU, cached on disk by the workload's content hash.

A rerun over the same models, shapes and inputs computes nothing: the cache key covers the model
bytes, the shape and every input's bytes (``Workload.key``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from runner.workload import Workload


class ReferenceCache:
    def __init__(self, folder: Path):
        self.folder = folder
        self.computed = 0  # references computed by this instance (the rest came from disk)
        self._memory: dict[str, dict[str, np.ndarray]] = {}

    def reference(self, workload: Workload) -> dict[str, np.ndarray]:
        if workload.key in self._memory:
            return self._memory[workload.key]
        path = self.folder / f"{workload.key}.npz"
        try:
            with np.load(path) as stored:
                outputs = {name: stored[name] for name in workload.output_names}
        except (OSError, KeyError, ValueError):
            outputs = compute_reference(workload)
            self.computed += 1
            self._store(path, outputs)
        self._memory[workload.key] = outputs
        return outputs

    def _store(self, path: Path, outputs: dict[str, np.ndarray]) -> None:
        """Write atomically, so a killed run never leaves a truncated cache entry."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **outputs)
        os.replace(tmp, path)


def compute_reference(workload: Workload) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    for dim, value in workload.shape.items():
        options.add_free_dimension_override_by_name(dim, value)
    session = ort.InferenceSession(workload.model, options, providers=["CPUExecutionProvider"])
    values = session.run(list(workload.output_names), dict(workload.inputs))
    return dict(zip(workload.output_names, values, strict=True))
