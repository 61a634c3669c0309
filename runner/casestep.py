"""One case's step, from a selected case to its judged record: the skip decided (once, here),
the workload materialized, onnxruntime CPU's references, the backend's run, the ``Evidence``,
the judgement, localization when asked, and the stored result.

Every path that judges a case steps it here: the run (``runner.pipeline``, which ``bisect``
probes through), repro's reruns of cut models (``runner.repro.verify``) and the benchmark's
naive harness; so a case is judged on the same evidence however it runs. The cases of one
layout-change sequence step in matrix order through one ``CaseStep``, which keeps what the
later ones are judged against: the eager and dynamic twins' runs, the references of layouts
captured earlier, and those captures (localization replays them first). A case the oracle cannot
run still runs: the judges that need no reference judge it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.backends.base import Backend, BackendRun
from runner.history import CaseResult
from runner.judge import Evidence, Judgement, Twin, judge
from runner.localize import LOCALIZED_VERDICTS, first_divergent_node
from runner.matrix import Case
from runner.oracle import References
from runner.skips import skip_reason
from runner.workload import Workload, materialize
from runner.workload.optest import expected_outputs

# onnxruntime CPU's outputs for every input variant of a workload; raises what onnxruntime
# raises when it cannot run the model (``runner.oracle.ReferenceCache.references``).
Oracle = Callable[[Workload], References]


@dataclass(frozen=True)
class SteppedCase:
    """What one case's step found, enough for its stored result and for repro's bundle."""

    case: Case
    run: BackendRun  # what the backend reported; a skip or a failed materialization says why
    judgement: Judgement
    wall_ms: float  # the whole step: materialize ... localize
    references: References = field(default_factory=dict)  # {}: none
    no_reference: str = ""  # why the oracle gave none, when it could not run the case
    divergent_node: dict[str, Any] | None = None
    model_digest: str | None = None  # None: never materialized

    def result(self, run_id: str) -> CaseResult:
        """The record the stores keep."""
        return CaseResult.of(
            run_id,
            self.case,
            self.run,
            self.judgement,
            self.divergent_node,
            wall_ms=self.wall_ms,
            model_digest=self.model_digest,
        )


class CaseStep:
    """Steps cases one after another, remembering within each layout-change sequence what the
    judge and localization look back at; a case of another sequence starts afresh."""

    def __init__(self, oracle: Oracle, runs: int, localize: bool = False):
        self._oracle = oracle
        self._runs = runs
        self._localize = localize
        self._sequence: tuple | None = None
        self._twins: dict[tuple[str, str], Twin] = {}  # (cell, mode) -> its eager/dynamic run
        self._layouts: dict[str, tuple[str, References]] = {}  # workload key -> (layout, refs)
        self._captured: list[tuple[Case, Workload]] = []  # capture cases so far, in order

    def run(self, case: Case, backend: Backend, workload: Workload | None = None) -> SteppedCase:
        """`case` on `backend`, its workload materialized unless given (repro's cut models)."""
        if case.sequence != self._sequence:
            self._sequence, self._twins, self._layouts, self._captured = case.sequence, {}, {}, []
        began = time.perf_counter()
        expected = None
        try:
            skip = skip_reason(case)
            if skip:
                return self._unrun(case, BackendRun(status="skipped", message=skip), began)
            if workload is None:
                workload = materialize(case, self._runs)
            if case.model.op_test is not None:
                expected = expected_outputs(case.model.op_test)
        except Exception as exc:  # a model or input that cannot be built fails this case only
            return self._unrun(case, _failed_run(exc), began)
        references, no_reference = self._references(workload)
        run = backend.run(case, workload)
        feeds = workload.feeds(self._runs)
        judgement = judge(
            Evidence(
                case,
                run,
                references,
                feeds=feeds,
                eager=self._twins.get((case.cell, "eager")) if case.capture else None,
                dynamic=None if case.dynamic else self._twins.get((case.cell, "dynamic")),
                earlier=self._earlier(workload) if case.capture else (),
                no_reference=no_reference,
                expected=expected,
            )
        )
        divergent = None
        if self._localize and judgement.verdicts & LOCALIZED_VERDICTS:
            divergent = _localize(backend, case, workload, judgement.verdicts, self._captured)
        if case.capture:
            if references:
                self._layouts.setdefault(workload.key, (case.layout.label, references))
            self._captured.append((case, workload))
        else:
            self._twins[case.cell, case.mode] = Twin(run, feeds)
        return SteppedCase(
            case,
            run,
            judgement,
            _ms_since(began),
            references,
            no_reference,
            divergent,
            workload.model_digest,
        )

    def _references(self, workload: Workload) -> tuple[References, str]:
        """The oracle's references, or none and why: the judges that need none still judge."""
        try:
            return self._oracle(workload), ""
        except Exception as exc:  # onnxruntime CPU refused the model
            return {}, f"onnxruntime CPU refused the case ({type(exc).__name__}: {exc})"

    def _earlier(self, workload: Workload) -> tuple[tuple[str, Mapping], ...]:
        """The references of the other layouts captured so far, first captured first."""
        return tuple(v for k, v in self._layouts.items() if k != workload.key)

    @staticmethod
    def _unrun(case: Case, why: BackendRun, began: float) -> SteppedCase:
        """A case the backend is not asked to run at all, judged on why."""
        return SteppedCase(case, why, judge(Evidence(case, why, {})), _ms_since(began))


def _failed_run(exc: Exception) -> BackendRun:
    return BackendRun(status="error", message=f"{type(exc).__name__}: {exc}")


def _ms_since(began: float) -> float:
    return (time.perf_counter() - began) * 1000


def _localize(backend, case, workload, verdicts, prefix) -> dict[str, Any] | None:
    try:
        return first_divergent_node(backend, case, workload, verdicts, list(prefix))
    except Exception as exc:  # localization is a diagnosis: its failure must not cost the result
        return {"error": f"{type(exc).__name__}: {exc}"}
