"""Decode steps per second, eager against capture, per backend: the table in docs/throughput.md.

`python bench/decoder.py [--backend TARGET ...] [--ort-web-version 1.30.0] [--sizes tiny small]
[--timeout S]` runs the decoder suites' generation loops through the runner itself
(``runner.pipeline.execute``, as `python -m runner run` does), so a step is timed as a case
runs it: the backend prefills the prompt outside capture, and every decode step reads the KV
caches the device wrote and is fed only its token and mask. The times are the stored results'
own: ``median_run_ms``, the median of a case's decode steps after its first (replays, under
capture), and ``first_run_ms``, its first (the recording, under capture). Sizes: ``tiny``
(suites/decoder.yaml's ``llama-tiny*``, the default) and ``small`` (suites/decoder-heavy.yaml's
``llama-small*``). On ort-web's C++ builds the capture cases of both sizes are the ``-cpu-prefill``
twins (a capture after a device prefill fails there; the suite says why), whose decode steps
after the first are the same loop.

Prints a Markdown row per backend, size and weights: the median over its passing cases
(layouts and revisits) per mode, steps per second, capture's speed-up per step and how many
cases each mode's median is over (eager / capture); then every case that did not pass, by
name, verdict and the start of its message, untimed; and each size's cases and wall time. One
run on one machine: read the ratios as single observations.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.backends.base import BackendOptions  # noqa: E402
from runner.history import CaseResult  # noqa: E402
from runner.matrix import Case  # noqa: E402
from runner.pipeline import RunSettings, execute  # noqa: E402
from runner.reporters import LogLines  # noqa: E402
from runner.selection import RunPlan, Selection, select  # noqa: E402

TARGETS = ("wgpu", "ort-web:webgpu", "ort-web:jspi", "ort-web:jsep")
SIZES = {  # size: (suite, tags it needs, models)
    "tiny": (ROOT / "suites" / "decoder.yaml", (), "model=llama-tiny*"),
    "small": (ROOT / "suites" / "decoder-heavy.yaml", ("heavy",), "model=llama-small*"),
}
HEADER = (
    "| backend | size | weights | eager ms/step | capture ms/step | capture 1st step ms "
    "| steps/s eager | steps/s capture | speed-up | cases timed |\n"
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def progress(line: str) -> None:
    """The runner's log lines, on stderr (stdout is the table): a browser run is minutes long."""
    print(line, file=sys.stderr, flush=True)


def ran(size: str, args: argparse.Namespace, out: Path) -> list[tuple[Case, CaseResult]]:
    """The size's cases on the targets, each with its result."""
    suite, tags, models = SIZES[size]
    versions = {"ort-web": (args.ort_web_version,)}
    selection = Selection((suite,), tags, tuple(args.backend), versions, (models,))
    cases = {case.id: case for case in select(selection, progress)}
    options = BackendOptions(timeout_s=args.timeout)
    plan = RunPlan(tuple(cases.values()), selection=selection.recorded())
    summary = execute(plan, out, options, RunSettings(localize=False), LogLines(False, progress))
    return [(cases[result.case_id], result) for result in summary.results]


def ms(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def per_second(values: list[float]) -> str:
    return f"{1e3 / statistics.median(values):.1f}" if values else "-"


def rows(size: str, results: list[tuple[Case, CaseResult]]) -> tuple[list[str], list[str]]:
    """The table's rows for one size, by backend then weights, and the cases that did not
    pass."""
    timed: dict[tuple[str, str], dict[str, list[CaseResult]]] = defaultdict(
        lambda: {"eager": [], "capture": []}
    )
    failed = []
    for case, result in sorted(results, key=lambda pair: pair[0].backend.build_id):
        weights = "int4" if case.model.decoder.quantized else "float32"
        group = timed[(case.backend.build_id, weights)]  # a row even when nothing passed
        if result.verdict == "pass":
            group[result.capture].append(result)
        else:
            message = result.message.strip().splitlines()[0][:120] if result.message else ""
            failed.append(f"- `{result.case_id}`: `{result.verdict}` {message}")
    table = []
    for (backend, weights), modes in timed.items():
        eager = [r.timings["median_run_ms"] for r in modes["eager"]]
        capture = [r.timings["median_run_ms"] for r in modes["capture"]]
        first = [r.timings["first_run_ms"] for r in modes["capture"]]
        speedup = (
            f"{statistics.median(eager) / statistics.median(capture):.2f}x"
            if eager and capture
            else "-"
        )
        table.append(
            f"| {backend} | {size} | {weights} | {ms(eager)} | {ms(capture)} | {ms(first)} | "
            f"{per_second(eager)} | {per_second(capture)} | {speedup} | "
            f"{len(eager)} / {len(capture)} |"
        )
    return table, failed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend", action="append", default=[], help="default: " + ", ".join(TARGETS)
    )
    parser.add_argument("--ort-web-version", default="1.30.0")
    parser.add_argument(
        "--timeout", type=float, help="seconds per case (the suite's): a hang's cost"
    )
    parser.add_argument("--sizes", nargs="+", default=["tiny"], choices=list(SIZES))
    args = parser.parse_args(argv)
    args.backend = args.backend or list(TARGETS)
    table, failed, walls = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-decoder-") as folder:
        for size in args.sizes:
            began = time.perf_counter()
            results = ran(size, args, Path(folder) / size)
            walls.append(f"{size}: {len(results)} cases in {time.perf_counter() - began:.0f} s")
            size_rows, size_failed = rows(size, results)
            table += size_rows
            failed += size_failed
    print(HEADER)
    print("\n".join(table))
    if failed:
        print("\nnot passed, not timed:\n" + "\n".join(failed))
    print("\n" + "; ".join(walls))


if __name__ == "__main__":
    main()
