"""The wgpu part of a repro bundle: ``repro.py``, a copy of ``repro_script.py``, which runs the
bundle's sessions on this project's WGSL executor and judges the last one. It imports this
project (the executor is the suite's own), which ISSUE.md says."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.backends.base import ReproRequest, ReproRunner

SCRIPT = Path(__file__).with_name("repro_script.py")


def write_runner(request: ReproRequest) -> ReproRunner:
    shutil.copyfile(SCRIPT, request.folder / "repro.py")
    env = request.environment
    steps = [
        "Install webgpu-capture-regress (`pip install -e CHECKOUT`), whose WGSL executor "
        "`repro.py` runs, on a machine with a WebGPU adapter (a GPU, or lavapipe: "
        "`apt-get install mesa-vulkan-drivers`).",
        "In this folder: `python repro.py`. It prints each session, the max errors, the verdict "
        "and PASS or FAIL (exit status 0 or 1).",
    ]
    if request.faults:
        steps.append(
            "`python repro.py --faults off` runs the same sessions without the injected "
            f"fault(s) ({', '.join(sorted(request.faults))}): it passes."
        )
    return ReproRunner(
        product=f"webgpu-capture-regress's wgpu executor, wgpu {env.get('wgpu') or '?'}",
        files=("repro.py",),
        steps=tuple(steps),
        versions=(
            ("wgpu (Python)", str(env.get("wgpu") or "unknown")),
            ("wgpu-native", str(env.get("wgpu_native") or "unknown")),
            *_adapter(env.get("adapter") or {}),
        ),
        uses_project=True,
    )


def _adapter(adapter: Mapping[str, Any]) -> list[tuple[str, str]]:
    keys = ("name", "vendor", "architecture", "backend_type", "driver")
    described = ", ".join(f"{key} {adapter[key]}" for key in keys if adapter.get(key))
    return [("WebGPU adapter", described)] if described else []
