"""Pyodide, in which a repro bundle's page runs the suite's judge (``runner.scenario.bundled``):
the page needs no second judge in JavaScript, and no Python on the reader's machine.

By default the page imports Pyodide from the CDN that serves every npm version; ``--local``
copies the files of its core (the interpreter and the standard library: the judge needs no
other package) into the bundle's ``pyodide/``, from the npm package pinned in ``pyodide/``
beside this module and installed once into the cache.
"""

from __future__ import annotations

import json
from pathlib import Path

from runner.backends.ortweb.package import CDN, npm_package
from runner.files import cache_root

PACKAGE = "pyodide"
PIN = Path(__file__).with_name("pyodide")  # package.json + package-lock.json
# The core: the loader, the interpreter and its standard library, the lock file it reads first.
CORE = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip")
CORE_LOCK = "pyodide-lock.json"


def pinned_version() -> str:
    return json.loads((PIN / "package.json").read_text())["dependencies"][PACKAGE]


def published_url() -> str:
    """The folder the CDN serves the pinned version's files from."""
    return f"{CDN}/{PACKAGE}@{pinned_version()}/"


def core_files() -> dict[str, Path]:
    """The pinned version's core files, by name; installed into the cache first if needed."""
    version = pinned_version()
    folder = npm_package(PACKAGE, version, cache_root() / PACKAGE / version, PIN)
    return {name: folder / name for name in (*CORE, CORE_LOCK)}
