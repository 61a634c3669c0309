"""One wgpu device and the caches that outlive a case: pipelines, bind groups, captures.

Everything that creates a WebGPU object the trace counts (buffers, bind groups, uniform
writes) goes through ``Device``, so the counters are complete. The caches live as long as the
device, across sessions, so a capture recorded for one layout stays around while later layouts
run: that is what makes a stale binding observable, and what the fault switch abuses.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wgpu

from runner.backends.wgpu.kernels import Program, uses_f16
from runner.backends.wgpu.tensors import DeviceTypeError
from runner.backends.wgpu.uniforms import UNIFORM_SLOT
from runner.errors import EnvironmentUnusable

INSTALL_HINT = (
    "install a Vulkan driver: `apt-get install mesa-vulkan-drivers` (lavapipe, runs on the CPU) "
    "or your GPU vendor's driver; `vulkaninfo --summary` (package vulkan-tools) lists adapters"
)

STORAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
F16 = "shader-f16"  # the feature float16 tensors need


def _matches(info: dict[str, Any], preference: str) -> bool:
    wanted = preference.lower()
    if wanted in (info.get("backend_type", "").lower(), info.get("adapter_type", "").lower()):
        return True
    names = (info.get(k, "") for k in ("device", "vendor", "description", "architecture"))
    return any(wanted in name.lower() for name in names if name)


def _quiet_vulkan() -> None:
    """Vulkan loaders complain on stderr when XDG_RUNTIME_DIR is unset; give them one."""
    if not os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(tempfile.gettempdir()) / f"runner-xdg-{os.getuid()}"
        path.mkdir(mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(path)


def request_adapter(preference: str | None) -> wgpu.GPUAdapter:
    """The default adapter, or the first whose name, vendor or backend type matches."""
    _quiet_vulkan()
    try:
        if preference is None:
            return wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        adapters = wgpu.gpu.enumerate_adapters_sync()
    except RuntimeError as error:  # wgpu-native found no adapter at all
        reason = str(error).strip().splitlines()[-1].strip()
        raise EnvironmentUnusable(f"wgpu found no adapter ({reason}); {INSTALL_HINT}") from None
    for adapter in adapters:
        if _matches(dict(adapter.info), preference):
            return adapter
    seen = [f"{a.info['device']} ({a.info['backend_type']})" for a in adapters] or ["none"]
    raise EnvironmentUnusable(
        f"no wgpu adapter matches {preference!r}; found: {', '.join(seen)}; {INSTALL_HINT}"
    )


def adapter_environment(adapter: wgpu.GPUAdapter) -> dict[str, Any]:
    info = dict(adapter.info)
    return {
        "name": info.get("device", ""),
        "vendor": info.get("vendor", ""),
        "architecture": info.get("architecture", ""),
        "backend_type": info.get("backend_type", ""),
        "adapter_type": info.get("adapter_type", ""),
        "driver": info.get("description", ""),
        "vendor_id": info.get("vendor_id"),
        "device_id": info.get("device_id"),
    }


@dataclass
class Counters:
    """Running totals of what the trace reports; a case reads differences."""

    bind_groups_created: int = 0
    uniform_writes: int = 0
    buffers_created: int = 0

    def snapshot(self) -> tuple[int, int, int]:
        return (self.bind_groups_created, self.uniform_writes, self.buffers_created)


@dataclass(frozen=True, eq=False)
class Pipeline:
    pipeline: wgpu.GPUComputePipeline
    layout: wgpu.GPUBindGroupLayout


@dataclass(frozen=True, eq=False)
class Buffer:
    """A device buffer and its identity in traces (unique on the device)."""

    gpu: wgpu.GPUBuffer
    identity: str


@dataclass(eq=False)
class Device:
    adapter: wgpu.GPUAdapter
    device: wgpu.GPUDevice
    counters: Counters = field(default_factory=Counters)
    pipelines: dict[str, Pipeline] = field(default_factory=dict)
    bind_groups: dict[str, tuple[wgpu.GPUBindGroup, Buffer]] = field(default_factory=dict)
    captures: dict[str, Any] = field(default_factory=dict)  # capture key -> executor.Capture
    # IO shapes -> the first capture recorded for them: only the fault switch looks here
    captures_by_shape: dict[Any, Any] = field(default_factory=dict)
    sessions: dict[Any, Any] = field(default_factory=dict)  # session key -> executor.Session
    _serial: int = 0

    @classmethod
    def open(cls, preference: str | None) -> Device:
        adapter = request_adapter(preference)
        features = [F16] if F16 in adapter.features else []
        return cls(adapter, adapter.request_device_sync(required_features=features))

    def pipeline(self, program: Program) -> Pipeline:
        if program.key not in self.pipelines:
            if uses_f16(program.kernel) and F16 not in self.device.features:
                name = self.adapter.info["device"]
                raise DeviceTypeError(f"float16 needs the adapter's {F16}, which {name} lacks")
            module = self.device.create_shader_module(label=program.key, code=program.source)
            read_only = {"type": wgpu.BufferBindingType.read_only_storage}
            entries = [
                {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": read_only}
                for i in range(program.inputs)
            ]
            entries.append(
                {
                    "binding": program.inputs,
                    "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.storage},
                }
            )
            entries.append(
                {
                    "binding": UNIFORM_SLOT,
                    "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.uniform},
                }
            )
            layout = self.device.create_bind_group_layout(entries=entries)
            pipeline = self.device.create_compute_pipeline(
                label=program.key,
                layout=self.device.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": "main"},
            )
            self.pipelines[program.key] = Pipeline(pipeline, layout)
        return self.pipelines[program.key]

    def buffer(self, size: int, label: str, usage: int = STORAGE) -> Buffer:
        self.counters.buffers_created += 1
        self._serial += 1
        identity = f"{label}#{self._serial}"
        return Buffer(self.device.create_buffer(label=identity, size=size, usage=usage), identity)

    def uniform(self, data: bytes) -> Buffer:
        usage = wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
        buffer = self.buffer(len(data), "uniform", usage)
        self.device.queue.write_buffer(buffer.gpu, 0, data)
        self.counters.uniform_writes += 1
        return buffer

    def bind_group(self, pipeline: Pipeline, tensors: list[Buffer], uniform: Buffer):
        entries = [{"binding": i, "resource": {"buffer": b.gpu}} for i, b in enumerate(tensors)]
        entries.append({"binding": UNIFORM_SLOT, "resource": {"buffer": uniform.gpu}})
        self.counters.bind_groups_created += 1
        return self.device.create_bind_group(layout=pipeline.layout, entries=entries)

    def cached_bind_group(
        self, signature: str, make: Callable[[], tuple[wgpu.GPUBindGroup, Buffer]]
    ) -> tuple[wgpu.GPUBindGroup, Buffer]:
        """The bind group (and its uniform buffer) for a complete layout signature."""
        if signature not in self.bind_groups:
            self.bind_groups[signature] = make()
        return self.bind_groups[signature]


def digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]
