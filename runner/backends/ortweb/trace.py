"""Turn the tracer's records (assets/tracer.js, via harness.js) into ``base.Trace``.

ORT does not say which buffer is an input, a weight or an intermediate, so a binding's role is
inferred from what the harness and tracer know: UNIFORM usage -> uniform; the GPU buffers the
harness made for a capture case's inputs -> input; the GPU buffers of a capture case's outputs
-> output; created while the session was being created -> weight; anything else ->
intermediate (eager inputs and outputs, which ORT uploads and downloads itself, land here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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


def build_trace(
    result: Mapping[str, Any], graphs: Sequence[int | None] = (), capture: bool = False
) -> Trace:
    """The Trace of a case that ran: counts over its runs (``replay_*``: every run but each
    graph's first, `graphs` being each run's graph, None for a run outside capture: a decoder's
    prefill), dispatches of the last run. Under capture, a graph whose first run in a new
    session created no bind group recorded nothing."""
    records = result.get("records") or []
    graphs = list(graphs) or [0] * len(records)
    captured = [graph for graph in graphs[: len(records)] if graph is not None]
    firsts = {graph: graphs.index(graph) for graph in dict.fromkeys(captured)}
    replays = [
        r for i, r in enumerate(records) if i not in firsts.values() and graphs[i] is not None
    ]
    recorded = {g: _count([records[i]], "createBindGroup") > 0 for g, i in firsts.items()}
    unrecorded = ()
    if capture and not result.get("reusedSession") and any(recorded.values()):
        unrecorded = tuple(g for g, made in recorded.items() if not made)
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
        replay_bind_groups_created=_count(replays, "createBindGroup"),
        replay_uniform_writes=_count(replays, "uniformWrites"),
        errors=tuple(result.get("errors", ())),
        unrecorded_graphs=unrecorded,
    )


def call_counts(result: Mapping[str, Any]) -> dict[str, Any]:
    """WebGPU call counts for BackendRun.details: creating the session, then each run."""
    return {
        "session_counts": dict(result["sessionRecord"]["counts"]),
        "run_counts": [dict(record["counts"]) for record in result["records"]],
    }
