"""Checks for ``doctor``: the pinned version's environment (installed now if it is not there
yet, as a run would), and whether its EP finds a GPU. No GPU only skips ort-native's cases."""

from __future__ import annotations

from runner.backends.base import BackendOptions, Diagnosis
from runner.backends.ortnative.backend import open_version
from runner.backends.ortnative.environments import install
from runner.backends.ortnative.versions import NativeVersion
from runner.errors import EnvironmentUnusable

PIP_HINT = "pip installs versions from PyPI (or PIP_FIND_LINKS) into the cache folder"
GPU_HINT = "run on a machine with a GPU and its Vulkan (Linux), Metal or D3D12 driver"


def diagnose() -> list[Diagnosis]:
    version = NativeVersion.parse(None)
    try:
        site = install(version)
    except EnvironmentUnusable as missing:
        return [Diagnosis("environment", False, str(missing), PIP_HINT)]
    checks = [Diagnosis("environment", True, f"{version.exact} (pinned) in {site.parent}")]
    try:
        child, environment = open_version(version, BackendOptions())
    except EnvironmentUnusable as unusable:
        detail = f"{unusable}; ort-native cases are skipped"
        return [*checks, Diagnosis("WebGPU EP device", False, detail, GPU_HINT, skips=True)]
    child.close()
    return [*checks, Diagnosis("WebGPU EP device", True, environment["device"])]
