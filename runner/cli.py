"""``python -m runner`` / ``regress``: a short pipeline of small functions per command.

Exit codes (README): 0 every verdict as expected; 1 some verdict unexpected; 2 invalid input;
3 environment unusable; 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from runner.backends import REGISTRY, backend_ids, parse_backend
from runner.backends.base import BackendOptions
from runner.errors import EnvironmentUnusable, ExitCode, InvalidInput
from runner.matrix import Case, expand_matrix, parse_shard, select_cases, shard_cases
from runner.suite import load_suites
from runner.suite.spec import Suite
from runner.verdicts import FAILING_OUTCOMES

DEFAULT_SUITES = Path("suites")
DEFAULT_OUT = Path("reports")

console = Console(stderr=True, highlight=False, soft_wrap=True)


def _suite_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "suites",
        nargs="*",
        type=Path,
        default=[DEFAULT_SUITES],
        help="suite files or folders (default: suites/)",
    )
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        help="also run suites with this tag (e.g. heavy); repeatable",
    )


def _selection_args(parser: argparse.ArgumentParser) -> None:
    _suite_args(parser)
    parser.add_argument(
        "--backend",
        action="append",
        default=[],
        help="run on this backend instead of the suites' own: "
        f"{', '.join(backend_ids())}; repeatable",
    )
    parser.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="PATTERN",
        help="keep cases whose id matches this glob, or key=glob on a field "
        "(model, shape, layout, backend, bundle, capture, buffers, graphs, suite; for op tests "
        "also file, test, operator); repeatable, "
        "all must match",
    )
    parser.add_argument("--shard", metavar="I/N", help="run only shard I of N (1-based)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="regress",
        description="Regression suite for WebGPU graph-capture bugs in ONNX Runtime.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser("validate", help="check suite files and report every problem")
    _suite_args(validate)

    listing = commands.add_parser("list", help="list the cases the suites expand to")
    _selection_args(listing)

    run = commands.add_parser("run", help="run cases and record their results")
    _selection_args(run)
    run.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (reports/)")
    run.add_argument(
        "--runs",
        type=int,
        default=3,
        help="runs per case, each with new inputs but the last, which repeats the one before: "
        "the first records, the rest are timed (default 3)",
    )
    run.add_argument("--timeout", type=float, help="seconds per case (default: the suite's)")
    run.add_argument(
        "--run-timeout",
        type=float,
        metavar="SECONDS",
        help="start no case after this many seconds; the run is marked incomplete",
    )
    run.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="FAULT",
        help="inject a named fault to prove the detectors (see `doctor`)",
    )
    run.add_argument("--adapter", help="wgpu adapter: name substring or backend type")
    run.add_argument("--chromium", help="Chromium executable for ort-web (or $REGRESS_CHROMIUM)")
    run.add_argument(
        "--no-localize",
        dest="localize",
        action="store_false",
        help="skip rerunning failures to find the first divergent node",
    )
    run.add_argument(
        "--report",
        action="store_true",
        help="build the reports (index.html, junit.xml, summary.md) afterwards",
    )

    report = commands.add_parser("report", help="build reports/index.html from the history")
    report.add_argument("--out", type=Path, default=DEFAULT_OUT, help="reports folder")
    report.add_argument(
        "--last",
        type=int,
        default=20,
        metavar="N",
        help="runs shown in the status grid and trends (default 20)",
    )

    new_case = commands.add_parser(
        "new-case", help="print a YAML case for a result, ready to paste into a suite"
    )
    new_case.add_argument("result_id", help="result id from the report (a unique prefix is enough)")
    new_case.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="reports folder holding history.sqlite"
    )

    merge = commands.add_parser("merge", help="merge --shard outputs into one history and report")
    merge.add_argument("sources", nargs="+", type=Path, help="the shards' --out folders")
    merge.add_argument("--out", type=Path, default=DEFAULT_OUT, help="merged reports folder")
    merge.add_argument("--run-id", help="id of the merged run (default: the first shard's)")

    commands.add_parser("doctor", help="say what this machine offers and how to fix what is not")
    return parser


def _retarget(suite: Suite, backends: Sequence[str]) -> Suite:
    """The suite with its backends replaced by those named on the command line."""
    targets = [target for text in backends for target in parse_backend(text)]
    return dataclasses.replace(suite, backends=tuple(dict.fromkeys(targets)))


def select(args: argparse.Namespace) -> list[Case]:
    suites = load_suites(args.suites, args.tag)
    if args.backend:
        suites = [_retarget(suite, args.backend) for suite in suites]
    cases = select_cases(expand_matrix(suites), args.filter)
    if args.shard:
        try:
            cases = shard_cases(cases, *parse_shard(args.shard))
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
    return cases


def cmd_validate(args: argparse.Namespace) -> ExitCode:
    suites = load_suites(args.suites, args.tag)
    cases = expand_matrix(suites)
    print(f"ok: {len(suites)} suite(s), {len(cases)} case(s)")
    return ExitCode.OK


def cmd_list(args: argparse.Namespace) -> ExitCode:
    for case in select(args):
        expectation = case.expectation
        note = (
            ""
            if expectation.expect == {"pass"}
            else (
                f"  expect {','.join(sorted(expectation.expect))}"
                + (f" ({expectation.bug})" if expectation.bug else "")
            )
        )
        print(case.id + note)
    return ExitCode.OK


def check_faults(cases: list[Case], injected: list[str]) -> None:
    """Every fault named by --inject or a suite's `inject:` exists on its case's backend."""
    faults = {name: REGISTRY[name].faults for name in sorted({c.backend.name for c in cases})}
    every = sorted({fault for names in faults.values() for fault in names})
    unknown = sorted(set(injected) - set(every))
    if unknown:
        raise InvalidInput(
            f"--inject {', '.join(unknown)}: no such fault for these backends; "
            f"expected one of {', '.join(every) or '(none)'}"
        )
    problems = sorted(
        {
            f"{case.suite.path}: case {case.id} injects {fault!r}, which backend "
            f"{case.backend.name} does not have; expected one of "
            f"{', '.join(faults[case.backend.name]) or '(none)'}"
            for case in cases
            for fault in case.inject
            if fault not in faults[case.backend.name]
        }
    )
    if problems:
        raise InvalidInput(problems)


def cmd_run(args: argparse.Namespace) -> ExitCode:
    from runner.pipeline import execute

    cases = select(args)
    if not cases:
        console.print("no cases selected")
        return ExitCode.OK
    check_faults(cases, args.inject)
    if args.runs < 1:
        raise InvalidInput("--runs must be at least 1")
    options = BackendOptions(
        runs=args.runs,
        timeout_s=args.timeout,
        inject=frozenset(args.inject),
        adapter=args.adapter,
        chromium=args.chromium,
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[case]}"),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("running", total=len(cases), case="")
        selection = {
            "filters": args.filter,
            "shard": args.shard,
            "backends": args.backend,
            "tags": args.tag,
        }
        summary = execute(
            cases,
            args.out,
            options,
            selection,
            args.localize,
            args.run_timeout,
            on_start=lambda case: progress.update(task, case=case.id),
            on_result=lambda result: progress.advance(task),
        )
    _print_summary(summary, args.out)
    if args.report:
        _build_reports(args.out)
    return summary.exit_code


def _print_summary(summary, out: Path) -> None:
    console.print(f"run {summary.run_id}: {len(summary.results)} case(s), {summary.status}")
    table = Table()
    table.add_column("verdict")
    counts = Counter((r.verdict, r.backend) for r in summary.results)
    backends = sorted({b for _, b in counts})
    for backend in backends:
        table.add_column(backend, justify="right")
    for verdict in sorted({v for v, _ in counts}):
        table.add_row(verdict, *(str(counts.get((verdict, b), "")) for b in backends))
    console.print(table)
    for result in summary.results:
        if result.outcome in FAILING_OUTCOMES:
            want = ",".join(result.expected)
            console.print(
                f"[red]{result.outcome}[/red] {result.case_id}: {result.verdict} "
                f"(expected {want}) {result.message}"
            )
    console.print(
        f"references computed: {summary.references_computed}; "
        f"results in {out / 'runs' / summary.run_id}"
    )
    if summary.message:
        console.print(f"[yellow]{summary.status}[/yellow]: {summary.message}")


def _build_reports(out: Path, last: int = 20) -> None:
    from runner.report import build_reports

    for path in build_reports(out, grid_runs=last):
        print(path)


def cmd_report(args: argparse.Namespace) -> ExitCode:
    _build_reports(args.out, args.last)
    return ExitCode.OK


def cmd_new_case(args: argparse.Namespace) -> ExitCode:
    from runner.report.newcase import case_snippet, find_result

    print(case_snippet(find_result(args.out / "history.sqlite", args.result_id)), end="")
    return ExitCode.OK


def cmd_merge(args: argparse.Namespace) -> ExitCode:
    from runner.history.merge import merge_shards

    summary = merge_shards(args.sources, args.out, args.run_id)
    print(
        f"merged {summary.shard_runs} shard run(s), {summary.results_added} result(s) into "
        f"{args.out} as run {summary.run_id}"
    )
    _build_reports(args.out)
    return ExitCode.OK


def cmd_doctor(args: argparse.Namespace) -> ExitCode:
    from runner.doctor import diagnose

    complete = True
    for check in diagnose():
        mark = "[green]ok[/green]" if check.ok else "[red]missing[/red]"
        console.print(f"{mark:>20} {check.check}: {check.detail}")
        if not check.ok and check.fix:
            console.print(f"{'':>9} fix: {check.fix}")
        complete &= check.ok
    return ExitCode.OK if complete else ExitCode.ENVIRONMENT


COMMANDS = {
    "validate": cmd_validate,
    "list": cmd_list,
    "run": cmd_run,
    "report": cmd_report,
    "merge": cmd_merge,
    "new-case": cmd_new_case,
    "doctor": cmd_doctor,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(COMMANDS[args.command](args))
    except InvalidInput as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return int(ExitCode.INVALID_INPUT)
    except EnvironmentUnusable as exc:
        print(f"environment unusable: {exc}", file=sys.stderr)
        return int(ExitCode.ENVIRONMENT)
    except KeyboardInterrupt:
        console.print("interrupted")
        return int(ExitCode.INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
