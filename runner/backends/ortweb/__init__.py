"""ort-web backend: onnxruntime-web's WebGPU builds in headless Chromium (see backend.py).

This module is the descriptor: plain data, importing neither Playwright nor the browser code.
Versions (versions.py) and packages (package.py) are npm's; each exact version is installed
into the cache folder on first use.
"""

from runner.backends.base import BackendDescriptor
from runner.backends.ortweb.package import BUILDS
from runner.scenario.values import CREATE, DISPOSE, RELEASE, RUN

DESCRIPTOR = BackendDescriptor(
    name="ort-web",
    summary="onnxruntime-web in headless Chromium driven by Playwright, on each WebGPU build",
    factory="runner.backends.ortweb.backend:OrtWebBackend",
    diagnose="runner.backends.ortweb.diagnose:diagnose",
    prepare="runner.backends.ortweb.package:prepare_run",
    builds=tuple(BUILDS),
    versions="runner.backends.ortweb.versions:resolve",
    offline_versions="runner.backends.ortweb.versions:resolve_offline",
    version_history="runner.backends.ortweb.versions:registry",
    # the steps scenario.mjs runs; onnxruntime-web has no API to release a captured graph (only
    # a session), so a scenario with `release-graph` is skipped, saying so (runner.skips)
    scenario_actions=(RUN, DISPOSE, RELEASE, CREATE),
    preferred_layouts=True,  # the EP option (JSEP and the C++ EP alike)
    repro="runner.backends.ortweb.repro:write_runner",
    # Tensor types passed to and from the page; numpy and onnxruntime-web spell them alike.
    element_types=frozenset(
        {
            "float32",
            "float16",
            "float64",
            "int64",
            "uint64",
            "int32",
            "uint32",
            "int16",
            "uint16",
            "int8",
            "uint8",
            "bool",
        }
    ),  # fmt: skip
    runtime="Chrome Headless",  # what platform.js reports for headless Chromium
    # Implemented in assets/faults.js (ep-name-as-string in harness.js, which creates the
    # sessions); a case's own are passed with its run, never page-wide.
    faults={
        "stale-uniform-binding": "while a capture session records, a bind group of a program "
        "that an earlier capture in the page recorded gets that capture's uniform buffer in "
        "place of its own (same size only), so every replay reads the earlier layout's "
        "constants, e.g. LayerNormalization's epsilon (the seed bug: silent, deterministic; "
        "stale-layout)",
        "ep-name-as-string": "create sessions with executionProviders ['webgpu'] instead of "
        "[{name: 'webgpu'}]: the C++ EP builds then silently ignore enableGraphCapture, so "
        "every 'replay' rebuilds its bind groups (capture-not-engaged; JSEP takes either form)",
        "input-snapshot-at-capture": "while a capture session records, a bind group binding one "
        "of its input GPU buffers gets a copy of that buffer taken then, so every replay computes "
        "the recording run's inputs again whatever was written since (what the C++ builds do "
        "with a new input buffer per run; stale-input)",
        "graphs-share-inputs": "with graphs: N (C++ builds), while a graph after the first "
        "records, a bind group binding one of its input buffers gets the first graph's buffer "
        "of that input, so the graph replays the first graph's inputs (wrong-graph)",
        "lengths-frozen-at-capture": "a decoder's capture session, while it records, binds a "
        "copy of its attention-mask buffer taken then, which seqlens_k and "
        "total_sequence_length come from: every replayed decode step attends over the capture "
        "step's length while its token and caches are new (capture-mismatch from the first "
        "replay)",
        "cache-frozen-at-capture": "a decoder's capture session, while it records, binds a twin "
        "of each KV-cache buffer (past and present in one), set back before every run to the "
        "cache the recording run was fed, and copied to the application's buffer after it: "
        "every replay reads the capture step's cache, never advanced (capture-mismatch from "
        "the first replay)",
    },
)
