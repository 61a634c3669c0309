"""Which results a repro bundle can be made for, the command that makes it (the report
shows it under each failure, as it shows ``new-case``) and its options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.backends import REGISTRY
from runner.backends.base import BackendDescriptor
from runner.history import CaseResult


@dataclass(frozen=True)
class ReproOptions:
    """``python -m runner repro``'s flags."""

    out: Path | None = None  # the bundle folder; None: repro-<result id>
    full_model: bool = False  # skip the cut
    with_fault: bool = False  # carry the result's injected faults, labelled as injected
    local: bool = False  # copy the backend's runtime in (offline)
    force: bool = False  # bundle a passing result; write over a non-empty folder
    chromium: str | None = None
    adapter: str | None = None


# Verdicts that leave nothing to reproduce.
NOTHING_TO_REPRODUCE = frozenset({"pass", "skipped"})


def backend_name(result: CaseResult) -> str:
    """The backend of a result's backend id (``ort-web@1.29.0:webgpu`` -> ``ort-web``)."""
    return result.backend.partition("@")[0].partition(":")[0]


def repro_descriptor(result: CaseResult) -> BackendDescriptor | None:
    """The result's backend, if it writes repro bundles."""
    descriptor = REGISTRY.get(backend_name(result))
    return descriptor if descriptor is not None and descriptor.repro else None


def repro_command(result: CaseResult) -> str | None:
    """``python -m runner repro ID`` for a failing result of a backend that writes bundles
    (``--with-fault`` where the failure came from an injected fault); None otherwise."""
    if result.verdict in NOTHING_TO_REPRODUCE or repro_descriptor(result) is None:
        return None
    flag = " --with-fault" if result.injected else ""
    return f"python -m runner repro {result.result_id}{flag}"
