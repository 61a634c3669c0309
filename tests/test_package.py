"""Installed as a package (the built wheel, not the checkout), the tool works from any folder on
suites kept anywhere: the schemas and page assets travel as package data, and nothing is looked
up relative to the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.gpu  # the run is on wgpu (lavapipe is enough)

SUITE = """
name: elsewhere
models:
  enc: {builtin: encoder, layers: 1, hidden: 8, heads: 2, ffn: 16}
shapes: [{batch: 1, sequence: 4}]
backends: [wgpu]
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtualenv holding the wheel built from this checkout (by this environment's
    setuptools, the test extra's). Its dependencies come from this test's environment through a
    path file (no download), whose own path files are not read: the checkout's editable install
    stays invisible."""
    work = tmp_path_factory.mktemp("package")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work / "wheel"),
            str(REPO),
        ],
        check=True,
    )
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    [wheel] = (work / "wheel").glob("*.whl")
    subprocess.run([venv / "bin" / "pip", "install", "-q", "--no-deps", wheel], check=True)
    [site] = (venv / "lib").glob("python*/site-packages")
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def tool(venv: Path, *args, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [venv / "bin" / "regress", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_the_wheel_runs_suites_kept_anywhere(installed, tmp_path):
    where = subprocess.run(
        [installed / "bin" / "python", "-c", "import runner; print(runner.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where).is_relative_to(installed), where  # the wheel's, not the checkout's
    suite = tmp_path / "mine" / "suite.yaml"
    suite.parent.mkdir()
    suite.write_text(textwrap.dedent(SUITE))
    validated = tool(installed, "validate", suite, cwd=tmp_path)
    assert validated.returncode == 0 and "1 suite(s), 2 case(s)" in validated.stdout, validated
    listed = tool(installed, "list", suite, cwd=tmp_path)
    assert listed.stdout.splitlines()[0] == "enc/batch=1,sequence=4/layout=default/wgpu/eager"
    ran = tool(installed, "run", suite, "--out", "out", "--runs", "2", "--report", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    [results] = (tmp_path / "out" / "runs").glob("*/results.jsonl")
    verdicts = [json.loads(line)["verdict"] for line in results.read_text().splitlines()]
    assert verdicts == ["pass", "pass"]
    assert (tmp_path / "out" / "index.html").is_file()
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: broken\nmodels: {}\n")
    refused = tool(installed, "validate", broken, cwd=tmp_path)
    assert refused.returncode == 2 and "broken.yaml:" in refused.stderr  # the schema is there
