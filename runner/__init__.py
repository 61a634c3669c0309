"""Declarative regression suite for WebGPU graph-capture bugs in ONNX Runtime.

The pipeline flows one way, one package or module per step:
``suite`` (load and validate) -> ``matrix`` (expand) -> ``workload`` + ``backends`` (run)
-> ``judge`` (verdicts) -> ``history`` (store) -> ``report`` (build reports).
"""

__version__ = "0.1.0"
