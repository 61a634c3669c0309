"""Explore's example databases: a folder of Hypothesis databases (one per target, faults and
models, ``database_folder``) that many explores share, read-only ones they replay from, and
the database one pass of an explore sees (``PassDatabase``).

A campaign shares one such folder between jobs (``--database``) and replays others, e.g. a CI
artifact downloaded from an earlier run (``--replay-from``), composed with what Hypothesis ships:
``MultiplexedDatabase(shared, ReadOnlyDatabase(replayed), ...)``. Hypothesis's
``DirectoryBasedExampleDatabase`` can lose an entry when two processes write one folder at once
(a save into a key folder another's delete has just removed; a value written in place, half
readable, when the system's temporary folder is on another file system), so the writable one
is ``SharedDirectoryDatabase``. A folder carries a marker (``explore-database.json``, its
format) written with its first entry: a newer, foreign or unreadable folder is refused (exit 2)
before anything is read or written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import hypothesis
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

from runner.errors import InvalidInput
from runner.files import write_atomic

if TYPE_CHECKING:
    from runner.explore.space import Space

FORMAT = 1  # of the folder's layout: the newest this runner reads and the one it writes
MARKER = "explore-database.json"
KIND = "webgpu-capture-regress explore example databases"
TEMPORARY = ".tmp"  # where values are written before they are renamed into place
# What else the cache's folder of databases holds: the ops each target lacks (explore.space)
LACKING = "lacking"
# What a folder from before the marker holds: only databases named TARGET-HASH
_UNMARKED_ENTRY = re.compile(r".+-[0-9a-f]{12}")
EXPECTED = (
    f"expected an empty or new folder, or one explore wrote (holding {MARKER} of format 1 to "
    f"{FORMAT}, and a folder TARGET-HASH per target)"
)


class SharedDirectoryDatabase(DirectoryBasedExampleDatabase):
    """Hypothesis's directory database, safe when several processes write it at once: a value is
    written in the folder's own temporary folder (same file system) and renamed into place, a
    save retries when a key folder vanished under it, and nothing removes a key folder (an
    empty one costs nothing; removing it races another's save)."""

    def __init__(self, path: Path, root: Path):
        super().__init__(path)
        self.root = root  # the folder of databases, where the marker goes

    def _ensure_directory_exists(self) -> None:
        if not self._ensure_directory_exists_called:
            stamp(self.root)
        super()._ensure_directory_exists()

    def save(self, key: bytes, value: bytes) -> None:
        key_path = self._key_path(key)
        if key_path.name != self._metakeys_hash:
            self.save(self._metakeys_name, key)
        self._ensure_directory_exists()
        path = self._value_path(key, value)
        if path.exists():
            return
        temporary = self.root / TEMPORARY
        temporary.mkdir(exist_ok=True)
        tmp = temporary / f"{path.name}.{secrets.token_hex(6)}"
        tmp.write_bytes(value)
        try:
            for _ in range(10):  # a key folder removed by an older runner's delete: again
                key_path.mkdir(parents=True, exist_ok=True)
                try:
                    os.replace(tmp, path)
                    return
                except FileNotFoundError:
                    continue
        finally:
            tmp.unlink(missing_ok=True)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        if src != dest:  # os.renames (Hypothesis's) also prunes the emptied source folder
            self.save(dest, value)
            self.delete(src, value)
        else:
            self.save(src, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self._value_path(key, value).unlink(missing_ok=True)


def example_database(root: Path, name: str, replay_from: Iterable[Path] = ()) -> ExampleDatabase:
    """The database `name` (a target's) in `root`, written, with the same one in each
    `replay_from` folder replayed, never written; each folder checked first."""
    check(root)
    shared: ExampleDatabase = SharedDirectoryDatabase(root / name, root)
    replayed = []
    for folder in replay_from:
        check(folder, must_exist=True)
        replayed.append(ReadOnlyDatabase(DirectoryBasedExampleDatabase(folder / name)))
    return MultiplexedDatabase(shared, *replayed) if replayed else shared


def check(root: Path, must_exist: bool = False) -> None:
    """Refuse (InvalidInput, exit 2) a folder of databases this runner must not read or write:
    one written in a newer format, someone else's, or one it cannot read."""
    if not root.exists():
        if must_exist:
            raise InvalidInput(f"{root}: no such folder; {EXPECTED}")
        return
    if not root.is_dir():
        raise InvalidInput(f"{root}: not a folder; {EXPECTED}")
    try:
        entries = os.listdir(root)
        marker = (root / MARKER).read_text() if MARKER in entries else None
    except OSError as exc:
        raise InvalidInput(f"{root}: cannot be read ({exc.strerror}); {EXPECTED}") from None
    if marker is None:
        foreign = [
            e
            for e in entries
            if e not in (TEMPORARY, LACKING)
            and not (_UNMARKED_ENTRY.fullmatch(e) and (root / e).is_dir())
        ]
        if foreign:  # a folder from before the marker holds databases only
            held = ", ".join(sorted(foreign)[:3]) + (", ..." if len(foreign) > 3 else "")
            raise InvalidInput(
                f"{root}: not explore's example databases (it holds {held}); {EXPECTED}"
            )
        return
    try:
        data = json.loads(marker)
    except ValueError:
        raise InvalidInput(f"{root / MARKER}: not JSON; {EXPECTED}") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise InvalidInput(f"{root / MARKER}: not explore's marker; {EXPECTED}")
    found = data.get("format")
    if not isinstance(found, int) or isinstance(found, bool) or not 1 <= found <= FORMAT:
        raise InvalidInput(
            f"{root}: example databases in format {found}; this runner reads formats 1 to "
            f"{FORMAT}: use the newer webgpu-capture-regress that wrote them, or another folder"
        )


def stamp(root: Path) -> None:
    """Write `root`'s marker if it has none (with the folder's first entry)."""
    marker = root / MARKER
    if not marker.exists():
        data = {"kind": KIND, "format": FORMAT, "hypothesis": hypothesis.__version__}
        write_atomic(marker, (json.dumps(data, indent=2) + "\n").encode())


def merge_folders(
    out: Path, written: Iterable[Path], previous: Iterable[Path], ran: Iterable[str]
) -> Path:
    """The next campaign's folder of databases, in `out`: every database the jobs wrote
    (`written`: their examples unioned; a value is a file named by its hash, so two copies never
    conflict), and each of `previous`'s that no job ran (`ran`: the names their records give),
    as it was. One a job ran is not carried over from `previous`: what no longer failed there,
    Hypothesis did not save again, and it stays dropped."""
    written, previous, ran = list(written), list(previous), set(ran)
    for folder in [*written, *previous]:
        check(folder, must_exist=True)
    check(out)
    carried = {}
    for folder in previous:
        for entry in sorted(folder.iterdir()):
            if entry.is_dir() and _UNMARKED_ENTRY.fullmatch(entry.name) and entry.name not in ran:
                carried.setdefault(entry.name, []).append(entry)
    for folder in written:
        for entry in sorted(folder.iterdir()):
            if entry.is_dir() and _UNMARKED_ENTRY.fullmatch(entry.name):
                carried.setdefault(entry.name, []).append(entry)
    out.mkdir(parents=True, exist_ok=True)
    stamp(out)
    for name, sources in carried.items():
        for source in sources:
            shutil.copytree(source, out / name, dirs_exist_ok=True)
    return out


class Interruption(BaseException):
    """What explore raises to stop a pass: not an ``Exception``, so Hypothesis lets it through
    (after saving the interrupted example, which ``PassDatabase`` drops)."""


class PassDatabase(ExampleDatabase):
    """The example database as one pass sees it. Hypothesis saves every example that raised a
    ``BaseException``, to replay it first next time; an example explore interrupted
    (``Interruption``: the budget spent, scenarios skipped) did not fail, and would waste the
    next explore's first example (or all of a short budget) replaying it, so it is not saved.
    A later pass (`keep_fetched`) never deletes what it was handed either: it treats those
    known failures as passing, which must not read as fixed. A pass whose models start with
    an op of their own keeps its examples under keys of their own (`first`): a choice sequence
    means a model only under the same first op."""

    def __init__(self, inner: ExampleDatabase, keep_fetched: bool = False, first: str = ""):
        super().__init__()
        self.inner, self.keep_fetched = inner, keep_fetched
        self.prefix = f"{first}:".encode() if first else b""
        self.fetched: set[tuple[bytes, bytes]] = set()

    def fetch(self, key: bytes) -> Iterable[bytes]:
        for value in self.inner.fetch(self.prefix + key):
            self.fetched.add((self.prefix + key, value))
            yield value

    def save(self, key: bytes, value: bytes) -> None:
        # Hypothesis saves an interrupted example while handling the interruption
        if not isinstance(sys.exc_info()[1], Interruption):
            self.inner.save(self.prefix + key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        if not (self.keep_fetched and (self.prefix + key, value) in self.fetched):
            self.inner.delete(self.prefix + key, value)


def database_folder(space: Space, inject: frozenset[str], root: Path) -> Path:
    """One example database per target, faults and models: a choice sequence means a scenario
    only over the same models and steps."""
    models = space.source.key()
    text = repr((space.target.id, space.target.version, sorted(inject), models, space.actions))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return root / f"{space.target.id.replace(':', '-')}-{digest}"
