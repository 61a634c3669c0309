"""Files the runner writes take the user's umask, as any other tool's do, and stay atomic."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from runner.files import make_temporary_folder, write_atomic

from .conftest import REPO

SUITE = """
name: modes
models:
  enc: {builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}
shapes:
  - {batch: 1, sequence: 8}
backends: [reference]
"""


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_writes_and_staging_folders_follow_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        written = write_atomic(tmp_path / "a" / "file.txt", b"whole")
        staging = make_temporary_folder(tmp_path / "cache", ".1.30.0.")
        os.umask(0o077)
        private = write_atomic(tmp_path / "private.txt", b"mine")
    finally:
        os.umask(previous)
    assert written.read_bytes() == b"whole" and _mode(written) == 0o644
    assert _mode(staging) == 0o755 and staging.parent == tmp_path / "cache"
    assert staging.name.startswith(".1.30.0.") and not any(staging.iterdir())
    assert _mode(private) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "cache", "private.txt"]


def test_a_published_report_is_readable_by_others_under_umask_022(write_suite, tmp_path):
    suite = write_suite(SUITE)
    out = tmp_path / "reports"
    script = "import os, sys; os.umask(0o022); from runner.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", script, "run", str(suite), "--out", str(out), "--runs", "1",
         "--report"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [run_dir] = (out / "runs").iterdir()
    files = [out / name for name in ("index.html", "data.js", "junit.xml", "summary.md")]
    files += [out / "history.sqlite", run_dir / "run.json", run_dir / "results.jsonl"]
    files += [p for p in (out / ".oracle").rglob("*") if p.is_file()]
    assert {str(f.relative_to(out)): oct(_mode(f)) for f in files} == {
        str(f.relative_to(out)): oct(0o644) for f in files
    }
    folders = [out, out / "runs", run_dir, out / ".oracle"]
    assert {str(f): oct(_mode(f)) for f in folders} == {str(f): oct(0o755) for f in folders}
