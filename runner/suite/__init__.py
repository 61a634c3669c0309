"""Step 1: load and validate suites (see ``loader``); the values are in ``spec``."""

from runner.suite.loader import discover, load_suite, load_suites

__all__ = ["discover", "load_suite", "load_suites"]
