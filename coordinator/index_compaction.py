"""Index compaction as a table service: a shard's runs folded into one base once there are too many.

Each commit adds a delta run to every shard it touched and a coverage file; a lookup reads a shard's base
and every delta after it. Folding keeps that bounded. The fold rewrites a shard's whole base (25M entries,
about 7 s, at 100M keys in 4 shards), so it runs with the other table services, off the micro-batch's
thread when they run in the background: the batch that crosses the limit no longer waits for it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from laketide.index.state import IndexSnapshot, StateIndex, has_base
from laketide.table import Table


class IndexCompaction:
    """Folds each shard with more than ``limit`` runs, with several and no base yet, or with deltas that
    hold many entries (``IndexSnapshot.delta_heavy``: a bulk load's), and the coverage files once there
    are more than ``limit``.

    A shard without a base (a new table's, after its bulk insert or first micro-batch) is folded at once:
    a process that has not loaded it (a Spark Python worker that meets the shard for the first time, or a
    restarted driver) then maps one sorted base instead of sorting every delta run into one, which took
    a tenth of a 1M-row micro-batch's assign tasks on the tasks path.

    Threads: ``run`` is the services thread's (or the micro-batch's, when services run inline). It writes
    the new bases unlocked, then deletes what they replace, and folds the coverage files, under
    ``swap_lock``, the writer's batch lock, set once the writer exists: a micro-batch reads the runs and
    coverage files its snapshot listed, and must not find them gone.
    """

    def __init__(self, table: Table, index: StateIndex, limit: int):
        self.table = table
        self.index = index
        self.limit = limit
        self.swap_lock: AbstractContextManager | None = None

    def _due(self, snapshot: IndexSnapshot, shard: int, runs: tuple[str, ...]) -> bool:
        return len(runs) > self.limit or not has_base(runs) or snapshot.delta_heavy(shard)

    def run(self, instant: str | None = None) -> None:
        timeline = self.table.timeline
        snapshot = self.index.snapshot({i.timestamp for i in timeline.completed_writes()}, timeline.start)
        # every base first, outside the lock: a micro-batch may run meanwhile
        folds = [self.index.fold(snapshot, shard) for shard, runs in snapshot.runs.items() if self._due(snapshot, shard, runs)]
        with self.swap_lock or nullcontext():
            for fold in folds:
                if fold is not None:
                    self.index.retire(fold)
            if len(snapshot.coverage_files) > self.limit:
                self.index.compact_coverage(snapshot)
