"""ort-native backend: ONNX Runtime's own WebGPU EP (the onnxruntime-ep-webgpu plugin, on Dawn
over Vulkan, Metal or D3D12) through onnxruntime's Python API, on the GPU ONNX Runtime finds.

Modules, in the order data flows:
  versions.py      a version is an onnxruntime + plugin pair (``1.32.0+ep0.4.0``); bisect's index
  environments.py  each version's packages, installed by pip into the cache folder
  backend.py       OrtNativeBackend: one child process per version (runner.backends.isolated)
  ep.py            EpBackend, in the child: sessions, eager and capture runs, scenarios, the faults
  replays.py       onnxruntime's log of each run: did a replay replay?
  faults.py        the injectable faults (FAULTS)
  diagnose.py      what `doctor` says

This module is the descriptor: plain data, importing no onnxruntime.
"""

from runner.backends.base import BackendDescriptor
from runner.backends.ortnative.faults import FAULTS
from runner.scenario.values import CREATE, DISPOSE, RELEASE, RELEASE_GRAPH, RUN

DESCRIPTOR = BackendDescriptor(
    name="ort-native",
    summary="onnxruntime's WebGPU EP plugin (onnxruntime-ep-webgpu) from Python, on a real GPU",
    factory="runner.backends.ortnative.backend:OrtNativeBackend",
    diagnose="runner.backends.ortnative.diagnose:diagnose",
    prepare="runner.backends.ortnative.environments:prepare_run",
    versions="runner.backends.ortnative.versions:resolve",
    version_history="runner.backends.ortnative.versions:history",
    element_types=frozenset(
        {"float32", "float16", "int64", "int32", "uint32", "int8", "uint8", "bool"}
    ),
    runtime="onnxruntime",
    faults=FAULTS,
    scenario_actions=(RUN, DISPOSE, RELEASE_GRAPH, RELEASE, CREATE),  # the steps ep.py runs
    # ONNX Runtime keeps one WebGPU device per process, its program cache with it: a program an
    # earlier session compiled serves a later one whose key it matches (measured: a 1x1 Conv,
    # an InstanceNormalization and an And wrong after other models, right in a new process)
    programs_per_process=True,
    preferred_layouts=True,  # a session config entry (the plugin: a provider option)
)
