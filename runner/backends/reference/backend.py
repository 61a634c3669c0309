"""The ``reference`` backend: onnxruntime on the CPU, the oracle's own path.

It has no capture, so eager and capture run the same way (dynamic leaves the symbolic dims
unpinned); it exists to check the pipeline end to end on any machine, and as a control: it must
always pass. Each run takes its own inputs from the case's input sequence.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import onnxruntime as ort

from runner.backends.base import BackendOptions, BackendRun, CaseWork, Diagnosis, Timings
from runner.oracle import CpuSessions
from runner.schedule import BASE


def prepare_run(targets, say) -> dict[str, str | None]:
    return {"onnxruntime": ort.__version__}


def diagnose() -> list[Diagnosis]:
    providers = ort.get_available_providers()
    ok = "CPUExecutionProvider" in providers
    detail = f"onnxruntime {ort.__version__}, providers {', '.join(providers)}"
    return [Diagnosis("onnxruntime CPU", ok, detail, "pip install onnxruntime")]


class ReferenceBackend:
    name = "reference"

    def __init__(self, options: BackendOptions):
        self.options = options

    def environment(self) -> dict[str, Any]:
        return {"onnxruntime": ort.__version__, "providers": ["CPUExecutionProvider"]}

    def run(self, work: CaseWork) -> BackendRun:
        """A case (its descriptor lists no scenario steps: the step never hands it one)."""
        case, workload = work.case, work.workload
        runs, times = [], []
        names = list(workload.output_names)
        try:
            start = time.perf_counter()
            sessions = CpuSessions(workload, case.dynamic)
            sessions.of(BASE)
            session_ms = (time.perf_counter() - start) * 1000
            for feed in workload.feeds(self.options.runs):
                start = time.perf_counter()
                session = sessions.of(feed.variant)
                values = session.run(names, dict(workload.inputs_of(feed.variant)))
                runs.append(dict(zip(names, values, strict=True)))
                times.append((time.perf_counter() - start) * 1000)
        except Exception as exc:  # a model onnxruntime rejects is this case's error, not ours
            return BackendRun(status="error", message=f"{type(exc).__name__}: {exc}")
        later = times[1:] or times
        return BackendRun(
            runs=tuple(runs),
            timings=Timings(
                session_ms=session_ms,
                first_run_ms=times[0],
                median_run_ms=statistics.median(later),
                runs=len(times),
            ),
        )

    def close(self) -> None:
        pass
