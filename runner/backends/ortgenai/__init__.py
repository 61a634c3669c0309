"""ort-genai backend: onnxruntime-genai's own generator loop (``og.Generator``) over a decoder
case's model, on ONNX Runtime's WebGPU EP plugin (onnxruntime-ep-webgpu), eager and with genai's
graph capture: the application path the other backends' loops imitate.

Modules:
  backend.py    GenaiBackend: which cases it takes, the plugin's environment (ort-native's), a
                child process (runner.backends.isolated) that runs them
  generator.py  GenaiSteps, in the child: genai_config.json, the model, the loop, step by step

This module is the descriptor: plain data, importing neither onnxruntime nor onnxruntime-genai.
"""

from runner.backends.base import BackendDescriptor

DESCRIPTOR = BackendDescriptor(
    name="ort-genai",
    summary="onnxruntime-genai's generator loop on onnxruntime's WebGPU EP plugin (decoders only)",
    factory="runner.backends.ortgenai.backend:GenaiBackend",
    diagnose="runner.backends.ortgenai.backend:diagnose",
    prepare="runner.backends.ortgenai.backend:prepare_run",
    runtime="onnxruntime",
)
