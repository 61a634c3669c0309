"""What ``run``, ``bisect`` and ``explore`` print: reporters are listeners (``runner.listeners``)
that the command line plugs into a run, and the end of each command's output.

On a terminal a progress bar (``ProgressBar``); in a log (stdout is no terminal, as in CI) a
line per backend opened and per finished case, each written at once (``LogLines``). The
summary (a verdict count per backend, then every failure) is a table on a terminal and plain
lines in a log: as wide as its longest backend id, never cut to the log's 80 columns.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from textwrap import indent
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from runner.listeners import Listeners, RunListener
from runner.verdicts import FAILING_OUTCOMES, VERDICTS

if TYPE_CHECKING:
    from runner.bisect import Bisection
    from runner.explore.explorer import Explored
    from runner.explore.space import Space
    from runner.history import CaseResult
    from runner.matrix import Case
    from runner.pipeline import RunSummary

VERDICT_WIDTH = max(map(len, VERDICTS))  # aligns the case ids of `run`'s log lines


def log_line(line: str) -> None:
    """One line to stdout, flushed: a pipe would otherwise hold it until the run ends."""
    print(line, flush=True)


def case_line(result: CaseResult) -> str:
    """Verdict, case id and seconds; a failing outcome in capitals, for the eye and for grep."""
    line = f"{result.verdict:<{VERDICT_WIDTH}} {result.case_id} {result.wall_ms / 1000:.2f} s"
    if result.outcome in FAILING_OUTCOMES:
        line += " " + result.outcome.upper().replace("-", " ")
    return line


def failure_text(result: CaseResult) -> str:
    """A failing result in one line of rich markup, its suite text escaped."""
    return (
        f"[red]{result.outcome}[/red] {escape(result.case_id)}: {result.verdict} "
        f"(expected {','.join(result.expected)}) {escape(result.message)}"
    )


class ProgressBar(RunListener):
    """A bar over the run's cases, the running case beside it; -v prints each failure."""

    def __init__(self, progress: Progress, total: int, verbose: bool) -> None:
        self.progress = progress
        self.task = progress.add_task("running", total=total, case="")
        self.verbose = verbose

    def on_start(self, case: Case) -> None:
        self.progress.update(self.task, case=case.id)

    def on_result(self, result: CaseResult) -> None:
        self.progress.advance(self.task)
        if self.verbose and result.outcome in FAILING_OUTCOMES:
            self.progress.console.print(failure_text(result))

    def on_note(self, text: str) -> None:
        self.progress.console.print(text)


class LogLines(RunListener):
    """A line per backend opened and per finished case; -v adds each failure's message."""

    def __init__(self, verbose: bool, write: Callable[[str], None] = log_line) -> None:
        self.verbose = verbose
        self.write = write

    def on_backend(self, name: str, seconds: float) -> None:
        self.write(f"opened {name} in {seconds:.2f} s")

    def on_result(self, result: CaseResult) -> None:
        self.write(case_line(result))
        if self.verbose and result.outcome in FAILING_OUTCOMES:
            why = f": {result.message}" if result.message else ""
            self.write(indent(f"expected {','.join(result.expected)}{why}", "    "))

    def on_note(self, text: str) -> None:
        self.write(text)


@contextmanager
def run_reporter(console: Console, total: int, verbosity: int) -> Iterator[RunListener]:
    """The reporter `run` plugs in: nothing with -q (the summary only), the bar when stdout is
    a terminal, log lines otherwise."""
    if verbosity < 0:
        yield Listeners(())
    elif sys.stdout.isatty():
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[case]}"),
        )
        with Progress(*columns, console=console, transient=False) as progress:
            yield ProgressBar(progress, total, verbosity > 0)
    else:
        yield LogLines(verbosity > 0)


def _counts(results: tuple[CaseResult, ...]) -> tuple[list[str], list[list[str]]]:
    """A row per backend (they multiply with builds and versions), a column per verdict seen."""
    counts = Counter((r.backend, r.verdict) for r in results)
    verdicts = [v for v in VERDICTS if any(seen == v for _, seen in counts)]
    rows = [
        [backend, *(str(counts.get((backend, v), "")) for v in verdicts)]
        for backend in sorted({b for b, _ in counts})
    ]
    return ["backend", *verdicts], rows


def plain_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Columns as wide as their widest cell: the first left-aligned, counts right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    return [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in [headers, *rows]
    ]


def print_summary(console: Console, summary: RunSummary, out: Path) -> None:
    """The end of `run`: status, verdicts per backend, every failure, where the results are."""
    console.print(f"run {summary.run_id}: {len(summary.results)} case(s), {summary.status}")
    headers, rows = _counts(summary.results)
    if console.is_terminal:
        table = Table()
        table.add_column(headers[0], no_wrap=True)
        for verdict in headers[1:]:
            table.add_column(verdict, justify="right")
        for row in rows:
            table.add_row(*map(escape, row))
        console.print(table)
    else:
        for line in plain_table(headers, rows):
            console.print(line, markup=False, soft_wrap=True)
    for result in summary.results:
        if result.outcome in FAILING_OUTCOMES:
            console.print(failure_text(result))
    console.print(
        f"references computed: {summary.references_computed}; "
        f"results in {out / 'runs' / summary.run_id}"
    )
    if summary.message:
        console.print(f"[yellow]{summary.status}[/yellow]: {summary.message}")


def print_bisected(console: Console, found: Bisection, out: Path) -> None:
    """The end of `bisect`: the probes, the last agreeing and first differing versions, the
    upstream commit and comparison where known."""
    last, first = found.last_agreeing, found.first_differing
    console.print(
        f"{len(found.probes)} probe(s) over {len(found.candidates)} versions "
        f"({found.candidates[0]} .. {found.candidates[-1]}); runs in {out}"
    )
    for probe in found.skipped:
        console.print(f"skipped {probe.version}: {probe.message}")
    console.print(f"last agreeing: {last.version} ({last.verdict})")
    if first is None:
        console.print(f"no version up to {found.candidates[-1]} differs from {last.verdict}")
        return
    console.print(f"first differing: {first.version} ({first.verdict}, was {last.verdict})")
    if found.untestable:
        console.print(f"the change may be in any of {', '.join(found.untestable)} (untestable)")
    if found.commit:
        console.print(f"upstream commit: {found.commit}")
    console.print(f"compare: {found.compare_url}")


def print_explored(console: Console, explored: Explored, space: Space) -> None:
    """The end of `explore`: what it judged and covered, what the target refuses, and each
    finding with where its suite file is."""
    what, parts = space.counted
    console.print(
        f"explored {explored.examples} {what} ({explored.steps} {parts}) on {space.target.id} "
        f"in {explored.seconds:.0f} s; examples kept in {explored.database}"
    )
    if explored.covered:
        values = sum(len(op.values) for op in explored.covered)
        print(
            f"the models judged covered {len(explored.covered)} ops and {values} attribute "
            f"values (each op's in {explored.record})"
        )
        each = ", ".join(f"{bucket} {n}" for bucket, n in explored.dimensions.items())
        print(f"drawn models by dimension: {each}")
    if explored.refusals:
        print(
            f"{space.target.id} does not do {len(explored.refusals)} thing(s), not counted as "
            f"bugs (each in {explored.record}):"
        )
        for refusal in explored.refusals:
            print(f"  {refusal.verdict}: {'; '.join(refusal.nodes)}")
    for finding in explored.findings:
        failure = finding.failure
        cut = "*" if finding.shrinking_cut else ""
        cause = failure.cause
        print(
            f"{failure.result.verdict}{f' ({cause})' if cause else ''}: {finding.size}{cut}, "
            "first seen after "
            f"{finding.examples_before} examples ({finding.seconds_to_first:.0f} s): "
            f"{finding.path}\n  {failure.result.message}"
        )
    if any(finding.shrinking_cut for finding in explored.findings):
        print(
            "* found in a pass whose shrinking the budget (its grace, or a kind's share) ended: "
            "it may shrink further; "
            "explore again over the same cache folder (Hypothesis replays it first)"
        )
    if not explored.findings:
        print("nothing found")
