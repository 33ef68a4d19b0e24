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

from collections.abc import Hashable
from typing import TypeVar

from laketide.table.lru import LruCache

V = TypeVar("V")


class ShardCache(LruCache[tuple[tuple[str, ...], V]]):
    """A least-recently-used map from (table, shard) to (run paths, merged run), at most ``capacity`` entries."""

    def __init__(self, capacity: int = 64):
        super().__init__(capacity)

    def put(self, key: Hashable, paths: tuple[str, ...], value: V) -> None:  # type: ignore[override]
        super().put(key, (paths, value))


SHARDS: ShardCache = ShardCache(64)
# The delta runs this process wrote, by (table, run path), until its next micro-batch loads them
# (``StateIndex.load_shard``), which then need not read back what it just wrote: a read per shard per
# micro-batch, a GET each on an object store. A run an instant rolled back is never loaded, and goes
# out of the map when newer runs come in; so does one another process loads (a Spark worker's). Runs are
# kept as written (16 bytes an entry) and made a ``ShardRun`` only when loaded, so one never loaded costs no
# sort. Only runs of at most ``WRITTEN_RUN_ENTRIES`` are kept (1 MB each), so the map stays under 64 MB.
WRITTEN_RUNS: LruCache = LruCache(64)
WRITTEN_RUN_ENTRIES = 65_536
