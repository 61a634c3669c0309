"""Injectable faults of the ort-native backend, made with ONNX Runtime's own Python API (no
patched build): each binds or creates what an application, or an EP bug, could, and each is
there to show that one of the judge's detectors fires on the real EP."""

from __future__ import annotations

SHAPE_ONLY_CAPTURE_CACHE = "shape-only-capture-cache"
CAPTURE_OPTION_DROPPED = "capture-option-dropped"
INPUT_SNAPSHOT_AT_CAPTURE = "input-snapshot-at-capture"
GRAPHS_SHARE_INPUTS = "graphs-share-inputs"

FAULTS: dict[str, str] = {
    SHAPE_ONLY_CAPTURE_CACHE: "replays run on the captured graph of an earlier session of the "
    "sequence whose inputs and outputs have the same names, shapes and types, as a capture "
    "cache keyed by shapes alone would: a layout change replays the earlier layout's graph "
    "(the seed bug; stale-layout)",
    CAPTURE_OPTION_DROPPED: "the capture session is created without enableGraphCapture, as when "
    "the option goes where the EP does not read it (cf. microsoft/onnxruntime#32456): outputs "
    "stay right, but every run executes the model again (capture-not-engaged)",
    INPUT_SNAPSHOT_AT_CAPTURE: "the recording run binds a copy of its inputs, and later runs "
    "write into the values the application holds, which nothing reads: every replay computes "
    "the recording run's inputs again (stale-input)",
    GRAPHS_SHARE_INPUTS: "with graphs: N, a graph after the first binds the first graph's input "
    "values in place of its own, so its replays compute the first graph's inputs (wrong-graph)",
}
