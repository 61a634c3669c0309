"""A decoder's KV caches kept on the device between runs, for the backend and a repro bundle's
``repro.py`` alike."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from runner.backends.wgpu.executor import Session
from runner.schedule import Feed
from runner.workload import Workload


class DeviceKvCache:
    """A decoder's KV caches kept in the session's buffers from run to run (the workload's
    ``DeviceCache``): a prefill's present caches are copied into the graph's past buffers, a
    decode step's into its own (wgpu's GroupQueryAttention writes present apart from past), a
    rewind zeroes the positions it drops, and no run after a graph's first writes the caches
    from the host. Without a device cache (an encoder) every run writes every input."""

    def __init__(self, workload: Workload, session: Session):
        self.workload, self.session = workload, session
        self.spec = workload.device_cache
        self.started: set[int] = set()  # graphs that have run

    def inputs_to_write(self, feed: Feed) -> Mapping[str, np.ndarray]:
        """What `feed`'s run writes from the host; a rewind's zeroing first."""
        inputs = self.workload.inputs_of(feed.variant)
        if self.spec is None or feed.graph not in self.started:
            self.started.add(feed.graph)
            return inputs
        if feed.variant in self.spec.rewinds:
            self.session.clear_from(self.spec.inputs, self.spec.rewinds[feed.variant], feed.graph)
        return {name: value for name, value in inputs.items() if name not in self.spec.inputs}

    def prefilled(self, feed: Feed, prefill: Session) -> None:
        self.session.carry(self.workload.in_place, feed.graph, source=prefill)

    def stepped(self, feed: Feed) -> None:
        if self.spec is not None:
            self.session.carry(self.workload.in_place, feed.graph)
