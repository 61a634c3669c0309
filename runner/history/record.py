"""What runs leave behind, as types: ``CaseResult`` (one judged case, a line of results.jsonl;
its dict form is ``schemas/result.schema.json``) and ``RunRecord`` (a run's run.json).

Both are written with ``to_dict`` and read back with ``from_dict``, which takes records of
earlier versions of this tool too: a field they lack gets its default.

Every record carries the stored format it is written in (``format``; ``FORMAT`` is this
runner's). A change a reader of the previous format would misread (a new field, a field that
means something else) takes the next number; ``from_dict`` refuses a record of a newer format
(``NewerFormat``: exit 2, naming the file, its format and this runner's), and a field it does
not know in a format it reads (``UnknownField``), rather than drop what it does not know. A
record without ``format`` is format 1, the first.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

from runner.errors import InvalidInput
from runner.verdicts import Outcome

# The stored format this runner writes, and the newest it reads (run.json, results.jsonl, the
# records in history.sqlite, whose PRAGMA user_version carries it too). 2: a result's `adapter`.
FORMAT = 2


class NewerFormat(InvalidInput):
    """A store written by a newer runner: reading it would lose what this one does not know."""

    def __init__(self, where: str, found: object):
        super().__init__(
            f"{where}: stored in format {found}; this runner reads formats 1 to {FORMAT}: "
            "read it with the newer webgpu-capture-regress that wrote it"
        )


class UnknownField(InvalidInput):
    """A record of a format this runner reads holding a field it does not know: reading it would
    drop the field unseen."""

    def __init__(self, where: str, fields: list[str], found: int):
        super().__init__(
            f"{where}: unknown field(s) {', '.join(fields)} in a format {found} record: a runner "
            "that added them without taking a new format wrote it; this one would drop them"
        )


def stored_format(data: dict[str, Any], where: str) -> int:
    """The format `data` was written in (1 without a ``format`` field); refuses newer ones."""
    found = data.get("format", 1)
    if not isinstance(found, int) or isinstance(found, bool) or not 1 <= found <= FORMAT:
        raise NewerFormat(where, found)
    return found


class RunStatus(enum.StrEnum):
    RUNNING = "running"  # or killed before it could say otherwise
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"  # interrupted, or stopped by --run-timeout or --maxfail
    ENVIRONMENT_UNUSABLE = "environment-unusable"
    UNKNOWN = "unknown"  # a run known only from its results (a history merged without it)


@dataclass(frozen=True)
class RunRecord:
    """A run: what it ran, on what, and how it ended."""

    run_id: str
    started: str
    status: RunStatus = RunStatus.RUNNING
    ended: str | None = None
    cases: int = 0  # planned
    suites: list[str] = field(default_factory=list)
    suites_digest: str | None = None
    selection: dict[str, Any] = field(default_factory=dict)  # filters, shard, backends...
    options: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    references_computed: int = 0
    shards: list[str] = field(default_factory=list)  # the shard runs a merged run stands for

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "a run record") -> RunRecord:
        known = _known(cls, data, where)
        return cls(**{**known, "status": RunStatus(known.get("status") or RunStatus.RUNNING)})


def _known(cls, data: dict[str, Any], where: str) -> dict[str, Any]:
    """The fields of `cls` that `data` holds; the others get their defaults. Refuses a newer
    format (``NewerFormat``) and a field `cls` does not know (``UnknownField``): no format this
    runner reads has retired a field, so one it does not know would be lost."""
    found = stored_format(data, where)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names - {"format"})
    if unknown:
        raise UnknownField(where, unknown, found)
    return {k: v for k, v in data.items() if k in names}


def result_id(run_id: str, case_id: str) -> str:
    return hashlib.sha1(f"{run_id}/{case_id}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class CaseResult:
    result_id: str
    run_id: str
    case_id: str
    suite: str
    suite_path: str
    model: str
    shape: dict[str, int]
    layout: str
    layout_order: list[str]
    layout_values: dict[str, float]
    backend: str
    bundle: str | None
    capture: str  # eager | capture
    verdict: str
    verdicts: list[str]
    expected: list[str]
    outcome: Outcome
    max_abs_error: float | None
    max_rel_error: float | None
    tolerance: dict[str, float]
    message: str
    finished_at: str
    # Below: what records of earlier versions of this tool may lack.
    version: str | None = None  # the exact version the backend ran (ort-web), else None
    revisit: bool = False  # the first layout captured again at the end of its sequence
    injected: list[str] = field(default_factory=list)  # faults injected into this case
    bug: str | None = None
    reason: str | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    wall_ms: float = 0.0  # the whole case in the pipeline: materialize ... localize
    trace: dict[str, Any] = field(default_factory=dict)
    attribution: str | None = None
    stale_from: str | None = None
    divergent_node: dict[str, Any] | None = None
    suite_line: int | None = None  # the model's line in suite_path
    model_digest: str | None = None  # sha256 of the model bytes run; None: never materialized
    # Since format 2: the adapter that ran it, as the backend's process found it (None: none did)
    adapter: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "a stored result") -> CaseResult:
        known = _known(cls, data, where)
        return cls(**{**known, "outcome": Outcome(known["outcome"])})
