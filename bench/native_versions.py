"""What an extra ort-native version costs to install: each named version into an empty cache
folder (pip's download and unpacking), its time and size on disk. The per-case cost of a version
comes from a run over several (`bench/gpu.py` on `--ort-native-version A --ort-native-version B`).

`python bench/native_versions.py [VERSION ...]` (default: 1.31.1, which brings its own
onnxruntime, and ep0.3.0, a plugin beside the runner's onnxruntime); prints a Markdown table.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import markdown_table  # noqa: E402  (bench.py, beside this script)
from runner.backends.ortnative.environments import install  # noqa: E402
from runner.backends.ortnative.versions import NativeVersion  # noqa: E402


def size_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def main(texts: list[str]) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["REGRESS_CACHE_DIR"] = cache
        for text in texts:
            version = NativeVersion.parse(text)
            began = time.perf_counter()
            site = install(version)
            seconds = time.perf_counter() - began
            rows.append((f"install {version.exact}", f"{seconds:.1f} s, {size_mib(site):.0f} MiB"))
    print(markdown_table(rows))


if __name__ == "__main__":
    main(sys.argv[1:] or ["1.31.1", "ep0.3.0"])
