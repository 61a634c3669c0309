"""Detection figures for the README: injected faults caught, and false positives when clean.

    python bench/detection.py [--repeats 20]

Runs the canary suite as written (each canary injects one fault) and counts, per backend and
build, the faulted cases whose verdict was the expected one, and per fault where it was caught;
then runs the same cases with every fault removed `--repeats` times and counts any verdict other
than pass. Every case runs its input sequence (new inputs each run), as in any run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.backends.base import BackendOptions  # noqa: E402
from runner.pipeline import execute  # noqa: E402
from runner.selection import RunPlan, Selection, select  # noqa: E402
from runner.suite.spec import Expectation  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, default=ROOT / "suites" / "canaries.yaml")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    cases = select(Selection((args.suite,), tags=("heavy",)))  # the file, whatever its tags
    clean = [dataclasses.replace(c, inject=frozenset(), expectation=Expectation()) for c in cases]
    with tempfile.TemporaryDirectory() as tmp:
        faulted = execute(
            RunPlan(tuple(cases)), Path(tmp) / "faulted", BackendOptions(runs=3)
        ).results
        repeats = execute(
            RunPlan(tuple(clean * args.repeats)), Path(tmp) / "clean", BackendOptions(runs=3)
        )
    injected, caught, runs, false = Counter(), Counter(), Counter(), Counter()
    per_fault: dict[str, dict[str, str]] = {}
    for result in faulted:
        if result.injected:
            seen = result.outcome == "expected" and result.verdict != "pass"
            injected[result.backend] += 1
            caught[result.backend] += seen
            for fault in result.injected:
                per_fault.setdefault(fault, {})[result.backend] = (
                    result.verdict if seen else f"MISSED ({result.verdict})"
                )
    for result in repeats.results:
        runs[result.backend] += 1
        false[result.backend] += result.verdict != "pass"
    print(
        f"| backend | injected faults caught | false positives over {args.repeats} clean "
        "repeats |\n| --- | --- | --- |"
    )
    for backend in sorted(runs):
        print(
            f"| {backend} | {caught[backend]} / {injected[backend]} | "
            f"{false[backend]} / {runs[backend]} cases |"
        )
    print("\n| fault | verdict, by backend |\n| --- | --- |")
    for fault, seen in sorted(per_fault.items()):
        print(f"| `{fault}` | {'; '.join(f'{b}: {v}' for b, v in sorted(seen.items()))} |")
    if sum(false.values()):
        print("\nfalse positives:")
        for result in repeats.results:
            if result.verdict != "pass":
                print(f"  {result.case_id}: {result.verdict}: {result.message}")
    return 0 if caught == injected and not sum(false.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
