"""Sessions: `regress` (the main job), `tests`, `lint`, `bench`.

`regress` and `tests` install what they need: Python packages into the session's virtualenv
and, when run as root on Debian, Chromium, lavapipe and Node.js with npm (the runner installs
each onnxruntime-web version it runs into its cache folder with npm, on first use).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["regress"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).parent


def _missing_system_packages() -> list[str]:
    """Debian packages: Chromium (it ships SwiftShader's Vulkan driver) for ort-web, npm for
    onnxruntime-web's versions, lavapipe for wgpu."""
    missing = []
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        missing.append("chromium")
    if not shutil.which("npm"):
        missing += ["nodejs", "npm"]
    icd_folders = [Path("/usr/share/vulkan/icd.d"), Path("/etc/vulkan/icd.d")]
    if not any(folder.glob("lvp_icd*.json") for folder in icd_folders if folder.is_dir()):
        missing.append("mesa-vulkan-drivers")
    return missing


def install_system_packages(session: nox.Session) -> None:
    missing = _missing_system_packages()
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        session.warn(
            f"missing system packages {missing}: install them (apt-get install "
            f"{' '.join(missing)}), or the backends that need them report it"
        )
        return
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    session.run("apt-get", "update", "-qq", external=True, env=env)
    session.run("apt-get", "install", "-y", "-qq", *missing, "libvulkan1", external=True, env=env)


def install_project(session: nox.Session, spec: str) -> None:
    """`pip install -e SPEC`, skipped while pyproject.toml is what this virtualenv last installed
    (an editable install follows the sources; pip takes 3-4 s to find nothing to do)."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + spec.encode()).hexdigest()
    stamp = Path(session.virtualenv.location) / f".installed-{digest[:16]}"
    if stamp.exists():
        return
    session.install("-e", spec)
    for old in stamp.parent.glob(".installed-*"):
        old.unlink()
    stamp.touch()


# `runner run` options that take a value: the word after one is that value, not a filter.
VALUE_OPTIONS = {
    "--backend",
    "--filter",
    "--shard",
    "--out",
    "--runs",
    "--timeout",
    "--inject",
    "--adapter",
    "--chromium",
    "--tag",
}


def _filters_and_options(posargs: list[str]) -> list[str]:
    """Bare words are filters (`nox -s regress -- backend=wgpu`); options pass through."""
    args: list[str] = []
    for arg in posargs:
        is_value = bool(args) and args[-1] in VALUE_OPTIONS
        args += [arg] if arg.startswith("-") or is_value else ["--filter", arg]
    return args


@nox.session
def regress(session: nox.Session) -> None:
    """Run the bundled suites and build reports/. Bare extra arguments are filters."""
    install_system_packages(session)
    install_project(session, ".")
    session.run(
        "python",
        "-m",
        "runner",
        "run",
        "suites",
        "--report",
        *_filters_and_options(session.posargs),
    )


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite. Extra arguments go to pytest (e.g. -m 'not browser')."""
    install_system_packages(session)
    install_project(session, ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def bench(session: nox.Session) -> None:
    """Suite throughput against a naive harness (the README's table); not run by the tests."""
    install_system_packages(session)
    install_project(session, ".")
    session.run("python", "bench/bench.py", *session.posargs)
