"""``doctor``: what this machine offers each backend, and how to fix what it lacks."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from runner.backends import BACKENDS
from runner.environment import package_version


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _python_packages() -> list[Check]:
    checks = []
    for name in ("onnxruntime", "onnx", "numpy", "pandas", "jsonschema", "wgpu", "playwright"):
        version = package_version(name)
        checks.append(
            Check(
                f"python package {name}",
                version is not None,
                version or "absent",
                "pip install -e . (or nox -s regress)",
            )
        )
    return checks


def _backend_checks() -> list[Check]:
    """Each backend module that offers `diagnose()` reports its own needs.

    `diagnose()` returns a list of `runner.backends.base.Diagnosis`.
    """
    checks = []
    for name, target in BACKENDS.items():
        module_name, _, factory_name = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # a backend that cannot even import is what doctor reports
            checks.append(
                Check(f"backend {name}", False, f"cannot import: {exc}", "pip install -e .")
            )
            continue
        diagnose = getattr(module, "diagnose", None)
        if diagnose is not None:
            checks += [Check(f"{name}: {c.check}", c.ok, c.detail, c.fix) for c in diagnose()]
        factory = getattr(module, factory_name, None)
        faults = getattr(factory, "FAULTS", {})
        if faults:
            checks.append(
                Check(
                    f"{name}: injectable faults (--inject)",
                    True,
                    "; ".join(f"{k}: {v}" for k, v in faults.items()),
                )
            )
    return checks


def diagnose() -> list[Check]:
    return _python_packages() + _backend_checks()
