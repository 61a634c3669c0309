"""Results and runs read back as types, including records an earlier version of this tool
wrote (fields it did not have get their defaults)."""

from __future__ import annotations

from runner.history import CaseResult, RunRecord, RunStatus
from runner.verdicts import Outcome

from .conftest import RESULT_VALIDATOR, case_result


def test_a_result_reads_back_as_it_was_written():
    result = case_result(version="1.30.0", suite_line=7, injected=["racy-replay"])
    record = result.to_dict()
    RESULT_VALIDATOR.validate(record)
    assert CaseResult.from_dict(record) == result
    assert CaseResult.from_dict(record).outcome is Outcome.EXPECTED


def test_an_older_result_gets_defaults_for_what_it_lacks():
    older = case_result(verdict="capture-mismatch").to_dict()
    for field in ("version", "suite_line", "revisit", "injected", "wall_ms", "divergent_node"):
        del older[field]
    result = CaseResult.from_dict(older)
    assert (result.version, result.suite_line, result.revisit, result.injected) == (
        None,
        None,
        False,
        [],
    )
    assert result.outcome is Outcome.UNEXPECTED and result.verdict == "capture-mismatch"


def test_a_run_reads_back_with_its_status_as_an_enum():
    older = {
        "run_id": "R",
        "started": "2025-01-01T10:00:00",
        "status": "incomplete",
        "environment": {"onnxruntime": "1.20.0"},
    }
    run = RunRecord.from_dict(older)
    assert run.status is RunStatus.INCOMPLETE and run.shards == [] and run.cases == 0
    assert RunRecord.from_dict(run.to_dict()) == run
