"""The native WebGPU backend: WGSL compute kernels run through wgpu-py (lavapipe, or a GPU).

Modules, in the order data flows:
  prepare.py   pin shapes, fold constants on the host, plan kernels (ops.py: op semantics)
  kernels/     WGSL per op family; uniforms.py: the layout-ordered uniform struct and packing
  device.py    the adapter, device, and the caches that outlive a case
  executor.py  eager and capture runs (capture: record once, replay)
  faults.py    the injectable faults (FAULTS) and what each changes
  trace.py     the binding trace
  backend.py   WgpuBackend, the runner.backends.base.Backend for "wgpu", run in a child process
               (runner.backends.isolated): wgpu-native aborts its process on a Rust panic, and
               loading its native library would cost the parent 0.2-0.5 s
  diagnose.py  what `doctor` says about adapters

Only the child process imports wgpu; this module (the descriptor) imports none of the above but
faults.py, which is plain data and WGSL text.
"""

from runner.backends.base import BackendDescriptor
from runner.backends.wgpu.faults import FAULTS
from runner.environment import package_version
from runner.scenario.values import ACTIONS


def prepare_run(targets, say) -> dict[str, str | None]:
    """Nothing to install (wgpu is a Python dependency): the version, without importing it."""
    return {"wgpu": package_version("wgpu")}


DESCRIPTOR = BackendDescriptor(
    name="wgpu",
    summary="the model as WGSL compute kernels through the wgpu package (native WebGPU)",
    factory="runner.backends.wgpu.backend:WgpuBackend",
    diagnose="runner.backends.wgpu.diagnose:diagnose",
    prepare="runner.backends.wgpu:prepare_run",
    # WGSL has f32, f16 (shader-f16) and i32: integers and bool live on the device as i32
    # (tensors.py)
    element_types=frozenset(
        {"float32", "float16", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16"}
    ),
    runtime="wgpu-native",
    faults=FAULTS,
    isolated=True,
    scenario_actions=ACTIONS,  # every step: the scenario runner every other is compared with
    repro="runner.backends.wgpu.repro:write_runner",
)
