"""Turn the tracer's records (assets/tracer.js, via harness.js) into ``base.Trace``.

ORT does not say which buffer is an input, a weight or an intermediate, so a binding's role is
inferred from what the harness and tracer know: UNIFORM usage -> uniform; the GPU buffers the
harness made for a capture case's inputs -> input; the GPU buffers of a capture case's outputs
-> output; created while the session was being created -> weight; anything else ->
intermediate (eager inputs and outputs, which ORT uploads and downloads itself, land here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runner.backends.base import Dispatch, SlotBinding, Trace

UNIFORM_USAGE = 0x40  # GPUBufferUsage.UNIFORM


def binding_role(binding: Mapping[str, Any], inputs: set[str], outputs: set[str]) -> str:
    if binding["usage"] & UNIFORM_USAGE:
        return "uniform"
    if binding["buffer"] in inputs:
        return "input"
    if binding["buffer"] in outputs:
        return "output"
    if binding["phase"] == "session":
        return "weight"
    return "intermediate"


def _count(records: Iterable[Mapping[str, Any]], name: str) -> int:
    return sum(record["counts"].get(name, 0) for record in records)


def build_trace(result: Mapping[str, Any]) -> Trace:
    """The Trace of a case that ran: counts over its runs, dispatches of the last run."""
    records = result.get("records") or []
    inputs, outputs = set(result.get("inputBuffers", ())), set(result.get("outputBuffers", ()))
    last = records[-1]["dispatches"] if records else []
    dispatches = tuple(
        Dispatch(
            node="",  # ORT names no node at the WebGPU API; the pipeline label names the program
            pipeline=dispatch["pipeline"],
            bindings=tuple(
                SlotBinding(b["slot"], binding_role(b, inputs, outputs), b["buffer"])
                for b in dispatch["bindings"]
            ),
            workgroups=tuple(dispatch["workgroups"]),
        )
        for dispatch in last
    )
    return Trace(
        dispatches=dispatches,
        bind_groups_created=_count(records, "createBindGroup"),
        uniform_writes=_count(records, "uniformWrites"),
        buffers_created=_count(records, "createBuffer"),
        replay_bind_groups_created=_count(records[1:], "createBindGroup"),
        replay_uniform_writes=_count(records[1:], "uniformWrites"),
        errors=tuple(result.get("errors", ())),
    )


def call_counts(result: Mapping[str, Any]) -> dict[str, Any]:
    """WebGPU call counts for BackendRun.details: creating the session, then each run."""
    return {
        "session_counts": dict(result["sessionRecord"]["counts"]),
        "run_counts": [dict(record["counts"]) for record in result["records"]],
    }
