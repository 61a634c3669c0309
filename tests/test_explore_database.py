"""explore's shared example databases: two processes writing one folder at once lose nothing;
a folder of a newer format, someone else's or an unreadable one is refused (exit 2, the path
and what is expected said) with nothing written. Replaying another job's database:
tests/test_explore_report.py, over its explores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase

from runner.cli import main
from runner.errors import ExitCode
from runner.explore import database

from .conftest import REPO

SUITE = """name: explore-tiny
models:
  enc: {builtin: encoder, layers: 1, hidden: 32, heads: 4, ffn: 64}
shapes: [{batch: 1, sequence: 8}]
backends: [wgpu]
"""
# Each writer, per key of its own sequence: a value saved and deleted (the key's folder then
# empty: Hypothesis's own database removes it), then a value kept. The other writer doing the
# same to the same key at the same time is what loses a kept value in DirectoryBasedExampleDatabase
# (its save renames into a folder the other's delete has just removed): 45 of 6000 here.
WRITER = """
import sys
from pathlib import Path
from runner.explore.database import SharedDirectoryDatabase
root, me, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
db = SharedDirectoryDatabase(root / "wgpu-000000000000", root)
for i in range(n):
    key = f"k{i}".encode()
    db.save(key, f"{me}-churn-{i}".encode())
    db.delete(key, f"{me}-churn-{i}".encode())
    db.save(key, f"{me}-kept-{i}".encode())
"""


def test_two_processes_writing_one_shared_database_lose_nothing(tmp_path):
    root, n = tmp_path / "shared", 1000
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(root), me, str(n)], env=env)
        for me in ("A", "B")
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    read = DirectoryBasedExampleDatabase(root / "wgpu-000000000000")
    lost = [
        (i, me)
        for i in range(n)
        for me in "AB"
        if f"{me}-kept-{i}".encode() not in set(read.fetch(f"k{i}".encode()))
    ]
    assert lost == []
    churned = [i for i in range(n) for v in read.fetch(f"k{i}".encode()) if b"churn" in v]
    assert churned == []  # every delete held
    assert not list((root / database.TEMPORARY).iterdir())  # no half-written value left
    marker = json.loads((root / database.MARKER).read_text())
    assert marker["format"] == database.FORMAT and marker["kind"] == database.KIND


def _explore(suite: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["explore", str(suite), "--backend", "wgpu", "--out", str(tmp_path / "found"), *extra]


def _snapshot(folder: Path) -> dict[str, bytes]:
    if folder.is_file():
        return {folder.name: folder.read_bytes()}
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _marker(format_: int, kind: str = database.KIND) -> str:
    return json.dumps({"kind": kind, "format": format_})


@pytest.mark.parametrize(
    ("option", "contents", "message"),
    [
        (
            "--database",
            {database.MARKER: _marker(2), "wgpu-0123456789ab/x": "1"},
            "DB: example databases in format 2; this runner reads formats 1 to 1: use the newer "
            "webgpu-capture-regress that wrote them, or another folder",
        ),
        (
            "--replay-from",
            {database.MARKER: _marker(3)},
            "DB: example databases in format 3; this runner reads formats 1 to 1",
        ),
        (
            "--database",
            {"notes.txt": "mine", "wgpu-0123456789ab/x": "1"},
            "DB: not explore's example databases (it holds notes.txt); expected an empty or new "
            "folder, or one explore wrote (holding explore-database.json of format 1 to 1, and a "
            "folder TARGET-HASH per target)",
        ),
        (
            "--database",
            {database.MARKER: "{not json"},
            "DB/explore-database.json: not JSON; expected an empty or new folder",
        ),
        (
            "--database",
            {database.MARKER: _marker(1, kind="someone else's")},
            "DB/explore-database.json: not explore's marker; expected",
        ),
        ("--database", "a file", "DB: not a folder; expected an empty or new folder"),
        ("--replay-from", None, "DB: no such folder; expected an empty or new folder"),
    ],
)
def test_a_database_folder_it_must_not_use_exits_2_and_is_left_as_it_was(
    tmp_path, monkeypatch, capsys, option, contents, message
):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    folder = tmp_path / "DB"
    if isinstance(contents, str):
        folder.write_text(contents)
    for name, text in (contents or {}).items() if isinstance(contents, dict) else ():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    before = _snapshot(folder) if folder.exists() else None
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path / "cache"))
    code = main(_explore(suite, tmp_path, option, str(folder), "--budget", "1h"))
    assert code == ExitCode.INVALID_INPUT == 2
    assert message.replace("DB", str(folder)) in capsys.readouterr().err
    assert (_snapshot(folder) if folder.exists() else None) == before  # nothing written
    assert not (tmp_path / "found").exists()
    assert not (tmp_path / "cache").exists()


def test_a_folder_from_before_the_marker_is_used_and_marked(tmp_path):
    """The cache's databases from before this change: TARGET-HASH folders (and the ops each
    target lacks)."""
    root = tmp_path / "explore"
    (root / "wgpu-0123456789ab" / "abcdef0123456789").mkdir(parents=True)
    (root / "lacking").mkdir()  # the ops each target lacks, kept beside them
    (root / "lacking" / "wgpu.json").write_text("{}")
    database.check(root)
    shared = database.example_database(root, "wgpu-0123456789ab")
    shared.save(b"key", b"value")
    assert list(shared.fetch(b"key")) == [b"value"]
    assert json.loads((root / database.MARKER).read_text())["format"] == 1
