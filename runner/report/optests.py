"""What a run of ORT-web op tests found, per backend: files, tests and cases run, results passed,
skipped (by reason) and failed (by verdict), as a Markdown table.

    python -m runner.report.optests SUITE... --results reports/runs/<run_id>/results.jsonl

The suites give each result its file, test and case (a result names its model only).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.history import CaseResult, RunFolder
from runner.selection import Selection, load
from runner.suite.spec import Suite
from runner.verdicts import SKIP_REASONS, Outcome


@dataclass
class BackendSummary:
    backend: str
    files: set[str] = field(default_factory=set)
    tests: set[tuple[str, str]] = field(default_factory=set)
    cases: set[str] = field(default_factory=set)  # op-test cases (models), both modes together
    results: int = 0  # one per case and mode
    passed: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # by reason (SKIP_REASONS)
    failed: Counter[str] = field(default_factory=Counter)  # by headline verdict
    expected: Counter[str] = field(default_factory=Counter)  # failures a `cases:` rule expects


def summarize(suites: Iterable[Suite], results: Iterable[CaseResult]) -> list[BackendSummary]:
    """Per backend (in order of first appearance), the op-test results among `results`."""
    op_tests = {
        (str(suite.path), model.name): model.op_test
        for suite in suites
        for model in suite.models
        if model.op_test is not None
    }
    summaries: dict[str, BackendSummary] = {}
    for result in results:
        op_case = op_tests.get((result.suite_path, result.model))
        if op_case is None:
            continue
        backend = result.backend
        summary = summaries.setdefault(backend, BackendSummary(backend))
        summary.files.add(str(op_case.test.file))
        summary.tests.add((str(op_case.test.file), op_case.test.name))
        summary.cases.add(result.model)
        summary.results += 1
        verdict = result.verdict
        if verdict == "pass":
            summary.passed += 1
        elif verdict == "skipped":
            summary.skipped[skip_category(result.message)] += 1
        else:
            summary.failed[verdict] += 1
            if result.outcome == Outcome.EXPECTED:
                summary.expected[verdict] += 1
    return list(summaries.values())


def skip_category(message: str) -> str:
    """The reason a skip message starts with (``runner.skips.SKIP_REASONS``)."""
    return next((reason for reason in SKIP_REASONS if message.startswith(reason)), "other")


def markdown(summaries: Sequence[BackendSummary]) -> str:
    lines = [
        "| backend | files | tests | cases | results (eager + capture) | passed "
        "| skipped, by reason | failed, by verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        skipped = "; ".join(f"{reason}: {n}" for reason, n in sorted(s.skipped.items())) or "0"
        failed = (
            "; ".join(
                f"{verdict}: {n}"
                + (f" ({s.expected[verdict]} expected)" if s.expected[verdict] else "")
                for verdict, n in sorted(s.failed.items())
            )
            or "0"
        )
        lines.append(
            f"| {s.backend} | {len(s.files)} | {len(s.tests)} | {len(s.cases)} | "
            f"{s.results} | {s.passed} | {skipped} | {failed} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m runner.report.optests", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("suites", nargs="+", type=Path, help="the suites the run ran")
    parser.add_argument("--results", type=Path, required=True, help="a run's results.jsonl")
    args = parser.parse_args(argv)
    suites = load(Selection(tuple(args.suites), tags=("heavy",)))
    results = RunFolder(args.results.parent).results()
    print(markdown(summarize(suites, results)), end="")


if __name__ == "__main__":
    main()
