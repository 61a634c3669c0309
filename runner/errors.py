"""Exit codes and the errors that map onto them.

Every user-facing failure ends in one of these exit codes (documented in docs/ci.md); the CLI
turns the exceptions below into messages, never tracebacks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


class ExitCode(enum.IntEnum):
    OK = 0  # every verdict as expected
    UNEXPECTED = 1  # some verdict unexpected (including an unexpected pass)
    INVALID_INPUT = 2  # a suite, model or argument is wrong
    ENVIRONMENT = 3  # no adapter, no browser: the machine cannot run the suite
    NO_CASES = 5  # no case selected (pytest's "no tests collected"): never a silent green
    INTERRUPTED = 130  # Ctrl-C / SIGTERM; finished results are kept


@dataclass(frozen=True)
class Problem:
    """One mistake in an input file, located at a line and column (1-based)."""

    file: Path | str
    line: int
    column: int
    message: str
    expected: str = ""

    def __str__(self) -> str:
        text = f"{self.file}:{self.line}:{self.column}: {self.message}"
        return f"{text}; expected {self.expected}" if self.expected else text


class InvalidInput(Exception):
    """Input the user must fix: carries every problem found, so all are reported at once."""

    def __init__(self, problems: list[Problem | str] | Problem | str):
        if isinstance(problems, (Problem, str)):
            problems = [problems]
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class EnvironmentUnusable(Exception):
    """The machine lacks what a backend needs (no adapter, no browser); says how to fix it."""
