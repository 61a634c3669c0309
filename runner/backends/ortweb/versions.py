"""onnxruntime-web versions: what npm publishes, in version order, and what a suite's
``version:`` names (an exact version, an npm dist-tag, ``dev``, ``pinned``, or a local build
folder).

npm's answer (versions and dist-tags) is asked once per process and kept in the cache folder, so
that a run whose versions are all installed needs no network: an exact version already in the
cache is taken as it is, and a dist-tag falls back to npm's last answer when npm is unreachable
(the resolution says so). Order is semver's: a dev build (``1.31.0-dev.20260914-8d85527a0``)
comes before its release, whatever npm's publish times say.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from runner.backends.base import ResolvedVersion, VersionProblem
from runner.backends.ortweb.npmcli import npm
from runner.backends.ortweb.package import (
    OPSETS,
    PACKAGE,
    OrtWebPackage,
    pinned_version,
    versions_folder,
)
from runner.errors import EnvironmentUnusable
from runner.files import write_atomic

REPOSITORY = "https://github.com/microsoft/onnxruntime"
DEV = "dev"  # npm's `dev` tag where it exists, else the newest published dev build
PINNED = "pinned"  # the version runner/backends/ortweb/npm/package.json pins
LOCAL = "local"  # how case ids name a local build folder
_DEV_COMMIT = re.compile(r"-dev\.\d{8}-([0-9a-f]{7,40})$")
_EXACT = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")  # semver, as npm publishes them
_TAG = re.compile(r"^[A-Za-z][0-9A-Za-z._-]*$")  # npm's dist-tags are words
EXPECTED = (
    "a published version (quoted: '1.24.3'), an npm dist-tag (latest), dev, pinned, or a folder "
    "holding an onnxruntime-web build"
)


def version_key(version: str) -> tuple:
    """Semver order: release numbers, then a pre-release before its release, then the
    pre-release's identifiers (numbers before words, numbers by value)."""
    core, _, pre = version.partition("-")
    numbers = tuple(int(part) if part.isdigit() else 0 for part in core.split("."))
    identifiers = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return numbers, 0 if pre else 1, identifiers if pre else ()


def max_opset(version: str) -> int | None:
    """The newest ai.onnx opset `version` takes (package.OPSETS); None where the table sets no
    limit."""
    lines = [line for line in OPSETS if version_key(line) <= version_key(version)]
    return OPSETS[max(lines, key=version_key)] if lines else None


def is_dev_build(version: str) -> bool:
    return "-dev" in version


def commit_of(version: str) -> str | None:
    """The upstream commit a dev build's version names (``...-dev.20260914-8d85527a0``)."""
    match = _DEV_COMMIT.search(version)
    return match.group(1) if match else None


def git_ref(version: str) -> str:
    """What the upstream repository calls a version: a dev build's commit, a release's tag."""
    return commit_of(version) or f"v{version}"


def compare_url(older: str, newer: str) -> str:
    return f"{REPOSITORY}/compare/{git_ref(older)}...{git_ref(newer)}"


@dataclass(frozen=True)
class Registry:
    """npm's answer about the package: every published version (in version order) and tags."""

    versions: tuple[str, ...]
    tags: dict[str, str]
    fetched: str  # when npm said so (ISO time)
    live: bool  # asked now, not read back from the cache

    def nearest(self, version: str, count: int = 2) -> list[str]:
        """Published versions next to `version` in version order, for an error message."""
        keys = [version_key(v) for v in self.versions]
        at = bisect.bisect_left(keys, version_key(version))
        return list(self.versions[max(0, at - count) : at + count])

    def between(self, older: str, newer: str) -> list[str]:
        """Published versions from `older` to `newer`, both included, in version order."""
        low, high = version_key(older), version_key(newer)
        return [v for v in self.versions if low <= version_key(v) <= high]

    @staticmethod
    def commit(version: str) -> str | None:
        return commit_of(version)

    @staticmethod
    def compare_url(older: str, newer: str) -> str:
        return compare_url(older, newer)


@lru_cache(maxsize=1)
def registry() -> Registry:
    """npm's answer now, or its last answer from the cache when npm is unreachable; raises
    EnvironmentUnusable (npm's message) when neither is there."""
    saved = versions_folder() / "registry.json"
    try:
        answer = json.loads(npm("view", PACKAGE, "versions", "dist-tags", "--json"))
        fetched, live = datetime.now(UTC).isoformat(timespec="seconds"), True
        record = {"versions": answer["versions"], "tags": answer["dist-tags"], "fetched": fetched}
        write_atomic(saved, json.dumps(record, indent=2).encode())
    except EnvironmentUnusable as unreachable:
        try:
            record = json.loads(saved.read_text())
        except (OSError, ValueError):
            raise unreachable from None
        live = False
    ordered = tuple(sorted(record["versions"], key=version_key))
    return Registry(ordered, dict(record["tags"]), record["fetched"], live)


def installed_versions() -> set[str]:
    """Exact versions complete in the cache."""
    folder = versions_folder()
    return {p.parent.name for p in folder.glob("*/.complete")} if folder.is_dir() else set()


def is_folder(text: str) -> bool:
    return text.startswith((".", "/", "~")) or "/" in text or text.startswith("file:")


def resolve(text: str | None, base: Path) -> ResolvedVersion:
    """The version `text` names (None: the pinned one); a folder is relative to `base`. Raises
    VersionProblem, or EnvironmentUnusable when npm must be asked and cannot be."""
    if text is None or text == PINNED:
        pinned = pinned_version()
        return ResolvedVersion(pinned, text or pinned, "pinned in runner/backends/ortweb/npm")
    if is_folder(text):
        return _local(text.removeprefix("file:"), base)
    if text in installed_versions():
        return ResolvedVersion(text, text)
    found = registry()
    source = "npm" if found.live else f"npm's answer of {found.fetched}, npm being unreachable now"
    if text in found.versions:
        return ResolvedVersion(text, text)
    if text in found.tags:
        exact = found.tags[text]
        return ResolvedVersion(exact, text, f"{text} is {exact} ({source})")
    if text == DEV:
        newest = max((v for v in found.versions if is_dev_build(v)), key=version_key)
        return ResolvedVersion(newest, text, f"dev is the newest dev build, {newest} ({source})")
    nearest = ", ".join(found.nearest(text)) or "none"
    raise VersionProblem(
        f"onnxruntime-web {text} is not published (nearest: {nearest})",
        f"a published version, a dist-tag ({', '.join(sorted(found.tags))}), {DEV}, {PINNED}, "
        "or a folder holding an onnxruntime-web build",
    )


def resolve_offline(text: str | None, base: Path) -> ResolvedVersion | None:
    """What `text` names where files alone say (the pin, a folder, an installed version); None
    where only npm can say (a tag, dev, a version not installed). Raises VersionProblem for
    text that cannot name a version at all. Never asks npm: loading and validating suites
    work offline."""
    if text is None or text == PINNED or is_folder(text):
        return resolve(text, base)
    if _EXACT.match(text):
        return ResolvedVersion(text, text) if text in installed_versions() else None
    if _TAG.match(text):
        return None
    raise VersionProblem(f"{text!r} is not an onnxruntime-web version", EXPECTED)


def _local(text: str, base: Path) -> ResolvedVersion:
    """A local build: an unpacked npm tarball, or ``js/web`` of a built onnxruntime checkout."""
    folder = (base / Path(text).expanduser()).resolve()
    expected = "a folder holding package.json (name onnxruntime-web) and dist/ with a build"
    manifest = folder / "package.json"
    if not manifest.is_file():
        raise VersionProblem(f"{folder} has no package.json", expected)
    try:
        name = json.loads(manifest.read_text()).get("name")
    except ValueError:
        name = None
    if name != PACKAGE:
        raise VersionProblem(f"{manifest} is not onnxruntime-web's (name {name!r})", expected)
    if not (folder / "dist").is_dir():
        raise VersionProblem(f"{folder} has no dist/ folder: build it first", expected)
    package = OrtWebPackage(folder, f"file:{folder}")
    if package.layout_problem():
        lacking = "; ".join(f"{name}: {what}" for name, what in package.builds().items())
        raise VersionProblem(f"{folder} holds no onnxruntime-web build ({lacking})", expected)
    return ResolvedVersion(package.version, LOCAL, f"a local build in {folder}")
