"""The ort-web part of a repro bundle: a page that imports the exact onnxruntime-web build and
version, creates the sessions as the suite did and judges the last one (``assets/repro.mjs``).

By default the page imports the build, and Pyodide that runs the suite's judge
(``pyodide.py``), from the CDN that serves every published npm version; ``--local`` copies the
build's dist/ files and Pyodide's core in, so the folder runs offline. A bundle made with
``--with-fault`` carries the suite's fault script (``assets/faults.js``) where a fault lives
there; ``ep-name-as-string`` lives in the session options (``repro.mjs``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from typing import Any

from runner.backends.base import ReproRequest, ReproRunner
from runner.backends.ortweb import pyodide
from runner.backends.ortweb.backend import ASSETS
from runner.backends.ortweb.context import ALLOCATOR_MODEL, CONTEXT_MODEL
from runner.backends.ortweb.package import (
    BUILDS,
    DEFAULT_BUILD,
    package_for,
    pinned_version,
    published_url,
)
from runner.errors import InvalidInput

# The one fault that lives in the session options (repro.mjs); faults.js implements the others.
SESSION_OPTION_FAULTS = frozenset({"ep-name-as-string"})


def write_runner(request: ReproRequest) -> ReproRunner:
    build = request.target.bundle or DEFAULT_BUILD
    version = request.target.version or pinned_version()
    if not request.local and version.startswith("file:"):
        raise InvalidInput(
            f"onnxruntime-web {version} is a local build with no published URL: "
            "--local copies its files into the bundle"
        )
    module = package_for(version).module(build)  # which file it is depends on the version
    folder = request.folder
    files = ["index.html", "repro.mjs", "feeds.mjs", "scenario.mjs"]
    files += ["context.onnx", "allocator.onnx"]
    if request.local:
        (folder / "dist").mkdir()
        for name, path in package_for(version).build_files(build).items():
            shutil.copyfile(path, folder / "dist" / name)
            files.append(f"dist/{name}")
        url = f"./dist/{module}"
        (folder / "pyodide").mkdir()
        for name, path in pyodide.core_files().items():
            shutil.copyfile(path, folder / "pyodide" / name)
            files.append(f"pyodide/{name}")
        judge_url = "./pyodide/"
    else:
        judge_url = pyodide.published_url()
        url = published_url(version, module)
    script = None
    if request.faults - SESSION_OPTION_FAULTS:
        shutil.copyfile(ASSETS / "faults.js", folder / "faults.js")
        files.append("faults.js")
        script = "./faults.js"
    header = (
        f"// onnxruntime-web {version}, {module}: {BUILDS[build].about}\n"
        f"const ORT_URL = {json.dumps(url)};\n"
        f"// Faults the suite injected, and the script implementing some of them (else null)\n"
        f"const FAULTS = {json.dumps(sorted(request.faults))};\n"
        f"const FAULT_SCRIPT = {json.dumps(script)};\n"
        f"// Pyodide {pyodide.pinned_version()}, which runs the suite's judge (judge/)\n"
        f"const PYODIDE_URL = {json.dumps(judge_url)};\n\n"
    )
    (folder / "repro.mjs").write_text(header + (ASSETS / "repro.mjs").read_text())
    shutil.copyfile(ASSETS / "repro.html", folder / "index.html")
    for shared in ("feeds.mjs", "scenario.mjs"):  # what the suite's page runs too
        shutil.copyfile(ASSETS / shared, folder / shared)
    (folder / "context.onnx").write_bytes(CONTEXT_MODEL)  # the suite's page's own sessions
    (folder / "allocator.onnx").write_bytes(ALLOCATOR_MODEL)
    steps = [
        "In this folder: `python3 -m http.server 8000 --bind 127.0.0.1` (any static server; "
        "WebGPU needs a secure context, which http://127.0.0.1 is).",
        "Open http://127.0.0.1:8000/ in Chrome or Chromium with WebGPU (on Linux start it with "
        "`--enable-unsafe-webgpu --enable-features=Vulkan`).",
        "The page creates the sessions below as the suite does (`sessionOptions` in "
        "`repro.mjs`): `executionProviders: [{name: 'webgpu'}]` and the case's "
        "`freeDimensionOverrides`; a capture session adds `enableGraphCapture: true` and "
        "`preferredOutputLocation: 'gpu-buffer'` and takes its inputs as GPU buffers "
        "(`Tensor.fromGpuBuffer`). The suite's own judge, run by Pyodide, prints each "
        "output's max error against eager and onnxruntime CPU, the verdict and PASS or FAIL "
        "(also in the console, and as `window.reproResult`).",
    ]
    if request.faults:
        steps.append(
            "http://127.0.0.1:8000/?faults=off runs the same sessions without the injected "
            f"fault(s) ({', '.join(sorted(request.faults))}): it passes."
        )
    return ReproRunner(
        files=tuple(files),
        steps=tuple(steps),
        versions=(
            ("onnxruntime-web", version),
            ("build", f"`{module}` ({BUILDS[build].about}), from {url}"),
            ("judge", f"Pyodide {pyodide.pinned_version()}, from {judge_url}"),
            *_browser(request.environment),
        ),
        product=f"onnxruntime-web {version}, {module}",
    )


def _browser(environment: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Chromium and the WebGPU adapter, as the run recorded them."""
    rows = []
    if environment.get("chromium"):
        flags = " ".join(environment.get("chromium_flags") or ())
        rows.append(("Chromium", f"{environment['chromium']} (headless; flags `{flags}`)"))
    adapter = environment.get("adapter") or {}
    if adapter:
        described = ", ".join(
            f"{key} {adapter[key]}"
            for key in ("vendor", "architecture", "device", "description")
            if adapter.get(key)
        )
        rows.append(("WebGPU adapter", described or "unnamed"))
    return rows
