"""Checks for ``doctor``: can this machine run the ort-web backend, and if not, how to fix it."""

from __future__ import annotations

from importlib import metadata

from runner.backends.base import BackendOptions, Diagnosis
from runner.backends.ortweb import browser
from runner.backends.ortweb.package import NPM_HINT, package_for, pinned_version
from runner.errors import EnvironmentUnusable


def diagnose(chromium: str | None = None) -> list[Diagnosis]:
    """Chromium, Playwright, onnxruntime-web, then (if all three are there) a WebGPU adapter."""
    checks = [_chromium(chromium), _playwright(), _ort_web()]
    if all(check.ok for check in checks):
        checks.append(_adapter(chromium))
    return checks


def _chromium(override: str | None) -> Diagnosis:
    try:
        executable = browser.find_chromium(override)
    except EnvironmentUnusable as missing:
        return Diagnosis("chromium", False, str(missing), browser.INSTALL_HINT)
    version = browser.chromium_version(executable.path) or "version unknown"
    return Diagnosis("chromium", True, f"{version} at {executable.path} ({executable.found_by})")


def _playwright() -> Diagnosis:
    try:
        return Diagnosis("playwright", True, f"playwright {metadata.version('playwright')}")
    except metadata.PackageNotFoundError:
        return Diagnosis(
            "playwright", False, "the Python package is missing", "pip install playwright"
        )


def _ort_web() -> Diagnosis:
    """The pinned version, installed into the cache now if it is not there yet."""
    try:
        package = package_for(pinned_version())
    except EnvironmentUnusable as missing:
        return Diagnosis("onnxruntime-web", False, str(missing), NPM_HINT)
    builds = ", ".join(name for name, lacks in package.builds().items() if not lacks)
    return Diagnosis("onnxruntime-web", True, f"{package.version} ({builds}) in {package.root}")


def _adapter(chromium: str | None) -> Diagnosis:
    from runner.backends.ortweb.backend import OrtWebBackend

    backend = OrtWebBackend(BackendOptions(chromium=chromium))
    try:
        adapter = backend.environment()["adapter"]
    except EnvironmentUnusable as unusable:
        fix = "see the detail; try another Chromium with --chromium or $REGRESS_CHROMIUM"
        return Diagnosis("webgpu adapter", False, str(unusable), fix)
    finally:
        backend.close()
    f16 = "with" if "shader-f16" in adapter["features"] else "without"
    described = ", ".join(
        f"{key} {adapter[key]}" for key in ("vendor", "architecture", "device") if adapter[key]
    )
    return Diagnosis("webgpu adapter", True, f"{described}; {f16} shader-f16")
