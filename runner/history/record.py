"""``CaseResult``: one judged case, as stored in results.jsonl and the history database.

Its dict form is described by ``schemas/result.schema.json``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from runner.backends.base import BackendRun
from runner.judge import Judgement, outcome
from runner.matrix import Case
from runner.suite.spec import mode_name


def result_id(run_id: str, case_id: str) -> str:
    return hashlib.sha1(f"{run_id}/{case_id}".encode()).hexdigest()[:12]


def _finite(value: float | None) -> float | None:
    """JSON has no inf/NaN: a non-finite error is stored as null with the message saying why."""
    return value if value is not None and math.isfinite(value) else None


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
    version: str | None  # the exact version the backend ran (ort-web), else None
    capture: str  # eager | capture
    revisit: bool  # the first layout captured again at the end of its sequence
    injected: list[str]  # faults injected into this case
    verdict: str
    verdicts: list[str]
    expected: list[str]
    outcome: str  # expected | unexpected | unexpected-pass | skipped
    bug: str | None
    reason: str | None
    max_abs_error: float | None
    max_rel_error: float | None
    tolerance: dict[str, float]
    timings: dict[str, Any]
    wall_ms: float  # the whole case in the pipeline: materialize, reference, run, judge, localize
    trace: dict[str, Any]
    attribution: str | None
    stale_from: str | None
    divergent_node: dict[str, Any] | None
    message: str
    finished_at: str
    suite_line: int | None = None  # the model's line in suite_path; older records lack it
    model_digest: str | None = None  # sha256 of the model bytes run; None: never materialized

    @classmethod
    def of(
        cls,
        run_id: str,
        case: Case,
        run: BackendRun,
        judgement: Judgement,
        divergent_node: dict[str, Any] | None = None,
        *,
        wall_ms: float,
        model_digest: str | None = None,
    ) -> CaseResult:
        expect = case.expectation.expect
        return cls(
            result_id=result_id(run_id, case.id),
            run_id=run_id,
            case_id=case.id,
            suite=case.suite.name,
            suite_path=str(case.suite.path),
            model=case.model.name,
            shape=case.shape.as_dict(),
            layout=case.layout.label,
            layout_order=list(case.layout.order),
            layout_values=case.layout.values_dict(),
            backend=case.backend.id,
            bundle=case.backend.bundle,
            version=case.backend.version,
            capture=mode_name(case.capture),
            revisit=case.revisit,
            injected=sorted(case.inject),
            verdict=judgement.verdict,
            verdicts=sorted(judgement.verdicts),
            expected=sorted(expect),
            outcome=outcome(judgement.verdicts, expect),
            bug=case.expectation.bug,
            reason=case.expectation.reason,
            max_abs_error=_finite(judgement.max_abs),
            max_rel_error=_finite(judgement.max_rel),
            tolerance={"abs": case.tolerance.abs, "rel": case.tolerance.rel},
            timings=asdict(run.timings),
            wall_ms=wall_ms,
            trace=run.trace.summary(),
            attribution=judgement.attribution,
            stale_from=judgement.stale_from,
            divergent_node=divergent_node,
            message=judgement.message,
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
            suite_line=case.model.line,
            model_digest=model_digest,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
