"""What onnxruntime-webgpu (the WebGPU EP built into onnxruntime) needs beside the plugin's path:
device values its Python API will not make, and the adapter its Dawn loaded, read from the
process itself (onnxruntime logs no adapter).

Runs in the child process of an ort-native version (``ep``), where ``onnxruntime`` is that
version's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import helper

WEBGPU_EP = "WebGpuExecutionProvider"
# The Vulkan drivers a process may load, by their library's name, as Vulkan's loader found them
_DRIVERS = {
    "libvulkan_lvp": "lavapipe (Mesa's Vulkan on the CPU)",
    "libGLX_nvidia": "NVIDIA's Vulkan driver",
    "libvulkan_radeon": "Mesa's RADV (AMD)",
    "libvulkan_intel": "Mesa's ANV (Intel)",
    "amdvlk": "AMDVLK",
}


def one_node(op: str, dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """A model of one `op` node from input ``x`` to output ``y`` of `dtype` and `shape`."""
    kind = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])],
        op.lower(),
        [helper.make_tensor_value_info("x", kind, list(shape))],
        [helper.make_tensor_value_info("y", kind, list(shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 9)
    return model.SerializeToString()


class DeviceValues:
    """WebGPU OrtValues, each the output of a one-node Identity session whose IOBinding binds it
    to the device: onnxruntime-webgpu's ``create_ortvalue_from_shape_and_type(..., "webgpu")``
    cannot allocate there ("Can't allocate memory on the CUDA device"). A value lives while its
    session does; the bindings go first at ``close`` (a binding of a WebGPU output that outlives
    its session ends the process with a segmentation fault at exit)."""

    def __init__(self):
        self._sessions: dict[tuple, Any] = {}  # (shape, dtype) -> its upload session
        self._bindings: list[Any] = []

    def value(self, shape, dtype) -> Any:
        """A new device value of `shape` and `dtype`, holding zeros."""
        key = (tuple(shape), np.dtype(dtype).str)
        if key not in self._sessions:
            model = one_node("Identity", dtype, tuple(shape))
            self._sessions[key] = ort.InferenceSession(model, providers=[WEBGPU_EP])
        io = self._sessions[key].io_binding()
        io.bind_cpu_input("x", np.zeros(shape, dtype))
        io.bind_output("y", "webgpu", 0)
        self._sessions[key].run_with_iobinding(io)
        self._bindings.append(io)
        return io.get_outputs()[0]

    def close(self) -> None:
        self._bindings.clear()
        self._sessions.clear()


def vulkan_driver(maps: Path = Path("/proc/self/maps")) -> str:
    """The Vulkan driver this process loaded, in words with its library's path (the ICD the
    loader took), or what was found instead."""
    libraries = dict.fromkeys(
        line.split()[-1]
        for line in maps.read_text().splitlines()
        if line.count(" ") >= 5 and line.split()[-1].startswith("/")
    )
    for path in libraries:
        for name, words in _DRIVERS.items():
            if re.search(rf"/{re.escape(name)}[^/]*\.so", path):
                return f"{words}: {path}"
    return "no Vulkan driver loaded (onnxruntime ran on another graphics API)"
