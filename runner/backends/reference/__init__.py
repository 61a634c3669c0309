"""reference backend: onnxruntime on the CPU, the oracle's own path (see backend.py)."""

from runner.backends.base import BackendDescriptor

DESCRIPTOR = BackendDescriptor(
    name="reference",
    summary="onnxruntime on the CPU, the oracle's own path; a pipeline check that must pass",
    factory="runner.backends.reference.backend:ReferenceBackend",
    diagnose="runner.backends.reference.backend:diagnose",
    prepare="runner.backends.reference.backend:prepare_run",
    runtime="onnxruntime",
)
