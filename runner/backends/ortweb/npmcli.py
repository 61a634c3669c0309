"""Running npm, the one way the ort-web backend talks to the npm registry."""

from __future__ import annotations

import shutil
import subprocess

from runner.errors import EnvironmentUnusable

NPM_TIMEOUT_S = 600.0  # an install downloads about 40 MB


def npm(*args: str) -> str:
    """npm's standard output; EnvironmentUnusable with npm's own message when it fails."""
    executable = shutil.which("npm")
    if executable is None:
        raise EnvironmentUnusable(
            "npm is not installed: onnxruntime-web versions come from the npm registry "
            "(install Node.js with npm, e.g. apt-get install nodejs npm)"
        )
    try:
        done = subprocess.run(
            [executable, *args], capture_output=True, text=True, timeout=NPM_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentUnusable(f"npm {args[0]} gave no answer in {NPM_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("npm error")]
        message = " ".join(errors) or done.stderr.strip() or f"exit status {done.returncode}"
        raise EnvironmentUnusable(f"npm {' '.join(args[:2])} failed: {message}")
    return done.stdout
