"""What a run records about the machine: versions and the suites' commit, for ``run.json``."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_commit(folder: Path) -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(folder), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def base_environment(suite_paths: list[Path]) -> dict[str, Any]:
    """The machine, the suites' commit, onnxruntime (the oracle) and onnx; the pipeline adds
    what each backend prepared."""
    folders = sorted({str(p.parent) for p in suite_paths})
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "onnxruntime": package_version("onnxruntime"),
        "onnx": package_version("onnx"),
        "suites_git": git_commit(Path(folders[0])) if folders else None,
    }
