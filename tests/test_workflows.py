"""The example workflows pass zizmor's audits: every action pinned by commit, no checkout's
credentials left in a workspace that is uploaded, no template expanded into a shell, the least
permissions per job (``nox -s lint`` runs the same)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO


def test_the_workflows_have_no_zizmor_finding():
    zizmor = shutil.which("zizmor")
    if zizmor is None:
        pytest.fail("zizmor is not installed: pip install -e '.[test]'")
    audit = subprocess.run(
        [zizmor, "--offline", "--format=plain", ".github/workflows/"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "No findings to report" in audit.stdout + audit.stderr
