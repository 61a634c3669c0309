"""The onnxruntime-web package npm installed from the repository's lockfile."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from runner.environment import package_version
from runner.errors import EnvironmentUnusable

REPO_ROOT = Path(__file__).resolve().parents[3]
NPM_HINT = f"run `npm ci` in {REPO_ROOT} (Node.js and npm needed)"

# build (a suite's `bundle:`, the descriptor's builds) -> the module the page imports.
BUNDLE_MODULES = {
    "jsep": "ort.mjs",
    "webgpu": "ort.webgpu.mjs",
    "jspi": "ort.jspi.mjs",
}
DEFAULT_BUNDLE = "jsep"  # what `import "onnxruntime-web"` gives


@dataclass(frozen=True)
class OrtWebPackage:
    root: Path  # node_modules/onnxruntime-web
    version: str
    pinned: str  # the version package.json asks for

    @property
    def dist(self) -> Path:
        return self.root / "dist"

    def dist_files(self) -> dict[str, Path]:
        """Every file in dist/, by name: what a bundle may import or fetch next to itself."""
        return {file.name: file for file in self.dist.iterdir() if file.is_file()}


def pinned_version(repo_root: Path = REPO_ROOT) -> str:
    """The exact onnxruntime-web version package.json pins ("" if it names none)."""
    manifest = json.loads((repo_root / "package.json").read_text())
    return manifest.get("dependencies", {}).get("onnxruntime-web", "")


def installed_version(root: Path) -> str | None:
    """The version of the onnxruntime-web package at `root`, None if there is none."""
    try:
        return json.loads((root / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def versions() -> dict[str, str | None]:
    """What a run would drive, read without starting a browser (run.json)."""
    return {
        "playwright": package_version("playwright"),
        "onnxruntime_web": installed_version(REPO_ROOT / "node_modules" / "onnxruntime-web"),
    }


def find_ort_web(repo_root: Path = REPO_ROOT) -> OrtWebPackage:
    """The installed package; raises EnvironmentUnusable (how to install it) if it is missing."""
    root = repo_root / "node_modules" / "onnxruntime-web"
    version = installed_version(root)
    if version is None:
        raise EnvironmentUnusable(f"onnxruntime-web is not installed ({root} missing): {NPM_HINT}")
    package = OrtWebPackage(root, version, pinned_version(repo_root))
    missing = [name for name in BUNDLE_MODULES.values() if not (package.dist / name).is_file()]
    if missing:
        raise EnvironmentUnusable(
            f"onnxruntime-web {package.version} lacks {', '.join(missing)}: {NPM_HINT}"
        )
    return package
