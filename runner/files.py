"""Files written whole: to a temporary file beside the target, then renamed over it, so a reader
(or a run killed mid-write) never sees half of one.

Temporary files and folders are created with the modes any tool gives (0666 and 0777 less the
user's umask), not ``tempfile``'s private 0600 and 0700: what is renamed into place keeps its
mode, and a published report or a shared cache must be readable by others."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def _temporary_name(parent: Path, prefix: str, suffix: str = "") -> Path:
    return parent / f"{prefix}{secrets.token_hex(6)}{suffix}"


def make_temporary_folder(parent: Path, prefix: str) -> Path:
    """A new, empty folder in `parent` (mode 0777 less the umask), to be renamed into place."""
    parent.mkdir(parents=True, exist_ok=True)
    while True:
        folder = _temporary_name(parent, prefix)
        try:
            folder.mkdir(0o777)
            return folder
        except FileExistsError:
            continue


def write_atomic(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = _temporary_name(path.parent, f".{path.name}.", ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


CACHE_ENV = "REGRESS_CACHE_DIR"


def cache_root() -> Path:
    """Where the tool keeps what it downloads (onnxruntime-web versions, package models):
    ``$REGRESS_CACHE_DIR``; else ``.cache/`` of the checkout the runner runs from; else the
    user's cache folder (an installed package has no checkout)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file() and (checkout / "runner").is_dir():
        return checkout / ".cache"
    user = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(user) / "webgpu-capture-regress"
