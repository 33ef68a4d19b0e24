"""The shards of the state index this process has loaded, kept for the next micro-batch.

One cache per process, on purpose: a Spark Python worker runs many tasks, one after another or on
several threads, and each should find the shards the last one merged. Per (table, shard) it keeps
the run files merged so far and the result; the next micro-batch extends that with its new delta
runs (``StateIndex.load_shard``).

Threads: the driver's worker pool and Spark's task threads share it. Every lookup and update holds
``_lock``; reading run files happens outside it, so two threads that miss the same shard may both
read it. Both results are right (run files never change once written) and the later one stays.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, Hashable, TypeVar

V = TypeVar("V")


class ShardCache(Generic[V]):
    """A least-recently-used map from (table, shard) to (run paths, merged run), at most ``capacity`` entries."""

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, tuple[tuple[str, ...], V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> tuple[tuple[str, ...], V] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: Hashable, paths: tuple[str, ...], value: V) -> None:
        with self._lock:
            self._entries[key] = (paths, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


SHARDS: ShardCache = ShardCache(64)
