"""What onnxruntime-web versions cost: installing one, each extra version in a run, and bisect.

Run with `nox -s bench` (after bench.py) or `python bench/versions.py`; prints a Markdown table
for the README. One run on one machine: read the ratios.

- install: one version into an empty cache folder (npm's download and unpacking), and the size;
- per extra version: a small suite (the exported encoder on the C++ EP builds, eager and capture)
  on 1 and on 2 installed versions, warm reference cache; the difference is what a version adds
  (each build's page load and first-case shader compiles);
- bisect: `regress bisect` between 1.24.3 and 1.30.0 for that capture case, every version
  already installed, its probes and wall time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import markdown_table  # noqa: E402  (bench.py, beside this script)
from runner.backends.ortweb.package import package_for, pinned_version  # noqa: E402

SUITE = """
name: bench-versions
models:
  bert: {builtin: encoder, style: exported, layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 100}
shapes: [{batch: 1, sequence: 16}]
backends:
  - {name: ort-web, version: VERSIONS, bundle: [webgpu, jspi]}
"""
CASE = "bert/batch=1,sequence=16/layout=default/ort-web:webgpu/capture"
INSTALL = "1.26.0"  # not the pinned version: installed from the registry, as a new version is


def regress(*args: str) -> tuple[float, str]:
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=ROOT, capture_output=True, text=True
    )
    return time.perf_counter() - began, done.stderr + done.stdout


def folder_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-versions-") as tmp:
        work = Path(tmp)
        os.environ["REGRESS_CACHE_DIR"] = str(work / "cache")
        began = time.perf_counter()
        package = package_for(INSTALL)
        install_s = time.perf_counter() - began
        size = folder_mib(package.root)
        del os.environ["REGRESS_CACHE_DIR"]  # the rest uses the checkout's cache
        for version in ("1.24.3", pinned_version()):
            package_for(version)
        timings = {}
        for label, versions in (("one", "'1.24.3'"), ("two", f"['1.24.3', '{pinned_version()}']")):
            suite = work / f"{label}.yaml"
            suite.write_text(textwrap.dedent(SUITE).replace("VERSIONS", versions))
            out = work / label
            regress("run", str(suite), "--out", str(out), "--no-localize")  # fill the oracle
            timings[label], _ = regress("run", str(suite), "--out", str(out), "--no-localize")
        suite = work / "one.yaml"
        bisect_s, said = regress(
            "bisect",
            CASE,
            str(suite),
            "--good",
            "1.24.3",
            "--bad",
            pinned_version(),
            "--out",
            str(work / "bisect"),
        )
        probes = re.search(r"(\d+) probe\(s\) over (\d+) versions", said)
    rows = [
        (
            f"install onnxruntime-web {INSTALL} into an empty cache (npm)",
            f"{install_s:.1f} s, {size:.0f} MiB",
        ),
        ("suite on 1 version (2 builds x eager, capture; warm)", f"{timings['one']:.1f} s"),
        ("the same on 2 versions", f"{timings['two']:.1f} s"),
        ("an extra version adds (both installed)", f"{timings['two'] - timings['one']:.1f} s"),
        (
            f"bisect 1.24.3 .. {pinned_version()}, every version installed",
            f"{probes.group(1)} probes over {probes.group(2)} versions, {bisect_s:.1f} s"
            if probes
            else f"failed: {said[-300:]}",
        ),
    ]
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
