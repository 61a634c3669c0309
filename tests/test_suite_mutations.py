"""Every bundled suite, heavy ones too, broken the ways a hand or a merge breaks a file: `validate
FILE` refuses each break with exit 2 at the broken line, and no traceback.

The breaks: an unknown key in every mapping, every list emptied, a value of the wrong type in
every field, numbers with no sane use (2^40, -2^40, 1e39, NaN, infinity) in every numeric field,
a model or data file it names missing or corrupt, a package file its wheel does not hold. A
package whose wheel no fetch has listed yet cannot be checked from files alone: there `validate`
says it is unchecked, at the same line, and nothing is "ok" about it.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner import cli
from runner.packages import PackageFile, materialize
from runner.suite.yamlpos import load_located, walk

from .conftest import REPO

SUITES = sorted((REPO / "suites").rglob("*.yaml"))
ABSURD = (2**40, -(2**40), 1e39, float("nan"), float("inf"))


@dataclass(frozen=True)
class Mutation:
    path: tuple  # where in the suite's data
    kind: str
    data: Any  # the whole suite, broken there
    key: bool = False  # the problem is at the key itself (an unknown key)


def _with(data: Any, path: tuple, value: Any) -> Any:
    """A copy of `data` with `value` at `path`."""
    data = copy.deepcopy(data)
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return data


def _kind_of_place(path: tuple) -> tuple:
    """A place as the schema sees it: list items, models and scenarios alike."""
    return tuple("*" if isinstance(p, int) or (i == 1 and path[0] == "models") else p
                 for i, p in enumerate(path))  # fmt: skip


def mutations(data: dict) -> Iterator[Mutation]:
    """Each break once per kind of place (the 16 tokens of a prompt are one place)."""
    seen = set()
    for path, node in walk(data):
        if (_kind_of_place(path), type(node)) in seen:
            continue
        seen.add((_kind_of_place(path), type(node)))
        if isinstance(node, dict):
            unknown = (*path, "zz_unknown")
            yield Mutation(unknown, "unknown key", _with(data, unknown, 1), key=True)
        if not path:
            continue
        if isinstance(node, list):
            yield Mutation(path, "emptied", _with(data, path, []))
        # a type no alternative of the field takes (a version or a tag may be any word)
        wrong = {"zz_unknown": 1} if isinstance(node, (list, str)) else "twelve"
        yield Mutation(path, f"wrong type {wrong!r}", _with(data, path, wrong))
        if isinstance(node, (int, float)) and not isinstance(node, bool):
            for number in ABSURD:
                yield Mutation(path, f"absurd {number}", _with(data, path, number))


@pytest.fixture(scope="module")
def copied(tmp_path_factory) -> Path:
    """The bundled suites in a repository of their own, to break one file at a time."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPO / "suites", root / "suites")
    shutil.copytree(REPO / "tests/data/optests", root / "tests/data/optests")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def validate(path: Path, capsys) -> tuple[int, str]:
    code = cli.main(["validate", str(path)])
    out = capsys.readouterr()
    return code, out.out + out.err


def dumped(data: dict) -> str:
    """YAML text of `data` through libyaml, where PyYAML has it (the Python emitter took half
    this module's time)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, sort_keys=False)


def refused_at(code: int, output: str, where: str) -> bool:
    return code == 2 and where in output and "Traceback" not in output


@pytest.mark.parametrize("suite", SUITES, ids=lambda p: str(p.relative_to(REPO / "suites")))
def test_every_break_of_a_bundled_suite_is_refused_at_its_line(suite, copied, capsys):
    target = copied / suite.relative_to(REPO)
    original = target.read_text()
    code, output = validate(target, capsys)
    assert code == 0, output  # as bundled
    missed = []
    try:
        for mutation in mutations(yaml.safe_load(original)):
            target.write_text(dumped(mutation.data))
            located, _ = load_located(target)
            line, _ = located.where(mutation.path, key=mutation.key)
            code, output = validate(target, capsys)
            if refused_at(code, output, f"{target}:{line}:"):
                continue
            if unfetched_package(mutation.path, mutation.data):  # its dims are in its file
                package_line, _ = located.where(mutation.path[:2] + ("package",))
                if code == 0 and f"note: {target}:{package_line}:" in output:
                    continue
            missed.append(f"{mutation.kind} at {mutation.path} (line {line}): exit {code}, "
                              f"{output.strip().splitlines()[-1:]}")  # fmt: skip
    finally:
        target.write_text(original)
    assert not missed, f"{len(missed)} breaks validated:\n" + "\n".join(missed)


def unfetched_package(path: tuple, data: dict) -> bool:
    """Whether `path` is in the `shapes:` of a package model not in the cache yet."""
    if path[:1] != ("models",) or "shapes" not in path:
        return False
    spec = data["models"][path[1]].get("package")
    return spec is not None and package_source(spec).wheel_files() is None


def package_source(spec: dict) -> PackageFile:
    fields = ("name", "version", "file", "sha256", "license")
    return PackageFile(*(spec[key] for key in fields), export=spec.get("export"))


def named_files(suite: Path) -> Iterator[tuple[tuple, Path]]:
    """The files a suite names, each with where it names it: models and `npy:` inputs."""
    located, _ = load_located(suite)
    for path, node in walk(located.data):
        if path and path[-1] in ("path", "npy") and isinstance(node, str):
            yield path, (suite.parent / node).resolve()


@pytest.mark.parametrize(
    "suite",
    [s for s in SUITES if any(named_files(s))],
    ids=lambda p: str(p.relative_to(REPO / "suites")),
)
def test_a_missing_or_corrupt_file_a_suite_names_is_refused_at_its_line(suite, copied, capsys):
    target = copied / suite.relative_to(REPO)
    located, _ = load_located(target)
    for path, file in named_files(target):
        line, _ = located.where(path)
        kept = file.read_bytes()
        try:
            file.unlink()
            code, output = validate(target, capsys)
            assert refused_at(code, output, f"{target}:{line}:"), (path, "missing", output)
            if file.suffix == ".onnx":
                file.write_bytes(b"\x08\xff not an onnx model")
                code, output = validate(target, capsys)
                assert refused_at(code, output, f"{target}:{line}:"), (path, "corrupt", output)
        finally:
            file.write_bytes(kept)


def package_entries(suite: Path) -> Iterator[tuple[tuple, dict]]:
    located, _ = load_located(suite)
    for name, spec in located.data.get("models", {}).items():
        if "package" in spec:
            yield ("models", name, "package"), spec["package"]


PACKAGED = [s for s in SUITES if any(package_entries(s))]


@pytest.fixture(scope="module")
def silero_listed() -> PackageFile:
    """Silero VAD's wheel (the smallest bundled package, 3 MB) fetched for real, so that its
    listing is in the cache."""
    [spec] = {
        spec["name"]: spec for s in PACKAGED for _, spec in package_entries(s)
        if spec["name"] == "silero-vad"
    }.values()  # fmt: skip
    source = package_source(spec)
    materialize(source, lambda _: None)
    assert source.wheel_files() is not None
    return source


@pytest.mark.parametrize("suite", PACKAGED, ids=lambda p: str(p.relative_to(REPO / "suites")))
def test_a_package_file_its_wheel_lacks_is_refused_once_listed_else_unchecked(
    suite, copied, capsys, silero_listed
):
    target = copied / suite.relative_to(REPO)
    original = target.read_text()
    data = yaml.safe_load(original)
    try:
        for path, spec in package_entries(target):
            # silero's listing is always in the cache; another package's once a run fetched it
            listed = package_source(spec).wheel_files() is not None
            for key, value in (("file", "no/such/model.onnx"), ("sha256", "0" * 64)):
                target.write_text(dumped(_with(data, (*path, key), value)))
                located, _ = load_located(target)
                code, output = validate(target, capsys)
                if listed:
                    line, _ = located.where((*path, key))
                    assert refused_at(code, output, f"{target}:{line}:"), (path, key, output)
                else:
                    line, _ = located.where(path)
                    note = f"note: {target}:{line}:"
                    assert code == 0 and note in output and "was not checked" in output, output
                    [summary] = [s for s in output.splitlines() if not s.startswith("note: ")]
                    assert "unchecked" in summary and not summary.startswith("ok"), output
    finally:
        target.write_text(original)
