"""onnxruntime-web packages: one folder per exact version in the cache, installed by npm on
first use, and which of the WebGPU builds each one ships.

The pinned version (``npm/package.json``, with its lockfile, shipped inside this package) is
installed with ``npm ci`` from that lockfile; any other version with ``npm install``. An install
goes to a temporary folder renamed into place when complete, so concurrent runs or shards never
see half a package (the first rename wins; the others discard theirs).
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from collections.abc import Callable, Iterable, Sequence
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
    """One WebGPU implementation in a package's dist/, told apart by the wasm binary its module
    fetches (JSEP, the C++ EP, the C++ EP on JSPI); which file its module is depends on the
    release line's layout (LAYOUTS)."""

    wasm: str  # a glob in dist/
    about: str  # what it is, in words
    # After a kernel throws, the instance refuses every later kernel ("is not allowed to be
    # called recursively": JSEP, 1.17.0 .. 1.30.0): the next sequence needs a new instance
    stuck_after_error: bool = False


# The builds a suite's `bundle:` may name (the descriptor's `builds`).
BUILDS = {
    "jsep": Build("*.jsep.wasm", "the JavaScript EP (JSEP)", stuck_after_error=True),
    "webgpu": Build("*.asyncify.wasm", "the C++ WebGPU EP, asyncify"),
    "jspi": Build("*.jspi.wasm", "the C++ WebGPU EP, JSPI"),
}


@dataclass(frozen=True)
class Layout:
    """How a line of releases lays out dist/: the files that tell it (a dist/ holding any one
    of them), and each build's module there. A module named ``*.mjs`` is an ES module the page
    imports; one named ``*.js`` a UMD script it loads with a <script> tag (it defines
    ``globalThis.ort``). Measured on every release line, 2026-12-02
    (docs/versions-and-bisect.md)."""

    since: str  # the first release laid out so
    markers: tuple[str, ...]  # globs in dist/
    modules: dict[str, str]  # build -> its module in dist/
    about: str


# First match wins: newest first.
LAYOUTS = (
    Layout(
        "1.23.0",
        ("*.asyncify.wasm", "*.jspi.wasm", "ort.jspi.mjs"),
        {"jsep": "ort.mjs", "webgpu": "ort.webgpu.mjs", "jspi": "ort.jspi.mjs"},
        "ES modules: JSEP in ort.mjs, the C++ EP in ort.webgpu.mjs (asyncify) and, from 1.24, "
        "ort.jspi.mjs",
    ),
    Layout(
        "1.19.0",
        ("ort.webgpu.mjs",),
        {"jsep": "ort.webgpu.mjs"},
        "ES modules, JSEP only, in ort.webgpu.mjs (ort.mjs has no WebGPU before 1.21)",
    ),
    Layout(
        "1.15.0",
        ("ort.webgpu.min.js",),
        {"jsep": "ort.webgpu.min.js"},
        "a UMD script, JSEP only: ort.webgpu.min.js (1.17 and 1.18 add esm/ and cjs/ folders)",
    ),
)
FIRST_WEBGPU = LAYOUTS[-1].since
# The newest ai.onnx opset a release line's session takes, where it is older than the builtin
# models' 20 (measured 2026-12-02): a newer one is refused, by 1.16 as a bare number.
OPSETS = {"1.15.0": 18, "1.16.0": 19, "1.17.0": None}
# What capture needs that a build may lack (harness.js reports which its module lacks)
CAPTURE_NEEDS = "GPU tensors and graph capture came in 1.17.0"


def layout_of(names: Iterable[str]) -> Layout | None:
    """The layout of a dist/ holding files named `names`; None if none fits."""
    names = list(names)
    for layout in LAYOUTS:
        if any(fnmatch.filter(names, marker) for marker in layout.markers):
            return layout
    return None


def lacks(build: str, names: Iterable[str]) -> str:
    """What a dist/ holding files named `names` lacks of `build` (a file or glob), '' if
    nothing: it ships the build."""
    names = list(names)
    layout = layout_of(names)
    module = layout.modules.get(build) if layout else None
    if module is not None and module not in names:
        return module
    if not fnmatch.filter(names, BUILDS[build].wasm):
        return BUILDS[build].wasm
    return "" if module is not None else BUILDS[build].wasm


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

    def names(self) -> list[str]:
        """The files directly in dist/."""
        return sorted(self.dist_files())

    def layout(self) -> Layout | None:
        return layout_of(self.names())

    def builds(self) -> dict[str, str]:
        """Each build: '' if the package ships it, else what its dist/ lacks (dist/<file>)."""
        names = self.names()
        return {name: f"dist/{what}" if (what := lacks(name, names)) else "" for name in BUILDS}

    def module(self, build: str) -> str:
        """The file in dist/ that a build's page loads (the package ships the build)."""
        return self.layout().modules[build]

    def ships_webgpu(self) -> bool:
        """Whether its dist/ holds any WebGPU file (onnxruntime-web has one from 1.15.0)."""
        return any(fnmatch.filter(self.names(), glob) for glob in ("*webgpu*", "*jsep*", "*jspi*"))

    def layout_problem(self) -> str | None:
        """Why this runner cannot use the package at all: it ships no WebGPU EP, or none of the
        builds in the layouts this runner knows."""
        if not self.ships_webgpu():
            return (
                f"onnxruntime-web {self.version} ships no WebGPU EP (no ort.webgpu.* or "
                f"*.jsep.wasm in its dist/; the first release with one is {FIRST_WEBGPU})"
            )
        builds = self.builds()
        if all(builds.values()):
            lacking = "; ".join(f"{name}: {what}" for name, what in builds.items())
            return (
                f"onnxruntime-web {self.version}: its dist/ holds none of the builds this runner "
                f"knows ({lacking}); its layout of files is not understood"
            )
        return None

    def build_files(self, build: str) -> dict[str, Path]:
        """The dist/ files one build loads, by name: its module, its wasm binary and the
        binary's loader (``repro --local`` copies them, so a bundle runs offline)."""
        module = self.module(build)
        files = {module: self.dist / module}
        for binary in sorted(self.dist.glob(BUILDS[build].wasm)):
            files[binary.name] = binary
            for loader in (binary.with_suffix(".mjs"), binary.with_suffix(".js")):
                if loader.is_file():
                    files[loader.name] = loader
        return files

    def dist_files(self) -> dict[str, Path]:
        """Every file in dist/, by name: what a bundle may import or fetch next to itself."""
        return {file.name: file for file in self.dist.iterdir() if file.is_file()}


def published_url(version: str, module: str) -> str | None:
    """Where the CDN serves a published version's dist/ file `module`; None for a local build."""
    if version.startswith("file:"):
        return None
    return f"{CDN}/{PACKAGE}@{version}/dist/{module}"


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
