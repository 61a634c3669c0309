"""Load suite files: safe YAML -> JSON Schema (``schema``) -> checks the schema cannot express
(``builder``) -> ``Suite``.

Every problem in a file is collected and raised at once as ``InvalidInput``, each located at
``FILE:LINE:COL``; nothing here runs a model or touches a device, and nothing asks a registry
or the network: loading reads files only (versions only a registry can resolve are left for
``runner.backends.resolve_targets``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from runner.errors import InvalidInput, Problem
from runner.suite.builder import SuiteBuilder
from runner.suite.schema import schema_problems
from runner.suite.spec import Suite, TargetParser
from runner.suite.yamlpos import load_located


def discover(paths: Iterable[Path]) -> list[tuple[Path, bool]]:
    """Suite files named by `paths`, each with whether it was named itself: files as given,
    folders searched for *.yaml / *.yml."""
    found: dict[Path, tuple[Path, bool]] = {}  # by where it resolves: each file once
    for path in paths:
        if path.is_dir():
            for file in sorted(path.rglob("*")):
                if file.suffix in (".yaml", ".yml"):
                    found.setdefault(file.resolve(), (file, False))
        else:
            found[path.resolve()] = (path, True)
    return list(found.values())


def load_suites(
    paths: Iterable[Path], backends: Mapping[str, TargetParser], tags: Iterable[str] = ()
) -> list[Suite]:
    """Every suite under `paths`, its ``backends:`` entries parsed by `backends` (the registry's
    descriptors, by name). A folder yields its suites tagged `heavy` only if `tags` asks for
    them; a file named itself is loaded whatever its tags.

    Raises InvalidInput with the problems of all files together.
    """
    suites, problems = [], []
    wanted = set(tags)
    for path, named in discover(paths):
        try:
            suite = load_suite(path, backends)
        except InvalidInput as exc:
            problems += exc.problems
            continue
        if named or "heavy" not in suite.tags or "heavy" in wanted:
            suites.append(suite)
    if problems:
        raise InvalidInput(problems)
    return suites


def load_suite(path: Path, backends: Mapping[str, TargetParser]) -> Suite:
    if not path.is_file():
        raise InvalidInput(Problem(path, 1, 1, "no such suite file", "a YAML file"))
    located, yaml_problems = load_located(path)
    problems = [Problem(path, p.line, p.column, p.message, p.expected) for p in yaml_problems]
    if problems:
        raise InvalidInput(problems)
    if not isinstance(located.data, dict):
        raise InvalidInput(Problem(path, 1, 1, "suite is not a mapping", "keys such as models:"))
    problems = schema_problems(located)
    if problems:
        raise InvalidInput(problems)
    return SuiteBuilder(located, backends).build()
