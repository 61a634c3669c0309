"""Suite throughput: how much of a run is the backends' own work, against a naive harness.

Run with `nox -s bench` (or `python bench/bench.py`); prints a Markdown table for the README.
Measured in one run on one machine, so read the ratios, not the absolute times.

- cold: the bundled suites with an empty reference cache;
- warm: the same again with the cache filled (must compute no reference);
- inside: time the backends report for session creation and runs (each run until its outputs
  are on the host), measured in the page or the executor (session + first run + median x later
  runs), summed over cases;
- overhead: wall / inside, on the warm run; where the outside time goes; and the ratio over the
  cases after each page's first, which a large matrix tends to;
- naive: the ort-web cases of the warm run (all, or the first --naive-cases) through a
  straightforward harness (a new browser per case, no reference cache), against the same cases
  in the warm run, and against their time inside the backends (the speedup a harness costing
  nothing would reach: the backends' own work bounds it);
- shards: the whole suite as 1 shard against 2 concurrent shards (this machine has 2 cores);
- peak memory: the largest sum of resident memory over the process tree (browser included), in
  the 1-shard run.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.backends.base import BackendOptions  # noqa: E402
from runner.backends.ortweb.backend import OrtWebBackend  # noqa: E402
from runner.backends.ortweb.browser import descendant_pids  # noqa: E402
from runner.oracle import ReferenceCache  # noqa: E402
from runner.pipeline import RunSettings, execute  # noqa: E402
from runner.report.junit import case_seconds  # noqa: E402
from runner.selection import RunPlan, Selection, select  # noqa: E402
from runner.step import Step  # noqa: E402


def inside_ms(result) -> float:
    return case_seconds(result.timings) * 1000


def timed_execute(cases, out: Path, options: BackendOptions):
    began = time.perf_counter()
    summary = execute(RunPlan(tuple(cases)), out, options, RunSettings(localize=False))
    return summary, time.perf_counter() - began


def naive(cases, options: BackendOptions) -> tuple[float, float]:
    """A new browser per case and no reference cache: what a first script would do.

    Wall seconds, and seconds inside the backend.
    """
    began = time.perf_counter()
    inside_s = 0.0
    for case in cases:
        backend = OrtWebBackend(options)
        try:
            judged = Step(ReferenceCache(None).references, options).run(case, backend)
        finally:
            backend.close()
        inside_s += case_seconds(dataclasses.asdict(judged.run.timings))
    return time.perf_counter() - began, inside_s


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of `pid` and every descendant, from /proc."""
    total = 0
    for current in [pid, *descendant_pids(pid)]:
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def run_cli(args: list[str], out: Path) -> tuple[float, int]:
    """Wall seconds and peak tree RSS (KiB) of `python -m runner run ...`."""
    command = [sys.executable, "-m", "runner", "run", *args, "--out", str(out), "--no-localize"]
    began = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_kib(proc.pid))
        time.sleep(0.2)
    return time.perf_counter() - began, peak


def shards(suites: list[str], work: Path) -> tuple[float, float, int]:
    """Seconds for 1 shard and for 2 concurrent ones, and the peak memory (KiB) of the 1."""
    one, peak_kib = run_cli([*suites, "--shard", "1/1"], work / "one")
    began = time.perf_counter()
    threads = [
        threading.Thread(target=run_cli, args=([*suites, "--shard", f"{i}/2"], work / f"two-{i}"))
        for i in (1, 2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return one, time.perf_counter() - began, peak_kib


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", default=["suites"])
    parser.add_argument(
        "--naive-cases",
        type=int,
        default=0,
        help="run only the first N ort-web cases through the naive harness (default: all)",
    )
    args = parser.parse_args()
    options = BackendOptions(runs=3)
    cases = select(Selection(tuple(Path(s) for s in args.suites)))
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)
        cold, cold_s = timed_execute(cases, work / "reports", options)
        warm, warm_s = timed_execute(cases, work / "reports", options)
        inside_s = sum(inside_ms(r) for r in warm.results) / 1000
        web_all = [r for r in warm.results if r.backend.startswith("ort-web")]
        web = web_all[: args.naive_cases or None]
        web_ids = {r.case_id for r in web}
        web_cases = [c for c in cases if c.id in web_ids]
        # a naive harness has no sequences: each case alone, in a fresh browser
        web_cases = [dataclasses.replace(c, revisit=False, revisited=False) for c in web_cases]
        suite_web_s = sum(r.wall_ms for r in web) / 1000
        suite_web_inside_s = sum(inside_ms(r) for r in web) / 1000
        naive_s, naive_inside_s = naive(web_cases, options) if web_cases else (math.nan, math.nan)
        wgpu = [r for r in warm.results if r.backend == "wgpu"]
        # each page's first case also launches the browser or loads the page
        firsts = list({r.backend: r for r in reversed(web_all)}.values())
        first_per_page_s = sum(inside_ms(r) for r in firsts) / 1000
        within_s = sum(r.wall_ms - inside_ms(r) for r in warm.results) / 1000
        within_firsts_s = sum(r.wall_ms - inside_ms(r) for r in firsts) / 1000
        between_s = warm_s - sum(r.wall_ms for r in warm.results) / 1000
        rest = [r for r in warm.results if r.case_id not in {f.case_id for f in firsts}]
        steady = sum(r.wall_ms for r in rest) / sum(inside_ms(r) for r in rest)
        one_s, two_s, peak_kib = shards(args.suites, work)
    rows = [
        (
            "cases",
            f"{len(cases)} ({len(wgpu)} wgpu, {len(web_all)} ort-web)",
        ),
        (
            "cold run (empty reference cache)",
            f"{cold_s:.1f} s, {cold.references_computed} references computed",
        ),
        ("warm rerun", f"{warm_s:.1f} s, {warm.references_computed} references computed"),
        ("inside the backends (warm)", f"{inside_s:.1f} s"),
        ("overhead ratio, warm (wall / inside)", f"{warm_s / inside_s:.2f}"),
        (
            "outside the backends, warm",
            f"{warm_s - inside_s:.1f} s: {between_s:.1f} s between cases (opening and closing "
            f"backends, storing), {within_firsts_s:.1f} s in the {len(firsts)} pages' first "
            f"cases (Playwright, browser launch, page load), {within_s - within_firsts_s:.1f} s "
            f"in the other {len(rest)} cases",
        ),
        ("overhead ratio of those other cases (a large matrix tends to it)", f"{steady:.2f}"),
        (
            f"naive harness, {len(web_cases)} ort-web cases",
            f"{naive_s:.1f} s ({naive_s / len(web_cases):.2f} s per case)",
        ),
        (
            "the same cases in the warm suite run",
            f"{suite_web_s:.1f} s ({suite_web_s / len(web_cases):.2f} s per case)",
        ),
        ("speedup over the naive harness", f"{naive_s / suite_web_s:.1f}x"),
        (
            "the same, were the suite's harness to cost nothing (naive / the suite's inside)",
            f"{naive_s / suite_web_inside_s:.1f}x",
        ),
        (
            "inside the backends per case: naive harness / suite",
            f"{naive_inside_s / len(web_cases):.2f} s / "
            f"{suite_web_inside_s / len(web_cases):.2f} s (each naive case is a first case)",
        ),
        (
            f"of the warm run inside the backends: the {len(firsts)} pages' first cases",
            f"{first_per_page_s:.1f} s (ORT's wasm start, WebGPU device, shader compiles)",
        ),
        (
            "per wgpu case (warm, median inside)",
            f"{statistics.median(inside_ms(r) for r in wgpu):.0f} ms" if wgpu else "n/a",
        ),
        ("1 shard / 2 concurrent shards", f"{one_s:.1f} s / {two_s:.1f} s ({one_s / two_s:.2f}x)"),
        ("peak memory, whole run incl. browser", f"{peak_kib / 1024:.0f} MiB"),
    ]
    print(markdown_table(rows))
    return 0


def markdown_table(rows: list[tuple[str, str]]) -> str:
    """The README's two-column table of measures."""
    return "\n".join(["| measure | value |", "| --- | --- |", *(f"| {n} | {v} |" for n, v in rows)])


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
