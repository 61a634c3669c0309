"""The binding trace: what each dispatch bound, and how many WebGPU objects a case created.

Counts come from ``Device.counters`` snapshots around the runs of one case; ``replay_*`` are
the counts of the runs after each graph's first, which under capture must stay 0 (a replay that
creates bind groups or writes uniforms is not a replay). Errors wgpu logs without raising (lost
device, uncaptured validation errors) are collected while a case runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from runner.backends.base import Dispatch, SlotBinding, Trace


def dispatch_record(
    node: str,
    pipeline: str,
    tensors: Sequence[tuple[str, str]],
    uniform: str,
    uniform_slot: int,
    groups: tuple[int, int, int],
) -> Dispatch:
    """``tensors``: (role, buffer identity) per slot from 0 (inputs, then the output)."""
    bindings = [SlotBinding(i, role, identity) for i, (role, identity) in enumerate(tensors)]
    bindings.append(SlotBinding(uniform_slot, "uniform", uniform))
    return Dispatch(node, pipeline, tuple(bindings), groups)


def case_trace(
    dispatches: Sequence[Dispatch],
    start: tuple[int, int, int],
    end: tuple[int, int, int],
    replay: Sequence[int],
    errors: Sequence[str] = (),
) -> Trace:
    """A Trace from counter snapshots (bind groups, uniform writes, buffers) around the case,
    and the counts of its replays."""
    total = [e - s for e, s in zip(end, start, strict=True)]
    return Trace(
        dispatches=tuple(dispatches),
        bind_groups_created=total[0],
        uniform_writes=total[1],
        buffers_created=total[2],
        replay_bind_groups_created=replay[0],
        replay_uniform_writes=replay[1],
        errors=tuple(errors),
    )


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def logged_errors() -> Iterator[list[str]]:
    """Collect what the ``wgpu`` logger reports at warning level or above."""
    collector, logger = _Collector(), logging.getLogger("wgpu")
    logger.addHandler(collector)
    try:
        yield collector.messages
    finally:
        logger.removeHandler(collector)
