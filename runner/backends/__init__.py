"""Backend registry: the one place that lists the backends, by their descriptors.

Each backend package declares a ``DESCRIPTOR`` (``runner.backends.base.BackendDescriptor``)
holding every fact about it; the suite loader, ``--backend``, fault checks, ``doctor`` and
op-test skips read them here. Implementations are imported only when a backend opens, so a
machine without a browser can run ``wgpu`` and vice versa.
"""

from __future__ import annotations

from collections.abc import Iterable

from runner.backends import ortgenai, ortnative, ortweb, reference, wgpu
from runner.backends.base import Backend, BackendDescriptor, BackendOptions, BackendTarget, resolve
from runner.backends.isolated import IsolatedBackend
from runner.errors import InvalidInput

REGISTRY: dict[str, BackendDescriptor] = {
    descriptor.name: descriptor
    for descriptor in (
        reference.DESCRIPTOR,
        wgpu.DESCRIPTOR,
        ortweb.DESCRIPTOR,
        ortnative.DESCRIPTOR,
        ortgenai.DESCRIPTOR,
    )
}


def backend_ids() -> list[str]:
    """What ``--backend`` accepts: every name, and every ``name:build``."""
    return [
        text
        for descriptor in REGISTRY.values()
        for text in (descriptor.name, *(f"{descriptor.name}:{b}" for b in descriptor.builds))
    ]


def parse_backend(text: str) -> tuple[BackendTarget, ...]:
    """The targets ``--backend NAME[:BUILD]`` names; InvalidInput saying what exists."""
    name = text.partition(":")[0]
    if name not in REGISTRY:
        raise InvalidInput(
            f"--backend {text!r} is unknown; expected one of {', '.join(backend_ids())}"
        )
    return REGISTRY[name].parse(text)


def resolve_targets(targets: Iterable[BackendTarget]) -> dict[BackendTarget, BackendTarget]:
    """Each target with its exact version: the one place a registry is asked, for the targets
    of the cases about to run or be listed. Raises InvalidInput for a version that names
    nothing, EnvironmentUnusable when the registry cannot be asked."""
    return {target: REGISTRY[target.name].resolved(target) for target in dict.fromkeys(targets)}


def open_backend(name: str, options: BackendOptions) -> Backend:
    """Create the named backend; raises EnvironmentUnusable if this machine cannot run it."""
    descriptor = REGISTRY[name]
    if descriptor.isolated:
        return IsolatedBackend(descriptor.name, descriptor.factory, options)
    return resolve(descriptor.factory)(options)


__all__ = [
    "REGISTRY",
    "backend_ids",
    "open_backend",
    "parse_backend",
    "resolve_targets",
]
