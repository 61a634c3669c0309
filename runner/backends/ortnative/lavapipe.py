"""Mesa's lavapipe (Vulkan on the CPU), new enough for ONNX Runtime's WebGPU EP, kept in the
cache folder for the ort-native child process alone.

Dawn, inside onnxruntime-webgpu, refuses Debian 12's lavapipe (Mesa 22.3: "Vulkan
shaderUniform*ArrayDynamicIndexing required") and takes Mesa 25's, which Debian's
bookworm-backports carries. Installing that package would swap the Vulkan driver of every
program on the machine (the wgpu backend's, Chromium's), so it is fetched with apt-get into the
cache folder (with package lists of its own there: no root needed, nothing of the system's
changed), unpacked with dpkg-deb, and given an ICD file of its own; only the child process that
runs a version of ort-native is pointed at it (``VK_ICD_FILENAMES``). Elsewhere,
``REGRESS_LAVAPIPE_ICD`` names the ICD file of a lavapipe from Mesa 25 or later.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from runner.errors import EnvironmentUnusable
from runner.files import cache_root, make_temporary_folder

PACKAGE = "mesa-vulkan-drivers"
VERSION = "25.0.7-2~bpo12+1"
SOURCE = (
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
    "http://deb.debian.org/debian bookworm-backports main"
)
ICD_ENV = "REGRESS_LAVAPIPE_ICD"
ICD_FILE = "lvp_icd.json"
APT_TIMEOUT_S = 600.0


def folder() -> Path:
    return cache_root() / "mesa" / VERSION


def icd_file() -> Path | None:
    """The ICD file of the lavapipe ort-native runs on: $REGRESS_LAVAPIPE_ICD, else the one
    ``install`` wrote; None before either is there."""
    if os.environ.get(ICD_ENV):
        return Path(os.environ[ICD_ENV])
    found = folder() / ICD_FILE
    return found if found.is_file() else None


def install(say: Callable[[str], None]) -> Path:
    """The ICD file, Mesa's package downloaded and unpacked into the cache folder the first
    time; EnvironmentUnusable saying why when this machine cannot (no apt-get or dpkg-deb, the
    mirror out of reach)."""
    found = icd_file()
    if found is not None:
        if not found.is_file():
            raise EnvironmentUnusable(f"${ICD_ENV} names {found}, which is no file")
        return found
    for tool in ("apt-get", "dpkg-deb", "dpkg"):
        if shutil.which(tool) is None:
            raise EnvironmentUnusable(
                f"installing lavapipe from Mesa {VERSION} needs Debian's {tool}; elsewhere set "
                f"${ICD_ENV} to the ICD file of a lavapipe from Mesa 25 or later"
            )
    target = folder()
    say(f"installing lavapipe from {PACKAGE} {VERSION} into {target} (apt-get download)")
    staging = make_temporary_folder(target.parent, f".{VERSION}.")
    try:
        with tempfile.TemporaryDirectory(prefix="regress-apt-") as apt:
            deb = _download(Path(apt))
            _run(["dpkg-deb", "-x", str(deb), str(staging / "root")], "unpack it")
        # the package's own ICD file, naming its library where it will lie
        [library] = (staging / "root").glob("usr/lib/*/libvulkan_lvp.so")
        icd = json.loads((staging / "root/usr/share/vulkan/icd.d" / ICD_FILE).read_text())
        icd["ICD"]["library_path"] = str(target / library.relative_to(staging))
        (staging / ICD_FILE).write_text(json.dumps(icd, indent=2))
        try:
            staging.rename(target)
        except OSError:  # another run installed it meanwhile: theirs is as good
            if not (target / ICD_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target / ICD_FILE


def _download(apt: Path) -> Path:
    """The package's .deb, fetched by apt-get with lists and a cache of its own under `apt`."""
    (apt / "sources.list").write_text(SOURCE + "\n")
    for sub in ("lists/partial", "archives/partial"):
        (apt / sub).mkdir(parents=True)
    options = [
        f"-oDir::Etc::SourceList={apt / 'sources.list'}",
        "-oDir::Etc::SourceParts=/nonexistent",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::Cache={apt}",
        "-oDebug::NoLocking=1",
        "-oAPT::Sandbox::User=root",  # the files are ours: no _apt user to hand them to
    ]
    _run(["apt-get", *options, "update"], "read bookworm-backports' package list")
    _run(["apt-get", *options, "download", f"{PACKAGE}={VERSION}"], "download it", cwd=apt)
    [deb] = apt.glob(f"{PACKAGE}_*.deb")
    return deb


def _run(command: list[str], what: str, cwd: Path | None = None) -> None:
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=APT_TIMEOUT_S, cwd=cwd
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentUnusable(
            f"{command[0]} did not {what} in {APT_TIMEOUT_S:g} s (Mesa {VERSION})"
        ) from None
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.startswith(("E:", "dpkg"))]
        reason = said[-1] if said else f"exit status {done.returncode}"
        raise EnvironmentUnusable(
            f"{command[0]} could not {what} (Mesa {VERSION}): {reason}; set ${ICD_ENV} to the "
            "ICD file of a lavapipe from Mesa 25 or later instead"
        )
