"""Shared fixtures: suite files written on the fly, the CLI as a user runs it, the result
schema, a repository root for path checks, and the canary suite's run."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jsonschema
import pytest

from runner import cli
from runner.backends.base import CaseWork, Timings, Trace
from runner.history import CaseResult
from runner.verdicts import Outcome

REPO = Path(__file__).resolve().parents[1]
RESULT_VALIDATOR = jsonschema.Draft202012Validator(
    json.loads((REPO / "schemas/result.schema.json").read_text())
)  # built once: ``jsonschema.validate`` checks the schema itself again on every call


def regress(*args, cwd=None, env=None, process=False, timeout=600) -> subprocess.CompletedProcess:
    """`python -m runner ARGS` as a user runs it, from `cwd` (the repository), with `env` added
    to the environment, its exit code and output captured. It runs in this process
    (``cli.main``), or with `process` in a process of its own: where what a process keeps is
    under test (npm's answer, kept for the process; a PATH without npm), and for an explore,
    whose seeded draws are those of a fresh process (after other explores in one process they
    differ)."""
    argv = [str(arg) for arg in args]
    if process:
        return subprocess.run(
            [sys.executable, "-m", "runner", *argv],
            capture_output=True,
            text=True,
            cwd=cwd or REPO,
            env={**os.environ, **(env or {})},
            timeout=timeout,
        )
    out, err = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as patch,
        contextlib.chdir(cwd or REPO),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        try:
            code = cli.main(argv)
        except SystemExit as exit:  # argparse's own: --help, a usage error
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    return subprocess.CompletedProcess(["regress", *argv], code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def canary_run(tmp_path_factory):
    """suites/canaries.yaml run whole, three runs a case, into a reports folder: the detector
    test judges it and the ort-web repro tests bundle its results. Every test that asks for it
    goes to one xdist worker (``pytest_collection_modifyitems``), so it runs once."""
    from runner.backends import REGISTRY
    from runner.backends.base import BackendOptions
    from runner.matrix import expand_matrix
    from runner.pipeline import execute
    from runner.selection import RunPlan
    from runner.suite import load_suite

    out = tmp_path_factory.mktemp("canaries")
    cases = expand_matrix([load_suite(REPO / "suites/canaries.yaml", REGISTRY)])
    return out, execute(RunPlan(tuple(cases)), out, BackendOptions(runs=3))


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    """A folder inside its own git repository, as users keep suites."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


@pytest.fixture
def write_suite(suite_dir: Path):
    def write(text: str, name: str = "suite.yaml") -> Path:
        path = suite_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return write


def run_until_results(suite: Path, out: Path, results: int = 3) -> subprocess.Popen:
    """`runner run SUITE` (one run per case) in its own process group, as a terminal starts it,
    returned once ``results`` results are stored: the moment to interrupt it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "run", str(suite), "--out", str(out), "--runs", "1"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        jsonl = list(out.glob("runs/*/results.jsonl"))
        if jsonl and len(jsonl[0].read_text().splitlines()) >= results:
            break
        time.sleep(0.1)
    return proc


def opening(case, workload) -> CaseWork:
    """`case` as the first of a layout-change sequence the next works continue."""
    return CaseWork(case, workload, opens_sequence=True, closes_sequence=False)


def continuing(case, workload) -> CaseWork:
    """`case` in the layout-change sequence the backend has open: it sees what came before."""
    return CaseWork(case, workload, opens_sequence=False, closes_sequence=False)


def case_result(**fields) -> CaseResult:
    """A stored result for pure-logic tests: a passing eager reference case, as `fields` change
    it (a failing verdict fails the run unless `outcome` says otherwise)."""
    verdict = fields.get("verdict", "pass")
    defaults = dict(
        result_id="r0",
        run_id="R",
        case_id="m/static/layout=default/reference/eager",
        suite="s",
        suite_path="/s.yaml",
        model="m",
        shape={},
        layout="default",
        layout_order=[],
        layout_values={},
        backend="reference",
        bundle=None,
        capture="eager",
        verdict=verdict,
        verdicts=[verdict],
        expected=["pass"],
        outcome=Outcome.EXPECTED if verdict == "pass" else Outcome.UNEXPECTED,
        max_abs_error=None,
        max_rel_error=None,
        tolerance={"abs": 1e-3, "rel": 1e-5},
        message="",
        finished_at="2026-11-30T10:00:00+00:00",
        timings=dataclasses.asdict(Timings()),
        trace=Trace().summary(),
    )
    return CaseResult(**{**defaults, **fields})


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """pytest-xdist (``--dist loadgroup``) hands each worker whole groups: the ``clock`` tests
    one after another (what an explore finds in its budget wants the cores it was measured
    on), the tests of the canary run together (it runs once), every other module whole (its
    module fixtures made once). ``ort_gpu`` tests run where a GPU is promised (``nox -s gpu``
    sets REGRESS_GPU_TESTS=1): elsewhere they skip, as ort-native's cases do on a machine
    without a GPU."""
    for item in items:
        if "clock" in item.keywords:
            group = "clock"
        elif "canary_run" in item.fixturenames:
            group = "canary_run"
        else:
            group = item.module.__name__
        item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("REGRESS_GPU_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="needs a GPU for ONNX Runtime's WebGPU EP: nox -s gpu")
    for item in items:
        if "ort_gpu" in item.keywords:
            item.add_marker(skip)
