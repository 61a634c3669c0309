"""Checks for ``doctor``: can this machine run the ort-web backend, and if not, how to fix it."""

from __future__ import annotations

from importlib import metadata
from typing import NamedTuple

from runner.backends.base import BackendOptions
from runner.backends.ortweb import browser
from runner.backends.ortweb.package import NPM_HINT, find_ort_web
from runner.errors import EnvironmentUnusable


class Check(NamedTuple):
    check: str
    ok: bool
    detail: str  # what was found, or what is wrong
    fix: str = ""  # how to fix it, where it is not ok


def diagnose(chromium: str | None = None) -> list[Check]:
    """Chromium, Playwright, onnxruntime-web, then (if all three are there) a WebGPU adapter."""
    checks = [_chromium(chromium), _playwright(), _ort_web()]
    if all(check.ok for check in checks):
        checks.append(_adapter(chromium))
    return checks


def _chromium(override: str | None) -> Check:
    try:
        executable = browser.find_chromium(override)
    except EnvironmentUnusable as missing:
        return Check("chromium", False, str(missing), browser.INSTALL_HINT)
    version = browser.chromium_version(executable.path) or "version unknown"
    return Check("chromium", True, f"{version} at {executable.path} ({executable.found_by})")


def _playwright() -> Check:
    try:
        return Check("playwright", True, f"playwright {metadata.version('playwright')}")
    except metadata.PackageNotFoundError:
        return Check("playwright", False, "the Python package is missing", "pip install playwright")


def _ort_web() -> Check:
    try:
        package = find_ort_web()
    except EnvironmentUnusable as missing:
        return Check("onnxruntime-web", False, str(missing), NPM_HINT)
    if package.version != package.pinned:
        detail = f"{package.version} installed, package.json pins {package.pinned}"
        return Check("onnxruntime-web", False, detail, NPM_HINT)
    return Check("onnxruntime-web", True, f"{package.version} in {package.root}")


def _adapter(chromium: str | None) -> Check:
    from runner.backends.ortweb.backend import OrtWebBackend

    backend = OrtWebBackend(BackendOptions(chromium=chromium))
    try:
        adapter = backend.environment()["adapter"]
    except EnvironmentUnusable as unusable:
        fix = "see the detail; try another Chromium with --chromium or $REGRESS_CHROMIUM"
        return Check("webgpu adapter", False, str(unusable), fix)
    finally:
        backend.close()
    f16 = "with" if "shader-f16" in adapter["features"] else "without"
    described = ", ".join(
        f"{key} {adapter[key]}" for key in ("vendor", "architecture", "device") if adapter[key]
    )
    return Check("webgpu adapter", True, f"{described}; {f16} shader-f16")
