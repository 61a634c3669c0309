"""``python -m runner`` / ``regress``: a short pipeline of small functions per command.

Exit codes (docs/ci.md): 0 every verdict as expected; 1 some verdict unexpected (or the run
stopped early: --maxfail, --run-timeout); 2 invalid input; 3 environment unusable; 5 no case
selected; 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from runner.backends import backend_ids
from runner.backends.base import BackendOptions
from runner.errors import EnvironmentUnusable, ExitCode, InvalidInput
from runner.reporters import print_bisected, print_explored, print_summary, run_reporter
from runner.selection import (
    Selection,
    check_faults,
    declared_cases,
    find_case,
    load,
    plan_run,
    select,
    versioned_backends,
)

DEFAULT_SUITES = Path("suites")
DEFAULT_OUT = Path("reports")
DEFAULT_FOUND = Path("found")
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}

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
        "(model, shape, layout, backend, bundle, version, capture, buffers, graphs, suite; "
        "for op tests also file, test, operator); repeatable, "
        "all must match",
    )
    parser.add_argument("--shard", metavar="I/N", help="run only shard I of N (1-based)")
    for descriptor in versioned_backends():
        parser.add_argument(
            f"--{descriptor.name}-version",
            action="append",
            default=[],
            metavar="VERSION",
            help=f"run {descriptor.name} on this version instead of the suites' own: an exact "
            "version, a dist-tag, dev, or a build folder; repeatable",
        )


def _device_args(parser: argparse.ArgumentParser, timeout_per: str = "") -> None:
    """Where the backends run, the same for every command that runs cases: --adapter,
    --chromium, and --timeout (seconds per `timeout_per`) where there is one."""
    parser.add_argument(
        "--adapter",
        help="wgpu adapter: name substring or backend type; ort-native: a substring of the EP "
        "device (vendor, PCI bus id), or cpu for onnxruntime's CPU EP (no capture); ort-genai: "
        "cpu runs genai's loop on the CPU EP",
    )
    parser.add_argument("--chromium", help="Chromium executable for ort-web (or $REGRESS_CHROMIUM)")
    if timeout_per:
        parser.add_argument(
            "--timeout", type=float, help=f"seconds per {timeout_per} (default: the suite's)"
        )


def _out_arg(parser: argparse.ArgumentParser, what: str, default: Path | None) -> None:
    """--out: the folder a command writes, or reads its history from (`what`)."""
    parser.add_argument("--out", type=Path, default=default, help=what)


def parse_duration(text: str) -> float:
    """Seconds from ``90s``, ``10m``, ``1h`` or a bare number of seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in DURATION_UNITS else (text, "s")
    try:
        seconds = float(number) * DURATION_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: say 90s, 10m or 1h") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a budget must be more than nothing")
    return seconds


@functools.cache
def build_parser() -> argparse.ArgumentParser:
    """The command line, built once a process: building takes 3 ms (argparse lays out every
    option's help), which thousands of in-process calls (the tests) would pay each time; parsing
    leaves it as it was, and no command changes the lists of its defaults."""
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
    _out_arg(run, "output folder (reports/)", DEFAULT_OUT)
    run.add_argument(
        "--runs",
        type=int,
        default=3,
        help="runs per case, each with new inputs but the last, which repeats the one before: "
        "the first records, the rest are timed (default 3)",
    )
    _device_args(run, timeout_per="case")
    run.add_argument(
        "--run-timeout",
        type=float,
        metavar="SECONDS",
        help="start no layout-change sequence or scenario after this many seconds (one started "
        "runs to its end); the run is marked incomplete",
    )
    run.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="FAULT",
        help="inject a named fault to prove the detectors (see `doctor`)",
    )
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
    run.add_argument(
        "--lf",
        "--last-failed",
        dest="last_failed",
        action="store_true",
        help="rerun the cases whose latest result in --out's history was unexpected (with the "
        "cases before them in their layout sequence); none recorded: run nothing, exit 5",
    )
    run.add_argument(
        "-x",
        "--exitfirst",
        dest="maxfail",
        action="store_const",
        const=1,
        help="stop after the first unexpected result (--maxfail 1)",
    )
    run.add_argument(
        "--maxfail",
        type=int,
        metavar="N",
        help="stop after N unexpected results; the run is marked incomplete (exit 1)",
    )
    noise = run.add_mutually_exclusive_group()
    noise.add_argument(
        "-q",
        "--quiet",
        dest="verbosity",
        action="store_const",
        const=-1,
        default=0,
        help="print only the summary",
    )
    noise.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        action="store_const",
        const=1,
        help="also print each failure's message as it happens",
    )

    report = commands.add_parser("report", help="build reports/index.html from the history")
    _out_arg(report, "reports folder", DEFAULT_OUT)
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
    _out_arg(new_case, "reports folder holding history.sqlite", DEFAULT_OUT)

    repro = commands.add_parser(
        "repro",
        help="write a folder that reproduces a failing result on its own (a minimal model, "
        "inputs, expected outputs, a page or script, ISSUE.md), for an upstream bug report",
    )
    repro.add_argument("result_id", help="result id from the report (a unique prefix is enough)")
    _out_arg(repro, "the folder to write (default: repro-RESULT_ID)", None)
    repro.add_argument(
        "--reports",
        type=Path,
        default=DEFAULT_OUT,
        help="reports folder holding history.sqlite (reports/)",
    )
    repro.add_argument(
        "--full-model", action="store_true", help="bundle the whole model, without cutting it"
    )
    repro.add_argument(
        "--with-fault",
        action="store_true",
        help="carry the result's injected faults (canaries), labelled as injected",
    )
    repro.add_argument(
        "--local",
        action="store_true",
        help="copy the backend's runtime (onnxruntime-web's dist files) in, so the folder "
        "runs offline; default: import it from its published URL",
    )
    repro.add_argument(
        "--force",
        action="store_true",
        help="bundle a passing result too; write over a folder that is not empty",
    )
    _device_args(repro)

    merge = commands.add_parser("merge", help="merge --shard outputs into one history and report")
    merge.add_argument("sources", nargs="+", type=Path, help="the shards' --out folders")
    _out_arg(merge, "merged reports folder", DEFAULT_OUT)
    merge.add_argument("--run-id", help="id of the merged run (default: the first shard's)")

    bisect = commands.add_parser(
        "bisect",
        help="find the first version between a good and a bad one whose verdict for a case "
        "differs from the good one's",
    )
    bisect.add_argument("case_id", help="a case id as `list` or the report shows it")
    _suite_args(bisect)
    bisect.add_argument(
        "--good",
        required=True,
        metavar="V1",
        help="a version whose verdict is the reference (exact, dist-tag, dev)",
    )
    bisect.add_argument("--bad", required=True, metavar="V2", help="a newer version")
    _out_arg(bisect, "output folder (reports/)", DEFAULT_OUT)
    bisect.add_argument("--runs", type=int, default=3, help="runs per case (default 3)")
    _device_args(bisect, timeout_per="case")

    explore = commands.add_parser(
        "explore",
        help="draw scenarios (or models) on one backend target for a time budget; write each "
        "failure, shrunk to a minimal scenario (or model), as a suite file",
    )
    _selection_args(explore)
    explore.add_argument(
        "--models",
        choices=("suites", "generated"),
        default="suites",
        help="suites: draw scenarios over the suites' models (default); generated: draw small "
        "ONNX models from an op vocabulary, each judged as a suite's cases are",
    )
    explore.add_argument(
        "--ops",
        action="append",
        default=[],
        metavar="OP[,OP...]",
        help="with --models generated: draw only these ops (default: every op it knows)",
    )
    explore.add_argument(
        "--dtypes",
        action="append",
        default=[],
        metavar="DTYPE[,DTYPE...]",
        help="with --models generated: the float types drawn models take, float32 and float16 "
        "(default: both, float16 until the target is seen to lack it)",
    )
    explore.add_argument(
        "--opsets",
        action="append",
        default=[],
        metavar="OPSET[,OPSET...]",
        help="with --models generated: the ONNX opsets drawn models import, 20 and 18 (default: "
        "both; an op's kernel may differ by opset, and 18 has no Gelu)",
    )
    explore.add_argument(
        "--sizes",
        action="append",
        default=[],
        metavar="RANGE[,RANGE...]",
        help="with --models generated: the ranges a graph input's wide dim is drawn from, 1-6, "
        "7-64, 65-256 and 257-4096, each holding sizes at kernel boundaries (default: all; "
        "without 1-6 every graph input has a wide dim)",
    )
    explore.add_argument(
        "--max-ops",
        type=int,
        metavar="N",
        help="with --models generated: the most ops a drawn model holds, 1 to 6 (default: 6)",
    )
    explore.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="WHAT[,WHAT...]",
        help="with --models generated: leave out of the draw fusions (a Conv, MatMul or Gemm "
        "then an activation onnxruntime fuses), defaults (attributes left to their default) "
        "or data-layouts (a second session preferring NCHW)",
    )
    explore.add_argument(
        "--budget",
        type=parse_duration,
        default=600.0,
        metavar="TIME",
        help="how long to explore: 90s, 10m, 1h or seconds (default 10m); a failure found "
        "in it may overrun it to shrink, by a quarter (at least 30 s) or as long as 40 "
        "scenarios took, if longer",
    )
    explore.add_argument("--seed", type=int, help="Hypothesis's seed (default: random)")
    explore.add_argument(
        "--max-findings",
        type=int,
        metavar="N",
        help="stop once N findings are written, within the budget (default: spend the budget)",
    )
    explore.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="FAULT",
        help="inject a named fault (a canary: explore should find it)",
    )
    _out_arg(explore, "where findings go (found/)", DEFAULT_FOUND)
    explore.add_argument(
        "--database",
        type=Path,
        metavar="DIR",
        help="the folder of example databases to replay and add to, shared by many explores "
        "at once (default: the cache folder's explore/)",
    )
    explore.add_argument(
        "--replay-from",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="also replay the examples of this folder of databases (e.g. an earlier "
        "campaign's, downloaded), never writing it; repeatable",
    )
    _device_args(explore, timeout_per="scenario or case")

    explore_report = commands.add_parser(
        "explore-report",
        help="merge explores' findings (their --out folders): one row per bug, new or pinned "
        "by suites/bugs/, and what they covered",
    )
    explore_report.add_argument(
        "found", nargs="+", type=Path, metavar="FOUND", help="folders explore wrote (--out)"
    )
    _out_arg(
        explore_report,
        "where index.html, summary.md and bugs.json go (reports/explore/)",
        DEFAULT_OUT / "explore",
    )
    explore_report.add_argument(
        "--bugs",
        type=Path,
        default=DEFAULT_SUITES / "bugs",
        metavar="DIR",
        help="the suites whose scenarios pin known bugs (suites/bugs/)",
    )
    explore_report.add_argument(
        "--database",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="a job's folder of example databases (its explore --database), merged into "
        "--database-out; repeatable",
    )
    explore_report.add_argument(
        "--previous-database",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="the campaign's databases the jobs replayed (--replay-from): those of targets no "
        "job ran are carried into --database-out",
    )
    explore_report.add_argument(
        "--database-out",
        type=Path,
        metavar="DIR",
        help="where the next campaign's folder of databases goes",
    )

    commands.add_parser("doctor", help="say what this machine offers and how to fix what is not")
    return parser


def _selection(args: argparse.Namespace) -> Selection:
    """The cases the arguments ask for, as a request ``runner.selection`` answers."""
    versions = {
        d.name: tuple(getattr(args, f"{d.name.replace('-', '_')}_version"))
        for d in versioned_backends()
    }
    last_failed = getattr(args, "last_failed", False)  # `run` has it, `list` not
    return Selection(
        suites=tuple(args.suites),
        tags=tuple(args.tag),
        backends=tuple(args.backend),
        versions=versions,
        filters=tuple(args.filter),
        shard=args.shard,
        last_failed=args.out / "history.sqlite" if last_failed else None,
    )


def cmd_validate(args: argparse.Namespace) -> ExitCode:
    """Files only, never the network: what only a registry or a fetch can tell (a version, a
    package's wheel) is said to be unchecked, and the summary says how much was."""
    suites = load(Selection(tuple(args.suites), tuple(args.tag)))
    cases = declared_cases(suites)
    unchecked = [note for suite in suites for note in suite.unchecked]
    for note in unchecked:
        print(f"note: {note}", file=sys.stderr)
    counts = f"{len(suites)} suite(s), {len(cases)} case(s)"
    if unchecked:
        print(f"{counts}: {len(unchecked)} unchecked (the notes say what), the rest ok")
    else:
        print(f"ok: {counts}")
    return ExitCode.OK


def cmd_list(args: argparse.Namespace) -> ExitCode:
    for case in select(_selection(args)):
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


def cmd_run(args: argparse.Namespace) -> ExitCode:
    from runner.pipeline import RunSettings, execute, fetch_packages

    if args.runs < 1:
        raise InvalidInput("--runs must be at least 1")
    if args.maxfail is not None and args.maxfail < 1:
        raise InvalidInput("--maxfail must be at least 1")
    selection = _selection(args)
    plan = plan_run(selection, console.print, lambda cases: fetch_packages(cases, console.print))
    cases, scenarios = plan.cases, plan.scenarios
    if not cases and not scenarios:
        console.print("no cases selected")
        return ExitCode.NO_CASES
    check_faults(cases, args.inject, scenarios)
    options = BackendOptions(
        runs=args.runs,
        timeout_s=args.timeout,
        inject=frozenset(args.inject),
        adapter=args.adapter,
        chromium=args.chromium,
    )
    settings = RunSettings(args.localize, args.run_timeout, args.maxfail)
    with run_reporter(console, len(cases) + len(scenarios), args.verbosity) as reporter:
        summary = execute(plan, args.out, options, settings, reporter)
    print_summary(console, summary, args.out)
    if args.report:
        _build_reports(args.out)
    return summary.exit_code


def _build_reports(out: Path, last: int = 20) -> None:
    from runner.report import build_reports

    for path in build_reports(out, grid_runs=last):
        print(path)


def cmd_report(args: argparse.Namespace) -> ExitCode:
    _build_reports(args.out, args.last)
    return ExitCode.OK


def cmd_new_case(args: argparse.Namespace) -> ExitCode:
    from runner.history.lookup import find_result
    from runner.newcase import case_snippet

    print(case_snippet(find_result(args.out / "history.sqlite", args.result_id)), end="")
    return ExitCode.OK


def cmd_repro(args: argparse.Namespace) -> ExitCode:
    from runner.repro.make import ReproOptions, make_bundle

    options = ReproOptions(
        out=args.out,
        full_model=args.full_model,
        with_fault=args.with_fault,
        local=args.local,
        force=args.force,
        chromium=args.chromium,
        adapter=args.adapter,
    )
    made = make_bundle(
        args.reports, args.result_id, options, lambda text: console.print(escape(text))
    )
    print(f"wrote {made.folder}: {', '.join(sorted({f.split('/')[0] for f in made.files}))}")
    print(made.model_line)
    for note in made.notes:
        print(f"note: {note}")
    verdict = made.verdict
    if not made.reproduced:
        console.print(
            f"[yellow]not reproduced[/yellow]: the rerun gave {verdict}, the result "
            f"{made.result.verdict}; the bundle is written anyway"
        )
        return ExitCode.UNEXPECTED
    print(f"reproduced: {verdict}; to run it:")
    for step in made.runner.steps:
        print(f"  - {step}")
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


def _fetched_case(selection: Selection, case_id: str):
    """The suite and case `case_id` names, its model fetched first where a package holds it, as
    `run` fetches: a probe finds it in the cache, and a fetched decoder's dims join its ids, so
    the id a report shows names it on a machine that has not fetched it yet."""
    from runner.pipeline import fetch_packages

    suites = load(selection)
    model = case_id.split("/", 1)[0]  # the cases as declared: no registry asked
    if fetch_packages([c for c in declared_cases(suites) if c.model.name == model], console.print):
        suites = load(selection)
    return find_case(suites, case_id)


def cmd_bisect(args: argparse.Namespace) -> ExitCode:
    from runner.bisect import bisect_versions

    suite, case = _fetched_case(Selection(tuple(args.suites), tuple(args.tag)), args.case_id)
    options = BackendOptions(
        runs=args.runs, timeout_s=args.timeout, chromium=args.chromium, adapter=args.adapter
    )
    found = bisect_versions(suite, case, args.good, args.bad, args.out, options, console.print)
    print_bisected(console, found, args.out)
    return ExitCode.UNEXPECTED if found.first_differing is None else ExitCode.OK


MIN_MODEL_BUDGET_S = 10.0  # a drawn model's cases on ort-web take seconds, shrinking more


def cmd_explore(args: argparse.Namespace) -> ExitCode:
    """Exit 1 when something was found (each finding a suite file under --out), else 0."""
    from runner.explore.explorer import ExploreRequest, explore
    from runner.explore.space import explore_space

    if args.shard:
        raise InvalidInput("explore draws its own scenarios: --shard does not apply")
    inject = frozenset(args.inject)
    options = BackendOptions(
        timeout_s=args.timeout, inject=inject, adapter=args.adapter, chromium=args.chromium
    )
    ops, dtypes, opsets, sizes, without = map(
        _listed, (args.ops, args.dtypes, args.opsets, args.sizes, args.without)
    )
    if args.models == "generated" and args.budget < MIN_MODEL_BUDGET_S:
        raise InvalidInput(
            f"--budget {args.budget:g}s: too short to run one generated model and shrink it; "
            f"expected at least {MIN_MODEL_BUDGET_S:g}s"
        )
    if args.max_findings is not None and args.max_findings < 1:
        raise InvalidInput("--max-findings must be at least 1")
    narrowed = (sizes, args.max_ops, without)
    space = explore_space(_selection(args), inject, args.models, ops, dtypes, opsets, narrowed)
    request = ExploreRequest(
        space,
        args.budget,
        args.out,
        options,
        args.seed,
        args.database,
        tuple(args.replay_from),
        args.max_findings,
    )
    explored = explore(request, lambda text: console.print(escape(text)))
    print_explored(console, explored, space)
    return ExitCode.UNEXPECTED if explored.findings else ExitCode.OK


def _listed(given: list[str]) -> tuple[str, ...]:
    """The items of an option given as ``A,B`` any number of times."""
    return tuple(item for text in given for item in text.split(",") if item)


def cmd_explore_report(args: argparse.Namespace) -> ExitCode:
    """Exit 0 whatever was found (a campaign's new finding is news, not a failure); 2 on a
    folder or record it cannot read."""
    from runner.campaign.merge import merge, read_jobs
    from runner.campaign.render import write_report
    from runner.explore.database import merge_folders

    if (args.database or args.previous_database) and not args.database_out:
        raise InvalidInput("--database and --previous-database merge into --database-out: name it")
    jobs = read_jobs(args.found)
    campaign = merge(jobs, args.bugs)
    if args.database_out:
        ran = {job.record.database for job in jobs}
        merge_folders(args.database_out, args.database, args.previous_database, ran)
        print(f"example databases for the next campaign: {args.database_out}")
    html, summary, _ = write_report(campaign, args.out)
    new = sum(bug.new for bug in campaign.bugs)
    print(
        f"{len(campaign.bugs)} bug(s) over {len(campaign.coverage.jobs)} explore(s): {new} new, "
        f"{len(campaign.bugs) - new} pinned by {args.bugs}; {html}, {summary}"
    )
    for bug in campaign.bugs:
        where = ", ".join(f"{t} {v}" for t, v in bug.where)
        mark = "new" if bug.new else "pinned"
        what = bug.key.cause or f"{bug.verdict} at {bug.key.action}"
        print(f"{mark}: {what} on {where}: {bug.scenarios[0].yaml}")
    return ExitCode.OK


def cmd_doctor(args: argparse.Namespace) -> ExitCode:
    from runner.doctor import diagnose

    complete = True
    for check in diagnose():
        mark = "[green]ok[/green]" if check.ok else "[red]missing[/red]"
        if not check.ok and check.skips:  # only that backend's cases are skipped
            mark = "    [yellow]skips[/yellow]"
        console.print(f"{mark:>20} {check.check}: {check.detail}")
        if not check.ok and check.fix:
            console.print(f"{'':>9} fix: {check.fix}")
        complete &= check.ok or check.skips
    return ExitCode.OK if complete else ExitCode.ENVIRONMENT


COMMANDS = {
    "validate": cmd_validate,
    "list": cmd_list,
    "run": cmd_run,
    "report": cmd_report,
    "merge": cmd_merge,
    "new-case": cmd_new_case,
    "repro": cmd_repro,
    "bisect": cmd_bisect,
    "explore": cmd_explore,
    "explore-report": cmd_explore_report,
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
    except BrokenPipeError:  # `regress list | head`: the reader has all it wants
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
