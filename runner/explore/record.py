"""What one explore did and found, as a small JSON record in its out folder
(``explore-STAMP.json``), so that ``explore-report`` can merge many jobs' folders without
re-running or re-parsing suite files' prose.

A record carries ``format``: a newer one is refused by name (exit 2) rather than misread, as the
history's stores do (docs/architecture.md, "Stores carry a format").
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.errors import InvalidInput
from runner.explore.cases import ModelFailure
from runner.explore.finding import Failure, Found
from runner.explore.generated import Coverage, OpCovered
from runner.explore.space import Space
from runner.files import write_atomic

FORMAT = 3  # 2: a finding's cause, the refusals; 3: the float types drawn, per dimension
KIND = "explore-run"
GLOB = "explore-*.json"


@dataclass(frozen=True)
class FindingRecord:
    """One written finding: what tells its bug apart, and where its files are (relative to the
    record's folder)."""

    verdict: str
    action: str  # a scenario's failing step's; a drawn model's failing case's mode
    text: str  # the failure's ``kind``: a backend's message, numbers left out, or buffer modes
    message: str  # the judge's, as the finding's reason quotes it
    failing_step: int | None  # a scenario's, 0-based; None for a drawn model
    size: int
    unit: str  # of size: "steps" (a scenario), "nodes" (a drawn model)
    model: str
    digest: str  # ``ExploredModel.digest``
    yaml: str
    bundle: str
    examples_before: int
    seconds_to_first: float
    shrinking_cut: bool
    ops: tuple[str, ...] = ()  # a drawn model's shrunk ops, sorted; () for a scenario
    cause: str = ""  # a drawn model's root cause (``runner.cause``); "" for a scenario


@dataclass(frozen=True)
class RefusalRecord:
    """What the target would not do, no bug: a drawn model it refused to capture, shrunk (its
    nodes with their attributes and element types), or an op it does not run on its GPU."""

    verdict: str  # capture-unsupported or unsupported-op
    message: str  # the backend's
    nodes: tuple[str, ...]  # ``ModelFailure.nodes``, or the op alone


@dataclass(frozen=True)
class RunRecord:
    """One explore: its target, what it covered, and what it found."""

    target: str  # the target's id, e.g. ort-web:webgpu (its version apart)
    backend: str
    build: str | None
    version: str  # as the backend reported it (n/a where it has none)
    adapter: str
    inject: tuple[str, ...]
    seed: int | None
    budget_s: float
    examples: int
    steps: int
    seconds: float
    started: str  # UTC, ISO 8601
    draws: str  # what an example is: "scenarios" over the suites' models, or a model's "cases"
    models: tuple[tuple[str, str], ...]  # (name, digest) of the suites' models drawn from
    vocabulary: tuple[str, ...]  # the ops generated models were drawn from
    database: str  # its example database's folder (TARGET-HASH) in the folder of databases
    findings: tuple[FindingRecord, ...]
    covered: tuple[OpCovered, ...] = ()  # the ops and attribute values of drawn models judged
    refusals: tuple[RefusalRecord, ...] = ()
    # drawn models judged per bucket of each dimension of the draw ("dtype float16": 412)
    dimensions: Mapping[str, int] = field(default_factory=dict)
    dtypes: tuple[str, ...] = ()  # the float types generated models were drawn in
    format: int = FORMAT
    kind: str = KIND

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def run_record(
    space: Space,
    version: str,
    adapter: str,
    inject: frozenset[str],
    seed: int | None,
    budget_s: float,
    counts: tuple[int, int, float],  # examples, steps, seconds
    started: str,
    database: str,
    found: tuple[Found, ...],
    covered: Coverage,
    refusals: tuple[RefusalRecord, ...],
    out: Path,
) -> RunRecord:
    """The record of an explore over `space` that found `found` (written under `out`)."""
    target = space.target
    findings = []
    for finding in found:
        failure = finding.failure
        _, action, text = failure.kind
        findings.append(
            FindingRecord(
                failure.result.verdict,
                failure.mode if isinstance(failure, ModelFailure) else action,
                text,
                failure.result.message,
                failure.failing_step if isinstance(failure, Failure) else None,
                failure.size,
                failure.unit,
                failure.explored.model.name,
                failure.explored.digest,
                str(finding.path.relative_to(out)),
                str(finding.path.with_suffix("").relative_to(out)),
                finding.examples_before,
                round(finding.seconds_to_first, 1),
                finding.shrinking_cut,
                () if isinstance(failure, Failure) else failure.ops,
                str(failure.cause or ""),
            )
        )
    examples, steps, seconds = counts
    return RunRecord(
        target.id,
        target.name,
        target.bundle,
        version,
        adapter,
        tuple(sorted(inject)),
        seed,
        budget_s,
        examples,
        steps,
        round(seconds, 1),
        started,
        space.source.draws,
        tuple((m.model.name, m.digest) for m in getattr(space.source, "models", ())),
        tuple(getattr(space.source, "vocabulary", ())),
        database,
        tuple(findings),
        covered.ops(),
        refusals,
        dict(sorted(covered.dimensions.items())),
        tuple(getattr(space.source, "dtypes", ())),
    )


def write_record(out: Path, record: RunRecord) -> Path:
    """`record` as ``out/explore-STAMP-RANDOM.json``, written whole (``write_atomic``): one file
    per explore, so explores sharing a folder never overwrite each other's."""
    stamp = record.started.removesuffix("+00:00").replace("-", "").replace(":", "") + "Z"
    path = out / f"explore-{stamp}-{secrets.token_hex(3)}.json"
    return write_atomic(path, record.to_json().encode())


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def read_record(path: Path) -> RunRecord:
    """The record at `path`; InvalidInput (exit 2) naming the file and what is expected for one
    that is unreadable, not explore's, or of a newer format."""
    expected = f"an explore record (JSON, kind {KIND!r}, format 1 to {FORMAT})"
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InvalidInput(
            f"{path}: cannot be read ({exc.strerror}); expected {expected}"
        ) from None
    except ValueError:
        raise InvalidInput(f"{path}: not JSON; expected {expected}") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise InvalidInput(f"{path}: not an explore record; expected {expected}")
    found = data.get("format")
    if not isinstance(found, int) or isinstance(found, bool) or not 1 <= found <= FORMAT:
        raise InvalidInput(
            f"{path}: an explore record of format {found}; this runner reads formats 1 to "
            f"{FORMAT}: merge it with the newer webgpu-capture-regress that wrote it"
        )
    try:
        return _run_record(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(
            f"{path}: a malformed explore record ({exc}); expected {expected}"
        ) from None


def _run_record(data: dict[str, Any]) -> RunRecord:
    _known(data, RunRecord)
    findings = []
    for item in data["findings"]:
        _known(item, FindingRecord)
        findings.append(FindingRecord(**{**item, "ops": tuple(item.get("ops", ()))}))
    return RunRecord(
        **{
            **data,
            "inject": tuple(data["inject"]),
            "models": tuple((str(n), str(d)) for n, d in data["models"]),
            "vocabulary": tuple(data["vocabulary"]),
            "dtypes": tuple(data.get("dtypes", ())),
            "dimensions": {str(k): int(v) for k, v in data.get("dimensions", {}).items()},
            "findings": tuple(findings),
            "covered": tuple(
                OpCovered(str(c["op"]), int(c["nodes"]), tuple(map(str, c["values"])))
                for c in data.get("covered", ())
            ),
            "refusals": tuple(
                RefusalRecord(str(r["verdict"]), str(r["message"]), tuple(map(str, r["nodes"])))
                for r in data.get("refusals", ())
            ),
        }
    )


def _known(data: dict[str, Any], cls: type) -> None:
    """Refuse fields this format does not have (a newer runner added them without a format)."""
    unknown = sorted(set(data) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}")
