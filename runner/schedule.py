"""A case's input sequence: which graph each run replays and which inputs it gets.

Pure values, shared by the workload that materializes the inputs and the judge that judges each
run against what belongs to its inputs (also on a repro bundle's page, under Pyodide).
"""

from __future__ import annotations

from dataclasses import dataclass

# A run's inputs: (graph, draw). (0, 0) is the case's own inputs, which the oracle caches by.
Variant = tuple[int, int]
BASE: Variant = (0, 0)
# The draw of a decoder's prefill: the prompt, run uncaptured before the graph's decode steps.
PREFILL_DRAW = -1


@dataclass(frozen=True)
class Feed:
    """One run of a case: the graph it runs (its gpu_graph_id) and the inputs it gets."""

    graph: int
    variant: Variant

    @property
    def prefill(self) -> bool:
        """Whether this run is a decoder's prefill: uncaptured, at the prompt's length."""
        return self.variant[1] == PREFILL_DRAW


def input_schedule(runs: int, graphs: int = 1) -> tuple[Feed, ...]:
    """``runs`` rounds of one run per graph, interleaved. Each graph gets new inputs every round
    but the last, which repeats the one before it: two replays of one input, which the
    determinism check needs (the first run records, so three runs test both)."""
    draws = list(range(runs)) if runs < 3 else [*range(runs - 1), runs - 2]
    return tuple(Feed(graph, (graph, draw)) for draw in draws for graph in range(graphs))
