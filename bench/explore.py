"""Explore's pace and what it finds, per target: the table in docs/throughput.md#explore-measured.

`python bench/explore.py [--target TARGET[=BUDGET] ...] [--budget 3m] [--inject FAULT] [--seed
1] [--ort-web-version 1.30.0] [--found DIR] [SUITE --filter model=GLOB]` runs ``explore`` on
each target (default: wgpu and ort-web's jsep, webgpu and jspi builds) for its budget, with a
canary fault injected (default ``input-snapshot-at-capture``), over an example database of its
own in a temporary folder (the cache's would replay earlier findings at the first scenario). It
prints a Markdown row per target: scenarios tried, steps per second, scenarios per 10 minutes at
that pace (extrapolated), and each finding's verdict, time to first seen and the steps it was
shrunk to. The pace counts the whole explore, shrinking past the budget included. Findings go in
a folder per target under ``--found DIR`` (default: the temporary folder, deleted). One run on
one machine; read it with the machine's load in mind.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.backends.base import BackendOptions  # noqa: E402
from runner.cli import parse_duration  # noqa: E402
from runner.explore.explorer import Explored, ExploreRequest, explore  # noqa: E402
from runner.explore.space import explore_space  # noqa: E402
from runner.selection import Selection  # noqa: E402

TARGETS = ("wgpu", "ort-web:jsep", "ort-web:webgpu", "ort-web:jspi")
HEADER = (
    "| target | budget | scenarios | steps/s | scenarios per 10 min | found: verdict, first seen "
    "after, shrunk to |\n| --- | --- | --- | --- | --- | --- |"
)


@dataclass(frozen=True)
class Target:
    backend: str  # a --backend value naming one build
    budget_s: float


def parse_target(text: str, budget_s: float) -> Target:
    """``TARGET`` or ``TARGET=BUDGET`` (``ort-web:jspi=4m``)."""
    backend, _, budget = text.partition("=")
    return Target(backend, parse_duration(budget) if budget else budget_s)


def explored(target: Target, args: argparse.Namespace, folder: Path) -> Explored:
    versions = {"ort-web": tuple(args.ort_web_version)}
    selection = Selection(tuple(args.suites), (), (target.backend,), versions, tuple(args.filter))
    inject = frozenset(args.inject)
    space = explore_space(selection, inject)
    out = (args.found or folder / "found") / target.backend.replace(":", "-")
    request = ExploreRequest(
        space, target.budget_s, out, BackendOptions(inject=inject), args.seed, folder
    )
    return explore(request, lambda text: print(text, file=sys.stderr))


def row(target: Target, result: Explored) -> str:
    """One Markdown row: the pace, and each finding."""
    per_second = result.examples / result.seconds
    found = "; ".join(
        f"`{f.failure.result.verdict}` after {f.seconds_to_first:.0f} s "
        f"({f.examples_before} scenarios), {f.size}"
        for f in result.findings
    )
    return (
        f"| {target.backend} | {target.budget_s:.0f} s | {result.examples} in "
        f"{result.seconds:.0f} s | {result.steps / result.seconds:.2f} | "
        f"{per_second * 600:.0f} | {found or 'nothing'} |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", type=Path, default=[ROOT / "suites" / "smoke.yaml"])
    parser.add_argument("--filter", action="append", default=[], help="default model=encoder-small")
    parser.add_argument("--target", action="append", default=[], help="TARGET[=BUDGET]")
    parser.add_argument("--budget", type=parse_duration, default=180.0, help="per target (3m)")
    parser.add_argument("--inject", action="append", default=[])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ort-web-version", action="append", default=[])
    parser.add_argument("--found", type=Path, help="keep findings here (default: deleted)")
    args = parser.parse_args(argv)
    args.filter = args.filter or ["model=encoder-small"]
    args.inject = args.inject or ["input-snapshot-at-capture"]
    args.ort_web_version = args.ort_web_version or ["1.30.0"]
    targets = [parse_target(t, args.budget) for t in args.target or TARGETS]
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-explore-") as folder:
        for target in targets:
            print(row(target, explored(target, args, Path(folder))), flush=True)


if __name__ == "__main__":
    main()
