"""Which ONNX Runtime build with the WebGPU EP a version of ``ort-native`` names.

Two builds carry ONNX Runtime's C++ WebGPU EP to Python. The plugin: onnxruntime with the
package onnxruntime-ep-webgpu, a pair written ``ORT+epEP`` (``1.32.0+ep0.4.0``), on the GPUs
ONNX Runtime's device discovery finds. And onnxruntime-webgpu, ONNX Runtime with the EP built
in, written ``webgpu-VERSION`` (``webgpu-1.27.0``), whose Dawn takes any Vulkan adapter,
lavapipe (Mesa 25) on a machine without a GPU. A suite may name a pair, the onnxruntime version
alone (``1.31.1``: with the pinned plugin), the plugin alone (``ep0.3.0``: with the pinned
onnxruntime), a ``webgpu-`` build, or ``pinned``: the pinned pair on a machine with a GPU, the
pinned onnxruntime-webgpu without one. Resolving reads no registry: whether a version exists is
learnt when it is installed (``environments``). ``bisect`` walks one component at a time, the
one that differs between its ends, over the versions PyPI lists.
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from runner.backends.base import ResolvedVersion, VersionProblem
from runner.errors import EnvironmentUnusable, InvalidInput

ORT_PACKAGE = "onnxruntime"
EP_PACKAGE = "onnxruntime-ep-webgpu"
WEBGPU_PACKAGE = "onnxruntime-webgpu"  # installs as `onnxruntime`, the WebGPU EP built in
# The pair the backend runs on a GPU unless told otherwise: an onnxruntime whose Python API
# reaches WebGPU graph capture (microsoft/onnxruntime#32074; 1.31.1 has it too), with the newest
# plugin; without a GPU, the newest onnxruntime-webgpu (1.25.0 and 1.25.1 are published too).
PINNED_ORT = "1.32.0"
PINNED_EP = "0.4.0"
PINNED_WEBGPU = "1.27.0"
BUILTIN_PREFIX = "webgpu-"

_NUMBER = r"\d+(?:\.\d+)*(?:[.-]?(?:a|b|rc|dev|post)\d*)*"
_PAIR = re.compile(rf"^(?:(?P<ort>{_NUMBER})(?:\+ep(?P<ep>{_NUMBER}))?|ep(?P<ep_only>{_NUMBER}))$")
_BUILTIN = re.compile(rf"^{BUILTIN_PREFIX}(?P<ort>{_NUMBER})$")
SYNTAX = (
    "pinned, an onnxruntime version (1.31.1), a plugin version (ep0.3.0) or both "
    "(1.31.1+ep0.3.0), or an onnxruntime-webgpu version (webgpu-1.27.0)"
)


def gpu_found() -> bool:
    """Whether ONNX Runtime's device discovery finds a GPU here, by its own test on Linux: a
    card under /sys/class/drm (lavapipe and SwiftShader are none). Elsewhere, assumed."""
    if platform.system() != "Linux":
        return True
    return any(Path("/sys/class/drm").glob("card[0-9]*"))


@dataclass(frozen=True)
class NativeVersion:
    """An exact build: onnxruntime with the plugin's version `ep`, or, with `ep` None,
    onnxruntime-webgpu `ort`."""

    ort: str
    ep: str | None = None

    @property
    def builtin(self) -> bool:
        """onnxruntime-webgpu: the EP built in, on any Vulkan adapter (lavapipe)."""
        return self.ep is None

    @property
    def exact(self) -> str:
        return f"{BUILTIN_PREFIX}{self.ort}" if self.builtin else f"{self.ort}+ep{self.ep}"

    @classmethod
    def plugin(cls) -> NativeVersion:
        """The pinned pair of onnxruntime and the plugin."""
        return cls(PINNED_ORT, PINNED_EP)

    @classmethod
    def pinned(cls) -> NativeVersion:
        """The pinned pair where ONNX Runtime finds a GPU, the pinned onnxruntime-webgpu (on
        lavapipe) where it finds none."""
        return cls.plugin() if gpu_found() else cls(PINNED_WEBGPU)

    @classmethod
    def parse(cls, text: str | None) -> NativeVersion:
        """The build `text` names (None or ``pinned``: ``pinned()``); VersionProblem if it is
        not one of the forms above."""
        if text is None or text == "pinned":
            return cls.pinned()
        if match := _BUILTIN.match(text):
            return cls(match["ort"])
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
        if low.builtin != high.builtin:
            raise InvalidInput(
                f"ort-native: {older} and {newer} are builds of two kinds (onnxruntime-webgpu "
                "and the plugin); bisect within one"
            )
        if low.builtin:
            versions = _span(published(WEBGPU_PACKAGE), low.ort, high.ort)
            return [NativeVersion(v).exact for v in versions]
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
