"""One Python environment per ort-native version: the pair's packages, installed by pip into the
cache folder on first use, and put first on the ``sys.path`` of the child process that runs the
version (``backend``), so that every version runs beside the others in one run.

An environment holds only what the version adds to the runner's own environment: the plugin,
and onnxruntime unless the runner's own onnxruntime (the oracle) is that very version; or
onnxruntime-webgpu (which installs as ``onnxruntime``), beside lavapipe (``lavapipe``). Its
other Python dependencies (numpy, protobuf...) are the runner's. pip honours its usual settings
(``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, ``PIP_NO_INDEX``), so a machine without a registry
installs from a folder of wheels. An install goes to a temporary folder renamed into place when
complete, so concurrent runs never see half an environment.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runner.backends.base import BackendTarget
from runner.backends.ortnative import lavapipe
from runner.backends.ortnative.versions import (
    EP_PACKAGE,
    ORT_PACKAGE,
    WEBGPU_PACKAGE,
    NativeVersion,
)
from runner.environment import package_version
from runner.errors import EnvironmentUnusable
from runner.files import CACHE_ENV, cache_root, make_temporary_folder

PIP_TIMEOUT_S = 900.0  # onnxruntime's wheel is about 28 MB
MANIFEST = "environment.json"  # what the folder holds; written last: the folder is complete


def environments_folder() -> Path:
    return cache_root() / "ort-native"


def site_for(version: NativeVersion) -> Path | None:
    """The installed environment's folder for `version`, if it is complete and still fits the
    runner's onnxruntime (one that relies on it must be reinstalled when it changes)."""
    folder = environments_folder() / version.exact
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not manifest["onnxruntime_included"] and package_version(ORT_PACKAGE) != version.ort:
        return None
    return folder / "site"


def install(version: NativeVersion) -> Path:
    """The environment of `version`, installed first if missing; EnvironmentUnusable with pip's
    own words when pip cannot install it."""
    site = site_for(version)
    if site is not None:
        return site
    folder = environments_folder() / version.exact
    staging = make_temporary_folder(folder.parent, f".{version.exact}.")
    try:
        if version.builtin:
            include_ort, packages = True, [f"{WEBGPU_PACKAGE}=={version.ort}"]
        else:
            include_ort = package_version(ORT_PACKAGE) != version.ort
            packages = [f"{EP_PACKAGE}=={version.ep}"]
            if include_ort:
                packages.append(f"{ORT_PACKAGE}=={version.ort}")
        _pip("install", "--no-deps", "--no-compile", "--target", str(staging / "site"), *packages)
        manifest = {"onnxruntime": version.ort, "plugin": version.ep}
        manifest["onnxruntime_included"] = include_ort
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
        shutil.rmtree(folder, ignore_errors=True)  # an outdated one (see site_for)
        try:
            staging.rename(folder)
        except OSError:  # another run installed it meanwhile: theirs is as good
            if site_for(version) is None:
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder / "site"


def _pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EnvironmentUnusable(f"pip gave no answer in {PIP_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
        message = " ".join(errors) or done.stderr.strip() or f"exit status {done.returncode}"
        raise EnvironmentUnusable(
            f"pip could not install {' '.join(args[-2:])}: {message} (versions install from "
            f"PyPI into the cache folder, ${CACHE_ENV} moves it; PIP_FIND_LINKS and "
            "PIP_NO_INDEX install from a folder of wheels)"
        )


def prepare_run(targets: Sequence[BackendTarget], say: Callable[[str], None]) -> dict[str, Any]:
    """Install every version the run's targets need, and lavapipe for onnxruntime-webgpu
    (run.json: what each label ran). Lavapipe that cannot be installed is said, and left for
    the version's cases to skip with the reason."""
    labels = {}
    for target in targets:
        version = NativeVersion.parse(target.version)
        if site_for(version) is None:
            say(f"installing {version.exact} into {environments_folder()} (pip)")
        install(version)
        if version.builtin:
            try:
                lavapipe.install(say)
            except EnvironmentUnusable as unusable:
                say(f"{unusable}: {version.exact}'s cases skip")
        labels[target.declared or version.exact] = version.exact
    return {"ort_native_versions": labels}
