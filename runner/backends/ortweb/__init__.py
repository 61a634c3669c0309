"""ort-web backend: onnxruntime-web's WebGPU builds in headless Chromium (see backend.py)."""

from runner.backends.ortweb.backend import OrtWebBackend
from runner.backends.ortweb.diagnose import diagnose

__all__ = ["OrtWebBackend", "diagnose"]
