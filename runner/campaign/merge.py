"""Many explores' findings as one list of bugs: deduplicated across jobs, targets and versions,
each marked new or pinned by a case of ``suites/bugs/``, and what the campaign covered.

Two drawn models' findings are one bug when they share their root cause (``runner.cause``: a
stale copy output whichever op makes the copy, a Slice's wrong result), for a backend's own
failure its message without numbers, and the injected faults (a canary is never a real bug),
whatever their verdict labels, bystanders and shapes. Two scenarios' findings are one bug when
they share the verdict, the failing step's action, the normalized text explore tells failures
apart by (``Failure.kind``: a backend's message without its numbers, or a capture-mismatch's
buffer modes) and the faults: the rule explore itself applies within one run, so a bug shrunk
to different scenarios on two targets is still one row, listing each.

A drawn model's finding is pinned when a ``cases:`` rule of the bugs folder declares its cause
(``cause:``, which ``run`` checks) on a case of the finding's target and version, expecting it
to fail: the bugs folder selected as ``run --backend TARGET --VERSION`` would select it, so a
rule holds where it was written and nowhere else; a case expecting a verdict whose cause is the
build's whatever the model (``capture-not-engaged``) states that cause. It is also pinned when a
bugs suite holds the same model (its file's content, at a shape of its) and a ``cases:`` rule of
it expects the verdict. A scenario's finding is pinned when a scenario of the bugs folder
expects its verdict on the same model (its content digest, ``suite_model``, computed alike from
both suite files) with the same steps as the finding's, or its steps through the failing one
(sessions renamed by first use, ``signature``): a suite scenario states its verdict, model and
steps exactly, but not its failing step or message (its reason is prose), so these are what both
sides can compare without running anything. A backend's own failure (an error, a refusal) is
also pinned when a bugs scenario or rule expecting its verdict quotes its message in its reason
(numbers left out, spaces folded): the same text from another trigger is the same bug. Faults
are not compared: a suite cannot carry ``--inject``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runner.backends import REGISTRY
from runner.cause import BUILD_VERDICTS, cause_of
from runner.errors import InvalidInput
from runner.explore.finding import BACKEND_FAILURES, signature
from runner.explore.generated import OpCovered
from runner.explore.machine import cut_after
from runner.explore.record import GLOB, FindingRecord, RunRecord, read_record
from runner.explore.space import suite_model
from runner.selection import Selection, select, versioned_backends
from runner.suite.loader import load_suite
from runner.suite.spec import STATIC_SHAPE, Suite

EXPECTED_FOLDER = f"a folder explore wrote (its --out), holding its records ({GLOB})"


@dataclass(frozen=True)
class Job:
    """One explore's record and the folder it was read from."""

    folder: Path
    record: RunRecord


@dataclass(frozen=True, order=True)
class BugKey:
    """What one bug's findings share."""

    cause: str  # a drawn model's root cause; "" for a scenario's finding
    verdict: str  # a scenario's finding's; "" for a drawn model's (one cause, any label)
    action: str  # a scenario's failing step's
    text: str  # a backend's own failure's message without numbers, or buffer modes
    faults: tuple[str, ...]


@dataclass(frozen=True)
class Sighting:
    """Where a bug was seen: one finding of one job."""

    job: Job
    finding: FindingRecord

    @property
    def yaml(self) -> Path:
        return self.job.folder / self.finding.yaml

    @property
    def bundle(self) -> Path:
        return self.job.folder / self.finding.bundle


@dataclass(frozen=True)
class Bug:
    """One row: a bug, every finding of it, and the cases that pin it."""

    key: BugKey
    sightings: tuple[Sighting, ...]
    pinned_by: tuple[str, ...]  # "FILE: scenario" of the bugs folder
    check_versions: tuple[str, ...]  # commands running a finding on each version explored

    @property
    def new(self) -> bool:
        return not self.pinned_by

    @property
    def verdict(self) -> str:
        """Every verdict its findings gave, ``/``-joined (one cause may fail as several)."""
        return "/".join(sorted({s.finding.verdict for s in self.sightings}))

    @property
    def ops(self) -> tuple[str, ...]:
        """Its shortest drawn finding's ops."""
        return min(self.sightings, key=_shortest).finding.ops

    @property
    def message(self) -> str:
        """The shortest finding's message (the key's text is it without numbers)."""
        return min(self.sightings, key=_shortest).finding.message

    @property
    def where(self) -> tuple[tuple[str, str], ...]:
        """Every (target, version) it was seen on."""
        return tuple(sorted({(s.job.record.target, s.job.record.version) for s in self.sightings}))

    def seen_with(self, yaml: str) -> tuple[tuple[str, str], ...]:
        """Every (target, version) a scenario (its file's name) was written on."""
        seen = {
            (s.job.record.target, s.job.record.version)
            for s in self.sightings
            if s.finding.yaml == yaml
        }
        return tuple(sorted(seen))

    @property
    def scenarios(self) -> tuple[Sighting, ...]:
        """One sighting per distinct scenario written (by file name), the shortest first."""
        seen: dict[str, Sighting] = {}
        for sighting in sorted(self.sightings, key=_shortest):
            seen.setdefault(sighting.finding.yaml, sighting)
        return tuple(seen.values())


@dataclass(frozen=True)
class Coverage:
    """What the campaign tried."""

    jobs: tuple[Job, ...]

    @property
    def targets(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted({(j.record.target, j.record.version) for j in self.jobs}))

    @property
    def models(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted({m for j in self.jobs for m in j.record.models}))

    @property
    def examples(self) -> int:
        return sum(j.record.examples for j in self.jobs)

    @property
    def steps(self) -> int:
        return sum(j.record.steps for j in self.jobs)

    @property
    def seconds(self) -> float:
        return sum(j.record.seconds for j in self.jobs)

    @property
    def ops(self) -> tuple[OpCovered, ...]:
        """The ops of every job's drawn models judged, with their attribute values, the most
        drawn first (jobs that drew scenarios add none)."""
        nodes: dict[str, int] = {}
        values: dict[str, set[str]] = {}
        for job in self.jobs:
            for op in job.record.covered:
                nodes[op.op] = nodes.get(op.op, 0) + op.nodes
                values.setdefault(op.op, set()).update(op.values)
        ranked = sorted(nodes, key=lambda op: (-nodes[op], op))
        return tuple(OpCovered(op, nodes[op], tuple(sorted(values[op]))) for op in ranked)


@dataclass(frozen=True)
class Refusal:
    """What some targets would not do (no bug): one row of "what these builds do not capture"."""

    verdict: str
    nodes: tuple[str, ...]
    message: str  # the first job's
    where: tuple[tuple[str, str], ...]  # (target, version), sorted


@dataclass(frozen=True)
class Campaign:
    bugs: tuple[Bug, ...]  # new ones first
    coverage: Coverage
    bugs_folder: Path
    refusals: tuple[Refusal, ...] = ()


def read_jobs(folders: Iterable[Path]) -> tuple[Job, ...]:
    """Every record in `folders`; InvalidInput naming the folder, or the file, and what is
    expected when one is not explore's, cannot be read, or is of a newer format."""
    jobs = []
    for folder in folders:
        if not folder.is_dir():
            raise InvalidInput(f"{folder}: not a folder; expected {EXPECTED_FOLDER}")
        try:
            records = sorted(folder.glob(GLOB))
            os.listdir(folder)
        except OSError as exc:
            raise InvalidInput(
                f"{folder}: cannot be read ({exc.strerror}); expected {EXPECTED_FOLDER}"
            ) from None
        if not records:
            raise InvalidInput(f"{folder}: no explore record in it; expected {EXPECTED_FOLDER}")
        for path in records:
            job = Job(folder, read_record(path))
            for finding in job.record.findings:
                if not (folder / finding.yaml).is_file():
                    raise InvalidInput(
                        f"{path}: its finding {finding.yaml} is not in {folder}; expected the "
                        "folder as explore wrote it, each finding's YAML and bundle beside it"
                    )
            jobs.append(job)
    return tuple(jobs)


def merge(jobs: tuple[Job, ...], bugs_folder: Path) -> Campaign:
    """The jobs' findings, one row per bug, each marked new or pinned by `bugs_folder`'s cases."""
    grouped: dict[BugKey, list[Sighting]] = {}
    for job in jobs:
        for finding in job.record.findings:
            if finding.cause:
                key = BugKey(finding.cause, "", "", finding.text, job.record.inject)
            else:
                key = BugKey("", finding.verdict, finding.action, finding.text, job.record.inject)
            grouped.setdefault(key, []).append(Sighting(job, finding))
    pins, causes = _pins(bugs_folder), _DeclaredCauses(bugs_folder)
    bugs = [
        Bug(
            key,
            tuple(seen),
            tuple(sorted(set(_pinned_by(seen, pins)) | causes.pinning(seen))),
            _check_versions(seen, jobs),
        )
        for key, seen in grouped.items()
    ]
    bugs.sort(key=lambda b: (not b.new, b.key, b.where))
    return Campaign(tuple(bugs), Coverage(jobs), bugs_folder, _refusals(jobs))


def _refusals(jobs: tuple[Job, ...]) -> tuple[Refusal, ...]:
    """The jobs' refusals, one row per verdict and nodes, with every target that refused."""
    seen: dict[tuple[str, tuple[str, ...]], tuple[str, set[tuple[str, str]]]] = {}
    for job in jobs:
        for refusal in job.record.refusals:
            key = (refusal.verdict, refusal.nodes)
            message, where = seen.setdefault(key, (refusal.message, set()))
            where.add((job.record.target, job.record.version))
    return tuple(
        Refusal(verdict, nodes, message, tuple(sorted(where)))
        for (verdict, nodes), (message, where) in sorted(seen.items())
    )


PinKey = tuple[str, str, tuple | None]  # verdict, model digest, steps (None: a suite's cases)
QUOTED_MIN = 16  # characters of a message a reason must quote: "unreachable" is no bug's name


def _pins(folder: Path) -> dict[PinKey, list[str]]:
    """What the bugs folder pins: each scenario its failing verdicts on its model and steps,
    each suite its rules' failing verdicts on each of its models."""
    if not folder.is_dir():
        raise InvalidInput(f"{folder}: not a folder; expected the bugs suites (suites/bugs)")
    pins: dict[PinKey, list[str]] = {}
    for path in sorted(folder.rglob("*.yaml")):  # its subfolders too (the zoo)
        suite = load_suite(path, REGISTRY)
        for scenario in suite.scenarios:
            digest = suite_model(suite, scenario.model, scenario.shape).digest
            for verdict in scenario.expectation.expect - {"pass"}:
                key = (verdict, digest, signature(scenario))
                pins.setdefault(key, []).append(f"{path}: {scenario.name}")
                quoted = (verdict, _folded(scenario.expectation.reason or ""), None)
                pins.setdefault(quoted, []).append(f"{path}: {scenario.name} (its message)")
        ruled = {v for rule in suite.cases for v in rule.expectation.expect} - {"pass"}
        for name, digest in _model_digests(suite):
            for verdict in ruled:
                pins.setdefault((verdict, digest, None), []).append(f"{path}: {name}'s cases")
        for rule in suite.cases:
            for verdict in rule.expectation.expect - {"pass"}:
                quoted = (verdict, _folded(rule.expectation.reason or ""), None)
                pins.setdefault(quoted, []).append(f"{path}: a cases: rule (its message)")
    return pins


class _DeclaredCauses:
    """The causes the bugs folder's rules declare, per target and version the folder is
    selected for (``run --backend TARGET`` on that version), each selected once."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._selected: dict[tuple[str, str, str], dict[str, list[str]]] = {}

    def pinning(self, seen: list[Sighting]) -> set[str]:
        """Where a case expected to fail declares a sighting's cause on its target."""
        return {
            where
            for s in seen
            if s.finding.cause
            for where in self._on(s.job.record).get(s.finding.cause, ())
        }

    def _on(self, record: RunRecord) -> dict[str, list[str]]:
        key = (record.target, record.backend, record.version)
        if key not in self._selected:
            versioned = {d.name for d in versioned_backends()}
            versions = {record.backend: (record.version,)} if record.backend in versioned else {}
            selection = Selection(
                (self.folder,), tags=("heavy",), backends=(record.target,), versions=versions
            )
            causes: dict[str, list[str]] = {}
            for case in select(selection, say=lambda text: None):
                if case.expect == {"pass"}:
                    continue
                declared = {str(case.expectation.cause)} if case.expectation.cause else set()
                declared |= {str(cause_of(v, None)) for v in case.expect & BUILD_VERDICTS}
                for cause in declared:
                    causes.setdefault(cause, []).append(f"{case.suite.path}: {case.id} (its cause)")
            self._selected[key] = causes
        return self._selected[key]


def _folded(text: str) -> str:
    """`text` as messages are compared: numbers left out, white space folded."""
    return " ".join(re.sub(r"\d+", "N", text).split())


def _quoting(finding: FindingRecord, pins: dict[PinKey, list[str]]) -> set[str]:
    """The bugs' scenarios and rules expecting a backend failure's verdict whose reason quotes
    its message."""
    text = _folded(finding.text)
    if finding.verdict not in BACKEND_FAILURES or len(text) < QUOTED_MIN:
        return set()
    return {
        where
        for (verdict, reason, steps), places in pins.items()
        if steps is None and verdict == finding.verdict and text in reason
        for where in places
        if where.endswith("(its message)")
    }


def _model_digests(suite: Suite) -> list[tuple[str, str]]:
    return [
        (model.name, suite_model(suite, model, shape).digest)
        for model in suite.models
        for shape in model.shapes or suite.shapes or (STATIC_SHAPE,)
    ]


def _pinned_by(seen: list[Sighting], pins: dict[PinKey, list[str]]) -> tuple[str, ...]:
    found: set[str] = set()
    for sighting in seen:
        suite, finding = load_suite(sighting.yaml, REGISTRY), sighting.finding
        found.update(_quoting(finding, pins))
        if finding.failing_step is None:  # a drawn model's cases
            for _, digest in _model_digests(suite):
                found.update(pins.get((finding.verdict, digest, None), ()))
            continue
        (scenario,) = suite.scenarios
        digest = suite_model(suite, scenario.model, scenario.shape).digest
        for steps in (scenario, cut_after(scenario, finding.failing_step)):
            found.update(pins.get((finding.verdict, digest, signature(steps)), ()))
    return tuple(sorted(found))


def _check_versions(seen: list[Sighting], jobs: tuple[Job, ...]) -> tuple[str, ...]:
    """Per versioned build it was seen on, the command running its shortest finding on every
    version the campaign explored of that build: the versions axis tells where it appeared
    (``bisect`` takes a case, and a finding is a scenario)."""
    flags = {d.name: f"--{d.name}-version" for d in versioned_backends()}
    commands = []
    builds = sorted({(s.job.record.backend, s.job.record.build) for s in seen})
    for backend, build in builds:
        if backend not in flags:
            continue
        on_build = (
            s for s in seen if (s.job.record.backend, s.job.record.build) == (backend, build)
        )
        shortest = min(on_build, key=_shortest)
        versions = sorted(
            {
                j.record.version
                for j in jobs
                if (j.record.backend, j.record.build) == (backend, build)
            }
        )
        options = " ".join(f"{flags[backend]} {v}" for v in versions)
        commands.append(f"python -m runner run {shortest.yaml} {options}")
    return tuple(commands)


def _shortest(sighting: Sighting) -> tuple:
    return sighting.finding.size, sighting.finding.yaml, str(sighting.job.folder)
