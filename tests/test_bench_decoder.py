"""bench/decoder.py on wgpu: one row per weight form, both modes timed from the runner's own
results, and the speed-up their ratio."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .conftest import REPO


@pytest.mark.gpu
def test_the_decoder_bench_times_wgpu_eager_and_capture_per_weight_form():
    bench = subprocess.run(
        [sys.executable, "bench/decoder.py", "--backend", "wgpu"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert bench.returncode == 0, bench.stderr
    header, rule, *rows, blank, walls = bench.stdout.splitlines()
    assert header.startswith("| backend | size | weights | eager ms/step | capture ms/step |")
    assert len(rows) == 2  # every case passed: no list of untimed ones
    assert re.fullmatch(r"tiny: 10 cases in \d+ s", walls)  # 2 layouts each, and a revisit
    for row, weights in zip(rows, ("float32", "int4"), strict=True):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[:3] == ["wgpu", "tiny", weights]
        eager, capture, first, eager_s, capture_s = map(float, cells[3:8])
        assert min(eager, capture, first) > 0
        for step_ms, per_s in ((eager, eager_s), (capture, capture_s)):  # each to 0.1
            assert 1e3 / (step_ms + 0.05) - 0.05 <= per_s <= 1e3 / (step_ms - 0.05) + 0.05
        speedup = float(cells[8].rstrip("x"))
        assert (eager - 0.05) / (capture + 0.05) - 0.005 <= speedup
        assert speedup <= (eager + 0.05) / (capture - 0.05) + 0.005
        assert cells[9] == "2 / 3"  # two layouts, and the capture revisit
