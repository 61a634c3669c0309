"""What an explore keeps while it runs, each in an object of its own: its time (``Budget``), the
kinds of failure it has seen (``Kinds``), what its target lacks (``Lacking``) and the op each
pass's drawn models start with (``FirstOps``)."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Sequence

from runner.backends.base import BackendTarget
from runner.explore.cases import ModelFailure
from runner.explore.database import Interruption
from runner.explore.finding import Failure, FailureKind, sized
from runner.explore.space import lacking_file, learned_lacking
from runner.files import write_atomic

SHRINK_GRACE = 0.25  # of the budget (at least GRACE_MIN_S): how long a found failure may shrink
GRACE_MIN_S = 30.0
# ... or as long as this many examples take at the pace so far, if longer: Hypothesis needs a
# few dozen to shrink an 8-step scenario, which takes minutes where a scenario takes seconds
# (ort-web on SwiftShader)
SHRINK_EXAMPLES = 40
# Drawn models a pass may run after its first failure, per kind of failure it has seen: past
# that the pass ends and its kinds are written at their shortest so far. Shrinking replays a
# failing model's neighbours, its ops replaced by the vocabulary's first, and where a build
# fails in a dozen ways (JSEP 1.19.2) that took most of a 10-minute budget: the draw's other
# ops went untried. A drawn model's bystanders are cut after shrinking anyway (its culprit is
# localized), so a short shrink costs a finding little.
SHRINK_MODELS_PER_KIND = 20
SHRINK_SHARE_PER_KIND = 0.02  # ... or of the budget's time, if longer (wgpu runs 17 a second)
# Drawn models a pass runs, where it finds nothing, before the next pass starts its models with
# another op (``FirstOps``)
PASS_MODELS = 10
PROGRESS_EVERY_S = 10.0


class BudgetSpent(Interruption):
    """Raised before an example once the budget is spent."""


class ShrinkingSpent(Interruption):
    """Raised before a drawn model once its pass has had its share since its first failure
    (``Kinds.shrinking_spent``): the pass ends, the explore goes on."""


class FirstOpSpent(Interruption):
    """Raised before a drawn model once its pass has run ``PASS_MODELS`` models and found
    nothing (``FirstOps.spent``): the next pass starts its models with another op."""


class Budget:
    """An explore's time: when it ends, how long past that a failure found may shrink, and when
    a progress line is due."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.began = self._said = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def check(self, examples: int, shrinking: bool) -> float:
        """Now; raises BudgetSpent once the budget is spent (with the grace, while a failure
        found in this pass is `shrinking`)."""
        now = time.monotonic()
        if now > self.began + self.seconds + (self.grace(examples) if shrinking else 0):
            raise BudgetSpent
        return now

    def grace(self, examples: int) -> float:
        """How long past the budget a failure may shrink: a share of the budget, or the time
        ``SHRINK_EXAMPLES`` examples take at the pace of the `examples` run so far, whichever
        is longer."""
        pace = self.elapsed() / max(1, examples)
        return max(GRACE_MIN_S, SHRINK_GRACE * self.seconds, SHRINK_EXAMPLES * pace)

    def progress_due(self) -> bool:
        """Whether a progress line is due (once every ``PROGRESS_EVERY_S``)."""
        now = time.monotonic()
        if now - self._said <= PROGRESS_EVERY_S:
            return False
        self._said = now
        return True


class Kinds:
    """The kinds of failure seen: when each was first seen, its shortest example so far, which
    are known (found by an earlier pass: passing from then on) and which this pass found (each
    shrinking until the pass ends)."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.shortest: dict[FailureKind, Failure | ModelFailure] = {}
        self.first_seen: dict[FailureKind, tuple[int, float]] = {}  # examples, seconds
        self.known: set[FailureKind] = set()
        self.pending: list[FailureKind] = []

    def keep(
        self, failure: Failure | ModelFailure, kind: FailureKind, examples: int, seconds: float
    ) -> None:
        """Tally a failing example: its kind if new, and it if its kind's shortest."""
        size = failure.size
        if kind not in self.first_seen:
            self.first_seen[kind] = (examples, seconds)
            self.pending.append(kind)
            self.say(f"failure: {failure.result.message} ({sized(size, failure.unit)}); shrinking")
        shortest = self.shortest.get(kind)
        if shortest is not None and size < shortest.size:
            self.say(f"shrunk {kind[0]} to {sized(size, failure.unit)}")
        if shortest is None or size <= shortest.size:
            self.shortest[kind] = failure  # Hypothesis shrinks: the later of equals is simpler

    def shrinking_spent(self, examples: int, budget: Budget) -> bool:
        """Whether this pass has had its share of the explore since its first failure, with
        `examples` run so far: ``SHRINK_MODELS_PER_KIND`` models and ``SHRINK_SHARE_PER_KIND``
        of the `budget` for each kind it found."""
        if not self.pending:
            return False
        first_examples, first_seconds = self.first_seen[self.pending[0]]
        kinds = len(self.pending)
        return (
            examples - first_examples >= SHRINK_MODELS_PER_KIND * kinds
            and budget.elapsed() - first_seconds >= SHRINK_SHARE_PER_KIND * budget.seconds * kinds
        )


class Lacking:
    """What a target lacks (an op, an op in float16, float16), with why: learned by earlier
    explores of its version (kept in the cache folder) and by this one, and drawn no more."""

    def __init__(self, target: BackendTarget, say: Callable[[str], None]):
        self.target, self.say = target, say
        self.why: dict[str, str] = learned_lacking(target)

    def any_of(self, needs: set[str]) -> bool:
        """Whether the target lacks any of what a drawn model `needs`."""
        return bool(needs & self.why.keys())

    def learn(self, lacked: str, why: str) -> None:
        """`lacked` is not drawn again on this target and version (from the next pass, and the
        next explore); what is known already stays as it was learned."""
        if lacked in self.why:
            return
        self.why[lacked] = why
        path = lacking_file(self.target)
        known = json.loads(path.read_text()) if path.is_file() else {}
        write_atomic(path, json.dumps({**known, lacked: why}, indent=1, sort_keys=True).encode())
        self.say(f"{self.target.id} lacks {lacked} ({why}): no longer drawn")


class FirstOps:
    """The op each pass's drawn models start with: the entry of the vocabulary (`firsts`) the
    models run so far hold the fewest nodes of, of those the target does not lack (the first
    of equals). Left to itself, Hypothesis follows each new example with mutants of it, and
    one long pass spends a budget where it began: a 10-minute explore of JSEP 1.19.2 ran 251
    nodes of Conv and 2 of RotaryEmbedding (seed 76). Short passes also meet two ops of one
    model sooner: twin Casts of two types came at a median of 980 drawn models in one pass,
    150 in passes of 10 and 380 in passes of 40 (Hypothesis's generation alone, seeds 0-5)."""

    def __init__(self, firsts: Sequence[str]):
        self.firsts = tuple(firsts)
        # by entry, of every model run: Coverage counts the judged only, and an entry whose
        # models are all discarded (no reference) would take every pass
        self.nodes: collections.Counter[str] = collections.Counter()
        self.barren: set[str] = set()  # a pass starting with it ran nothing: no model fit
        self.began = 0  # models run when this pass began

    def ran(self, entries: Sequence[str]) -> None:
        """Count a drawn model run (its nodes' vocabulary `entries`)."""
        self.nodes.update(entries)

    def next(self, examples: int, lacking: Lacking) -> str | None:
        """The op the pass beginning now, with `examples` run so far, starts its models with
        (None where the models are not drawn op by op, or none of its ops is left to start
        with)."""
        self.began = examples
        drawable = [op for op in self.firsts if op not in self.barren and not lacking.any_of({op})]
        return min(drawable, key=lambda op: self.nodes[op], default=None)

    def spent(self, examples: int) -> bool:
        """Whether this pass has run its ``PASS_MODELS`` models, with `examples` run so far."""
        return examples - self.began >= PASS_MODELS
