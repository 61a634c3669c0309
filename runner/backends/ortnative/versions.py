"""Which onnxruntime and onnxruntime-ep-webgpu a version of ``ort-native`` names.

The WebGPU EP ships apart from onnxruntime, as the plugin package onnxruntime-ep-webgpu, so a
version is a pair, written ``ORT+epEP`` (``1.32.0+ep0.4.0``). A suite may name the pair, the
onnxruntime version alone (``1.31.1``: with the pinned plugin), the plugin alone (``ep0.3.0``:
with the pinned onnxruntime), or ``pinned``. Resolving reads no registry: whether a version
exists is learnt when it is installed (``environments``). ``bisect`` walks one component at a
time, the one that differs between its ends, over the versions PyPI lists.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from runner.backends.base import ResolvedVersion, VersionProblem
from runner.errors import EnvironmentUnusable, InvalidInput

ORT_PACKAGE = "onnxruntime"
EP_PACKAGE = "onnxruntime-ep-webgpu"
# The pair the backend runs unless told otherwise: an onnxruntime whose Python API reaches WebGPU
# graph capture (microsoft/onnxruntime#32074; 1.31.1 has it too), with the newest plugin.
PINNED_ORT = "1.32.0"
PINNED_EP = "0.4.0"

_NUMBER = r"\d+(?:\.\d+)*(?:[.-]?(?:a|b|rc|dev|post)\d*)*"
_PAIR = re.compile(rf"^(?:(?P<ort>{_NUMBER})(?:\+ep(?P<ep>{_NUMBER}))?|ep(?P<ep_only>{_NUMBER}))$")
SYNTAX = (
    "pinned, an onnxruntime version (1.31.1), a plugin version (ep0.3.0) or both (1.31.1+ep0.3.0)"
)


@dataclass(frozen=True)
class NativeVersion:
    """An exact pair: the onnxruntime and the onnxruntime-ep-webgpu that run together."""

    ort: str
    ep: str

    @property
    def exact(self) -> str:
        return f"{self.ort}+ep{self.ep}"

    @classmethod
    def parse(cls, text: str | None) -> NativeVersion:
        """The pair `text` names (None or ``pinned``: the pinned pair); VersionProblem if it
        is not one of the forms above."""
        if text is None or text == "pinned":
            return cls(PINNED_ORT, PINNED_EP)
        match = _PAIR.match(text)
        if match is None:
            raise VersionProblem(f"ort-native version {text!r} is not understood", SYNTAX)
        return cls(match["ort"] or PINNED_ORT, match["ep"] or match["ep_only"] or PINNED_EP)


def resolve(text: str | None, base: Path) -> ResolvedVersion:
    """The descriptor's ``versions``: syntax only, no registry."""
    version = NativeVersion.parse(text)
    return ResolvedVersion(version.exact, text or "pinned")


def published(package: str) -> list[str]:
    """Every version PyPI lists for `package`, oldest first (pip's own index client)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    listed = re.search(r"Available versions: (.*)", done.stdout)
    if done.returncode != 0 or listed is None:
        message = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise EnvironmentUnusable(f"pip could not list {package}'s versions: {message[0]}")
    return sorted(listed[1].split(", "), key=_release_key)


def _release_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else -1 for part in re.split(r"[.+-]", version))


class PackageIndex:
    """``bisect``'s VersionHistory: the pairs between two ends that differ in one component."""

    def between(self, older: str, newer: str) -> list[str]:
        low, high = NativeVersion.parse(older), NativeVersion.parse(newer)
        if low.ort != high.ort and low.ep != high.ep:
            raise InvalidInput(
                f"ort-native: {older} and {newer} differ in both onnxruntime and the plugin; "
                "bisect one at a time (e.g. --good 1.31.1+ep0.4.0 --bad 1.32.0+ep0.4.0)"
            )
        if low.ort != high.ort:
            versions = _span(published(ORT_PACKAGE), low.ort, high.ort)
            return [NativeVersion(v, low.ep).exact for v in versions]
        versions = _span(published(EP_PACKAGE), low.ep, high.ep)
        return [NativeVersion(low.ort, v).exact for v in versions]

    @staticmethod
    def commit(version: str) -> str | None:
        return None  # PyPI's metadata names no commit

    @staticmethod
    def compare_url(older: str, newer: str) -> str:
        low, high = NativeVersion.parse(older), NativeVersion.parse(newer)
        if low.ort != high.ort:
            return f"https://github.com/microsoft/onnxruntime/compare/v{low.ort}...v{high.ort}"
        return f"https://pypi.org/project/{EP_PACKAGE}/#history"


def _span(versions: list[str], older: str, newer: str) -> list[str]:
    for end in (older, newer):
        if end not in versions:
            raise InvalidInput(
                f"{end} is not a published version; PyPI lists {', '.join(versions)}"
            )
    return versions[versions.index(older) : versions.index(newer) + 1]


def history() -> PackageIndex:
    return PackageIndex()
