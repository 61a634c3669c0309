"""onnxruntime-web packages: one folder per exact version in the cache, installed by npm on
first use, and which of the WebGPU builds each one ships.

The pinned version (``npm/package.json``, with its lockfile, shipped inside this package) is
installed with ``npm ci`` from that lockfile; any other version with ``npm install``. An install
goes to a temporary folder renamed into place when complete, so concurrent runs or shards never
see half a package (the first rename wins; the others discard theirs).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.backends.base import BackendTarget
from runner.backends.ortweb.npmcli import npm
from runner.environment import package_version
from runner.errors import EnvironmentUnusable
from runner.files import CACHE_ENV, cache_root, make_temporary_folder

PACKAGE = "onnxruntime-web"
CDN = "https://cdn.jsdelivr.net/npm"  # serves every file of every published npm version
PIN = Path(__file__).parent / "npm"  # package.json + package-lock.json: the pinned version
NPM_HINT = (
    "install Node.js with npm (apt-get install nodejs npm); versions install from the npm "
    f"registry into the cache folder (${CACHE_ENV} moves it), so it must be reachable once"
)


@dataclass(frozen=True)
class Build:
    """One WebGPU implementation in a package's dist/: the module the page imports and the
    wasm binary it fetches (which tells the builds apart: JSEP, the C++ EP, the C++ EP on JSPI)."""

    module: str
    wasm: str  # a glob in dist/
    about: str  # what it is, in words


# The builds a suite's `bundle:` may name (the descriptor's `builds`).
BUILDS = {
    "jsep": Build(
        "ort.mjs", "*.jsep.wasm", "the JavaScript EP; what `import 'onnxruntime-web'` is"
    ),
    "webgpu": Build("ort.webgpu.mjs", "*.asyncify.wasm", "the C++ WebGPU EP, asyncify"),
    "jspi": Build("ort.jspi.mjs", "*.jspi.wasm", "the C++ WebGPU EP, JSPI"),
}
DEFAULT_BUILD = "jsep"


def pinned_version() -> str:
    """The exact version ``npm/package.json`` pins."""
    return json.loads((PIN / "package.json").read_text())["dependencies"][PACKAGE]


def versions_folder() -> Path:
    return cache_root() / PACKAGE


@dataclass(frozen=True)
class OrtWebPackage:
    root: Path  # the folder holding package.json and dist/
    version: str  # exact: an npm version, or file:<folder> for a local build

    @property
    def dist(self) -> Path:
        return self.root / "dist"

    @property
    def package_version(self) -> str:
        """What its package.json says (a local build's own version)."""
        return json.loads((self.root / "package.json").read_text())["version"]

    def builds(self) -> dict[str, str]:
        """Each build: '' if the package ships it, else what it lacks."""
        return {name: self._lacks(build) for name, build in BUILDS.items()}

    def _lacks(self, build: Build) -> str:
        if not (self.dist / build.module).is_file():
            return f"dist/{build.module}"
        if not any(self.dist.glob(build.wasm)):
            return f"dist/{build.wasm}"
        return ""

    def layout_problem(self) -> str | None:
        """Why this runner cannot use the package at all: no build it knows is in its dist/."""
        if all(self.builds().values()):
            modules = ", ".join(f"{b.module} with {b.wasm}" for b in BUILDS.values())
            return (
                f"onnxruntime-web {self.version}: its dist/ holds none of the builds this runner "
                f"knows ({modules}); its layout of files is not understood"
            )
        return None

    def build_files(self, build: str) -> dict[str, Path]:
        """The dist/ files one build loads, by name: its module, its wasm binary and the
        binary's loader (``repro --local`` copies them, so a bundle runs offline)."""
        files = {BUILDS[build].module: self.dist / BUILDS[build].module}
        for binary in sorted(self.dist.glob(BUILDS[build].wasm)):
            files[binary.name] = binary
            loader = binary.with_suffix(".mjs")
            if loader.is_file():
                files[loader.name] = loader
        return files

    def dist_files(self) -> dict[str, Path]:
        """Every file in dist/, by name: what a bundle may import or fetch next to itself."""
        return {file.name: file for file in self.dist.iterdir() if file.is_file()}


def published_url(version: str, build: str) -> str | None:
    """Where the CDN serves a published version's build module; None for a local build."""
    if version.startswith("file:"):
        return None
    return f"{CDN}/{PACKAGE}@{version}/dist/{BUILDS[build].module}"


def package_for(version: str) -> OrtWebPackage:
    """The package of an exact version (``file:<folder>`` for a local build), installed into
    the cache first if it is not there; raises EnvironmentUnusable if npm cannot install it."""
    if version.startswith("file:"):
        return OrtWebPackage(Path(version.removeprefix("file:")), version)
    pin = PIN if version == pinned_version() else None
    return OrtWebPackage(npm_package(PACKAGE, version, versions_folder() / version, pin), version)


def npm_package(package: str, version: str, folder: Path, pin: Path | None = None) -> Path:
    """`package`'s folder, at exactly `version`, installed into `folder` by npm the first time:
    with ``npm ci`` from `pin` (a folder holding its package.json and lockfile), else with
    ``npm install``. Raises EnvironmentUnusable if npm cannot install it."""
    if not (folder / ".complete").is_file():
        _install(package, version, folder, pin)
    return folder / "node_modules" / package


def _install(package: str, version: str, folder: Path, pin: Path | None) -> None:
    staging = make_temporary_folder(folder.parent, f".{version}.")
    try:
        if pin is not None:
            for name in ("package.json", "package-lock.json"):
                shutil.copy(pin / name, staging / name)
            npm("ci", "--prefix", str(staging), "--no-audit", "--no-fund", "--ignore-scripts")
        else:
            (staging / "package.json").write_text(
                json.dumps({"private": True, "dependencies": {package: version}})
            )
            npm(
                "install",
                "--prefix",
                str(staging),
                "--no-audit",
                "--no-fund",
                "--ignore-scripts",
                "--no-package-lock",
            )
        installed = json.loads((staging / "node_modules" / package / "package.json").read_text())
        if installed["version"] != version:
            raise EnvironmentUnusable(
                f"npm installed {package} {installed['version']} for {version}"
            )
        (staging / ".complete").touch()
        try:
            staging.rename(folder)
        except OSError:  # another run installed it meanwhile: theirs is as good
            if not (folder / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prepare_run(targets: Sequence[BackendTarget], say: Callable[[str], None]) -> dict[str, Any]:
    """Install every version the run's targets need (run.json: what each spelling ran)."""
    labels = {}
    for target in targets:
        version = target.version or pinned_version()  # a target made without one: the pin
        label = target.declared or version
        if not version.startswith("file:") and not (versions_folder() / version).is_dir():
            say(f"installing onnxruntime-web {version} into {versions_folder()} (npm)")
        package_for(version)
        labels[label] = version
    return {
        "playwright": package_version("playwright"),
        "onnxruntime_web": ", ".join(dict.fromkeys(labels.values())),
        "ort_web_versions": labels,
    }
