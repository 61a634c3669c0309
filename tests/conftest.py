"""Shared fixtures: suite files written on the fly, and a repository root for path checks."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
