"""Per backend: ms per case, and eager against capture per run, from the results of runs.

`python bench/gpu.py OUT [OUT ...]` reads every run under each `--out` folder (their
`runs/*/results.jsonl`) and prints a Markdown table for the README: cases and their verdicts,
the median wall time of a case in the pipeline, and, over the cells that ran both eager and
capture, the median of each mode's median run (a replay, under capture) and their ratio. Made for
the GPU runs of `nox -s gpu` (ort-native, wgpu) beside a SwiftShader run of ort-web; one run on
one machine: read the ratios.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.history import CaseResult, RunFolder  # noqa: E402


def results(folders: list[Path]) -> list[CaseResult]:
    return [
        result
        for folder in folders
        for path in sorted(folder.glob("runs/*/results.jsonl"))
        for result in RunFolder(path.parent).results()
    ]


def backend_of(result: CaseResult) -> str:
    """``name[@exact version][:build]``: runs of several versions count apart."""
    name, _, build = re.sub(r"@[^:]*", "", result.backend).partition(":")
    name = f"{name}@{result.version}" if result.version else name
    return f"{name}:{build}" if build else name


def rows(found: list[CaseResult]) -> list[str]:
    by_backend: dict[str, list[CaseResult]] = defaultdict(list)
    for result in found:
        by_backend[backend_of(result)].append(result)
    lines = [
        "| backend | cases | verdicts | ms per case (median) | eager ms/run | capture ms/run "
        "| capture / eager |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for backend, group in sorted(by_backend.items()):
        verdicts = ", ".join(f"{v} {n}" for v, n in Counter(r.verdict for r in group).items())
        wall = statistics.median(r.wall_ms for r in group)
        pairs = run_pairs(group)
        eager = statistics.median(e for e, _ in pairs) if pairs else None
        capture = statistics.median(c for _, c in pairs) if pairs else None
        ratio = f"{capture / eager:.2f}" if pairs else "-"
        lines.append(
            f"| {backend} | {len(group)} | {verdicts} | {wall:.1f} | {_ms(eager)} | "
            f"{_ms(capture)} | {ratio} |"
        )
    return lines


def run_pairs(group: list[CaseResult]) -> list[tuple[float, float]]:
    """(eager, capture) median run ms of each cell where both passed."""
    by_cell: dict[str, dict[str, float]] = defaultdict(dict)
    for result in group:
        median = result.timings.get("median_run_ms")
        if result.verdict == "pass" and median and not result.revisit:
            cell = result.case_id.rsplit("/", 1)[0]
            by_cell[cell][result.capture] = median
    return [(m["eager"], m["capture"]) for m in by_cell.values() if {"eager", "capture"} <= set(m)]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    print("\n".join(rows(results([Path(arg) for arg in sys.argv[1:]]))))
