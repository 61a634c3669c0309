"""``doctor``: what this machine offers each backend, and how to fix what it lacks."""

from __future__ import annotations

import dataclasses

from runner.backends import REGISTRY
from runner.backends.base import BackendDescriptor, Diagnosis
from runner.environment import package_version

PYTHON_PACKAGES = ("onnxruntime", "onnx", "numpy", "pandas", "jsonschema", "wgpu", "playwright")


def _python_packages() -> list[Diagnosis]:
    return [
        Diagnosis(
            f"python package {name}",
            version is not None,
            version or "absent",
            "pip install -e . (or nox -s regress)",
        )
        for name in PYTHON_PACKAGES
        for version in [package_version(name)]
    ]


def _backend_checks(descriptor: BackendDescriptor) -> list[Diagnosis]:
    """The backend's own checks, each named after it, then its injectable faults."""
    try:
        checks = descriptor.checks()
    except Exception as exc:  # a backend that cannot even import is what doctor reports
        checks = [Diagnosis("import", False, f"cannot import: {exc}", "pip install -e .")]
    checks = [dataclasses.replace(c, check=f"{descriptor.name}: {c.check}") for c in checks]
    if descriptor.faults:
        faults = "; ".join(f"{k}: {v}" for k, v in descriptor.faults.items())
        checks.append(Diagnosis(f"{descriptor.name}: injectable faults (--inject)", True, faults))
    return checks


def diagnose() -> list[Diagnosis]:
    return _python_packages() + [
        check for descriptor in REGISTRY.values() for check in _backend_checks(descriptor)
    ]
