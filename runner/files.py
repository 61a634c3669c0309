"""Files written whole: to a temporary file beside the target, then renamed over it, so a reader
(or a run killed mid-write) never sees half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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
    """Where the tool keeps what it downloads (onnxruntime-web versions): ``$REGRESS_CACHE_DIR``;
    else ``.cache/`` of the checkout the runner runs from; else the user's cache folder (an
    installed package has no checkout)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file() and (checkout / "runner").is_dir():
        return checkout / ".cache"
    user = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(user) / "webgpu-capture-regress"
