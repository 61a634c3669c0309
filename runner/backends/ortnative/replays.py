"""Proof that a replay replayed: ONNX Runtime's own log line for each run it served from a
captured graph.

``InferenceSession::Run`` logs "Replaying the captured <EP> graph ... graph annotation id: N" at
INFO and replays without running a kernel; a run without that line executed the model. (The
session profiler says the same, with no kernel event in a replay, but a session's profile ends
for good when it is read, and a revisit replays an earlier case's session.) The session logs at
INFO to the process's standard error, which ``ort_log`` reads around each run.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

_REPLAYING = re.compile(r"Replaying the captured \S+ graph .*graph annotation id: (-?\d+)")
_ERROR = re.compile(r"\[E:onnxruntime:[^\]]*\] (.*)")

LOG_SEVERITY_INFO = 1  # SessionOptions.log_severity_level that emits the replay line


@contextmanager
def ort_log() -> Iterator[list[str]]:
    """The lines written to file descriptor 2 (where onnxruntime logs) inside the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    lines: list[str] = []
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()  # what Python wrote in the block (onnxruntime's EP fallback)
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode(errors="replace").splitlines())


def replayed_graphs(lines: list[str]) -> list[int]:
    """The graph ids onnxruntime says it replayed, in order."""
    return [int(match[1]) for line in lines if (match := _REPLAYING.search(line))]


def logged_errors(lines: list[str]) -> list[str]:
    return [match[1] for line in lines if (match := _ERROR.search(line))]
