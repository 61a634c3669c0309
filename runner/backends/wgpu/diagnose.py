"""Checks for ``doctor``: which adapters wgpu sees here, and how to get one if it sees none."""

from __future__ import annotations

import wgpu

from runner.backends.base import Diagnosis
from runner.backends.wgpu.device import INSTALL_HINT, adapter_environment, request_adapter
from runner.errors import EnvironmentUnusable


def diagnose() -> list[Diagnosis]:
    """The default adapter and every adapter enumerated."""
    try:
        default = adapter_environment(request_adapter(None))
    except EnvironmentUnusable as missing:
        return [Diagnosis("default adapter", False, str(missing), INSTALL_HINT)]
    checks = [Diagnosis("default adapter", True, _describe(default))]
    for adapter in wgpu.gpu.enumerate_adapters_sync():
        checks.append(Diagnosis("adapter", True, _describe(adapter_environment(adapter))))
    return checks


def _describe(info: dict) -> str:
    return (
        f"{info['name']} ({info['backend_type']}, {info['adapter_type']}; vendor "
        f"{info['vendor'] or '?'}, architecture {info['architecture'] or '?'})"
    )
