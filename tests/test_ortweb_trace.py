"""The ort-web trace from harness records, without a browser: which runs replay, and a graph
whose first run recorded nothing (what onnxruntime-web 1.24.3's C++ builds do with gpu_graph_id)."""

from __future__ import annotations

from runner.backends.ortweb.trace import build_trace


def result(*bind_groups: int, reused: bool = False) -> dict:
    records = [
        {"label": "run", "counts": {"createBindGroup": n}, "dispatches": []} for n in bind_groups
    ]
    return {"records": records, "reusedSession": reused}


def test_each_graphs_first_run_records_and_the_rest_replay():
    trace = build_trace(result(19, 19, 0, 0, 0, 0), graphs=[0, 1] * 3, capture=True)
    assert trace.bind_groups_created == 38 and trace.replay_bind_groups_created == 0
    assert trace.unrecorded_graphs == ()
    one = build_trace(result(19, 2, 0), capture=True)  # one graph: runs after the first replay
    assert one.replay_bind_groups_created == 2


def test_a_graph_that_records_nothing_is_named_only_when_it_could_have_recorded():
    ignored = result(19, 0, 0, 0)
    assert build_trace(ignored, graphs=[0, 1, 0, 1], capture=True).unrecorded_graphs == (1,)
    assert build_trace(ignored, graphs=[0, 1, 0, 1]).unrecorded_graphs == ()  # eager
    reused = result(0, 0, 0, 0, reused=True)  # a revisit replays what an earlier case recorded
    assert build_trace(reused, graphs=[0, 1, 0, 1], capture=True).unrecorded_graphs == ()


def test_a_prefill_is_neither_a_graphs_first_run_nor_a_replay():
    """A decoder's prefill (graph None, uncaptured) makes bind groups of its own; the decode
    step after it records and the later ones replay."""
    trace = build_trace(result(21, 19, 0, 0), graphs=[None, 0, 0, 0], capture=True)
    assert trace.bind_groups_created == 40 and trace.replay_bind_groups_created == 0
    assert trace.unrecorded_graphs == ()
    # two generators: the prefills' bind groups are no record of graph 1's
    two = build_trace(result(21, 21, 19, 0, 0, 0), graphs=[None, None, 0, 1, 0, 1], capture=True)
    assert two.unrecorded_graphs == (1,)
