"""The native WebGPU backend: WGSL compute kernels run through wgpu-py (lavapipe, or a GPU).

Modules, in the order data flows:
  prepare.py   pin shapes, fold constants on the host, plan kernels (ops.py: op semantics)
  kernels/     WGSL per op family; uniforms.py: the layout-ordered uniform struct and packing
  device.py    the adapter, device, and the caches that outlive a case
  executor.py  eager and capture runs (capture: record once, replay)
  faults.py    the injectable faults (FAULTS) and what each changes
  trace.py     the binding trace
  backend.py   WgpuBackend, the runner.backends.base.Backend for "wgpu"; registered as
               IsolatedWgpuBackend (below), which runs it in a child process
  diagnose.py  what `doctor` says about adapters
"""

from runner.backends.base import BackendOptions
from runner.backends.isolated import IsolatedBackend
from runner.backends.wgpu.faults import FAULTS


class IsolatedWgpuBackend(IsolatedBackend):
    """WgpuBackend in a child process: a wgpu-native panic aborts the child, not the run.

    Only the child imports wgpu: loading its native library takes the parent 0.2-0.5 s.
    """

    name = "wgpu"
    FAULTS = FAULTS

    def __init__(self, options: BackendOptions):
        super().__init__("runner.backends.wgpu.backend:WgpuBackend", options)


def diagnose():
    """``doctor``'s checks (diagnose.py), importing wgpu only when asked."""
    from runner.backends.wgpu.diagnose import diagnose as check_adapters

    return check_adapters()


__all__ = ["IsolatedWgpuBackend", "diagnose"]
