"""``nox -s regress -- ...``: every option of ``runner run`` passes through with its value, bare
words become filters, and the session exits with the runner's own code."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import nox
import pytest

from runner.cli import build_parser

from .conftest import REPO


def _load_noxfile():
    spec = importlib.util.spec_from_file_location("noxfile", REPO / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NOXFILE = _load_noxfile()


def _run_options() -> list[tuple[argparse.Action, str]]:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    actions = commands.choices["run"]._actions
    return [(a, option) for a in actions if a.dest != "help" for option in a.option_strings]


OPTIONS = _run_options()


def _value_options() -> set[str]:
    """What the session derives, the way it does: the noxfile's script, run by a Python where
    the project is installed."""
    out = subprocess.run(
        [sys.executable, "-c", NOXFILE.RUN_VALUE_OPTIONS],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(out))


@pytest.fixture(scope="module")
def value_options() -> set[str]:
    return _value_options()


def test_options_that_take_a_value_are_derived_from_the_parser(value_options):
    assert value_options == {
        "--adapter",
        "--backend",
        "--chromium",
        "--filter",
        "--inject",
        "--maxfail",
        "--ort-native-version",
        "--ort-web-version",
        "--out",
        "--run-timeout",
        "--runs",
        "--shard",
        "--tag",
        "--timeout",
    }


@pytest.mark.parametrize(("action", "option"), OPTIONS, ids=[option for _, option in OPTIONS])
def test_every_run_option_passes_through_nox(action, option, value_options):
    """Each option, in each form it has, then a bare word: the option arrives intact and the
    word as a filter, and `runner run` parses the result to the option's value."""
    if action.nargs == 0:
        forms = [[option]]
    else:  # "7" is a bare word: were it not taken as the value, it would turn into a filter
        forms = [[option, "7"]] + ([[f"{option}=7"]] if option.startswith("--") else [])
    for form in forms:
        args = NOXFILE._filters_and_options([*form, "backend=wgpu"], value_options)
        assert args == [*form, "--filter", "backend=wgpu"]
        parsed = build_parser().parse_args(["run", "suites", *args])
        value = getattr(parsed, action.dest)
        if action.nargs == 0:
            assert value == action.const
        else:
            want = action.type("7") if action.type else "7"
            assert value == want or want in value
        assert "backend=wgpu" in parsed.filter


class _Session:
    """Just what the regress session asks of nox, recording the commands it runs."""

    def __init__(self, posargs: list[str], runner_exit: int, venv: Path):
        self.posargs, self.runner_exit, self.commands = posargs, runner_exit, []
        self.virtualenv = SimpleNamespace(location=str(venv))

    def run(self, *args: str, silent: bool = False, **kwargs) -> str | bool:
        self.commands.append(args)
        if args[:2] == ("python", "-c"):
            return json.dumps(sorted(_value_options())) + "\n" if silent else True
        if args[:3] == ("python", "-m", "runner") and self.runner_exit:
            failed = nox.command.CommandFailed(f"Returned code {self.runner_exit}")
            failed.return_code = self.runner_exit
            raise failed
        return True

    def install(self, *args: str) -> None:
        self.commands.append(("install", *args))

    def warn(self, message: str) -> None:
        pass


@pytest.mark.parametrize("code", [1, 2, 5])
def test_the_regress_session_exits_with_the_runners_code(tmp_path, code):
    """nox ends any failed session with 1; `regress` says 5 for "no cases selected" as the
    runner does, and every other code too."""
    session = _Session(["--run-timeout", "600", "no-such-case"], code, tmp_path)
    with pytest.raises(SystemExit) as stopped:
        NOXFILE.regress(session)
    assert stopped.value.code == code
    assert session.commands[-1] == (
        "python",
        "-m",
        "runner",
        "run",
        "suites",
        "--report",
        "--run-timeout",
        "600",
        "--filter",
        "no-such-case",
    )


def test_the_real_session_runs_the_heavy_real_suite_into_its_own_reports(tmp_path):
    """`nox -s real`: suites/real.yaml is tagged heavy (out of `regress`), so the session asks
    for the tag; its reports go beside the main job's, not over them."""
    session = _Session(["backend=wgpu"], 1, tmp_path)
    with pytest.raises(SystemExit) as stopped:
        NOXFILE.real(session)
    assert stopped.value.code == 1
    assert session.commands[-1] == (
        "python",
        "-m",
        "runner",
        "run",
        "suites/real.yaml",
        "--tag",
        "heavy",
        "--out",
        "reports/real",
        "--report",
        "--filter",
        "backend=wgpu",
    )
