"""bench/explore.py, briefly on wgpu: its row says how many scenarios ran at what pace and that
the canary was found and shrunk to its 2 steps."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .conftest import REPO

# what an explore finds within its budget: one such test at a time (tests/conftest.py)
pytestmark = pytest.mark.clock


@pytest.mark.gpu
def test_the_explore_bench_measures_wgpu_and_finds_the_canary_shrunk(tmp_path):
    bench = subprocess.run(
        [sys.executable, "bench/explore.py", "--target", "wgpu=20s", "--seed", "1"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "REGRESS_CACHE_DIR": str(tmp_path / "cache")},
        timeout=120,
    )
    assert bench.returncode == 0, bench.stderr
    header, rule, row = bench.stdout.splitlines()
    assert header.startswith("| target | budget | scenarios | steps/s |")
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:2] == ["wgpu", "20 s"]
    scenarios, seconds = map(int, re.fullmatch(r"(\d+) in (\d+) s", cells[2]).groups())
    assert scenarios >= 20 and seconds >= 20  # the canary shows at the 20th (seed 1)
    assert float(cells[3]) > 0
    assert int(cells[4]) == pytest.approx(scenarios / seconds * 600, rel=0.1)
    assert re.fullmatch(r"`stale-input` after \d+ s \(\d+ scenarios\), 2 steps", cells[5])
    assert not (tmp_path / "cache" / "explore").exists()  # its example database was its own
