"""Backend registry: the one place that maps a backend name to its module.

Modules are imported only when their backend is used, so a machine without a browser can run
``wgpu`` and vice versa.
"""

from __future__ import annotations

import importlib

from runner.backends.base import Backend, BackendOptions

# name -> "module:factory"; the factory takes BackendOptions and returns a Backend.
BACKENDS: dict[str, str] = {
    "reference": "runner.backends.reference:ReferenceBackend",
    "wgpu": "runner.backends.wgpu:IsolatedWgpuBackend",
    "ort-web": "runner.backends.ortweb:OrtWebBackend",
}


def open_backend(name: str, options: BackendOptions) -> Backend:
    """Create the named backend; raises EnvironmentUnusable if this machine cannot run it."""
    module_name, _, factory = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module_name), factory)(options)
