"""Checks for ``doctor``: each kind of build's pinned version (installed now if it is not there
yet, as a run would), and the adapter it runs on: onnxruntime-webgpu on lavapipe, the plugin on
a GPU ONNX Runtime finds. A build that cannot run here only skips its cases."""

from __future__ import annotations

from collections.abc import Callable

from runner.backends.base import BackendOptions, Diagnosis
from runner.backends.ortnative import lavapipe
from runner.backends.ortnative.backend import open_version
from runner.backends.ortnative.environments import install
from runner.backends.ortnative.versions import PINNED_WEBGPU, NativeVersion, gpu_found
from runner.errors import EnvironmentUnusable

PIP_HINT = "pip installs versions from PyPI (or PIP_FIND_LINKS) into the cache folder"
GPU_HINT = "run on a machine with a GPU and its Vulkan (Linux), Metal or D3D12 driver"
LAVAPIPE_HINT = f"apt-get (Debian 12) fetches it into the cache folder, or set ${lavapipe.ICD_ENV}"


def diagnose() -> list[Diagnosis]:
    pinned = NativeVersion.pinned().exact
    checks = [
        Diagnosis(
            "pinned",
            True,
            f"{pinned} ({'ONNX Runtime finds a GPU' if gpu_found() else 'no GPU found'})",
        )
    ]
    webgpu = NativeVersion(PINNED_WEBGPU)
    checks += _build(webgpu, "onnxruntime-webgpu on lavapipe", LAVAPIPE_HINT, lavapipe.install)
    checks += _build(NativeVersion.plugin(), "the plugin on a GPU", GPU_HINT)
    return checks


def _build(
    version: NativeVersion, what: str, hint: str, prepare: Callable | None = None
) -> list[Diagnosis]:
    """Whether `version` installs and finds its adapter here."""
    try:
        site = install(version)
        if prepare is not None:
            prepare(lambda _: None)
    except EnvironmentUnusable as missing:
        return [Diagnosis(what, False, str(missing), PIP_HINT, skips=True)]
    try:
        child, environment = open_version(version, BackendOptions())
    except EnvironmentUnusable as unusable:
        detail = f"{version.exact} in {site.parent}: {unusable}; its cases are skipped"
        return [Diagnosis(what, False, detail, hint, skips=True)]
    child.close()
    return [Diagnosis(what, True, f"{version.exact}: {environment['device']}")]
