"""Index compaction as a table service: a shard's runs folded once there are too many.

Each commit adds a delta run to every shard it touched and a coverage file; a lookup reads a shard's base,
its level and every delta after them. Folding keeps that bounded: the deltas go into a new level (about
as many entries as were added since the base), and only once those reach an eighth of the base into a new
base, which rewrites the whole shard (25M entries, about 3.4 s, at 100M keys in 4 shards). Folds run with
the other table services, off the micro-batch's thread when they run in the background.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from laketide.index.state import Fold, IndexSnapshot, StateIndex, has_base
from laketide.table import Table


class IndexCompaction:
    """Folds each shard with more than ``limit`` runs into a level over its base, and into a new base a shard
    with several runs and no base yet, or whose runs after the base hold many entries
    (``IndexSnapshot.delta_heavy``: a bulk load's, or a level grown to an eighth of the base); and the
    coverage files once there are more than ``limit``.

    A shard without a base (a new table's, after its bulk insert or first micro-batch) is folded at once:
    a process that has not loaded it (a Spark Python worker that meets the shard for the first time, or a
    restarted driver) then maps one sorted base instead of sorting every delta run into one, which took
    a tenth of a 1M-row micro-batch's assign tasks on the tasks path.

    Threads: ``run`` is the services thread's (or the micro-batch's, when services run inline). It writes
    the new bases unlocked, then deletes what they replace, and folds the coverage files, under
    ``batch_lock``, the writer's: a micro-batch reads the runs and coverage files its snapshot listed, and must
    not find them gone.
    """

    def __init__(
        self,
        table: Table,
        index: StateIndex,
        limit: int,
        hold: Callable[[], None] = lambda: None,
        batch_lock: AbstractContextManager | None = None,
    ):
        """``hold`` raises unless this writer still holds the lease: checked before each new run and before the
        swap, so a writer paused past its lease neither writes runs nor deletes what the new holder reads.
        ``batch_lock``: the lock a micro-batch holds while it runs (none without a job)."""
        self.table = table
        self.hold = hold
        self.index = index
        self.limit = limit
        self.batch_lock = batch_lock or nullcontext()

    def _fold(self, snapshot: IndexSnapshot, shard: int, runs: tuple[str, ...]) -> Fold | None:
        """A new base for a shard without one or whose newer entries outgrew a level; a new level for one
        with too many runs; nothing for the others."""
        self.hold()
        if not has_base(runs) or snapshot.delta_heavy(shard):
            return self.index.fold(snapshot, shard)
        if len(runs) > self.limit:
            return self.index.fold_level(snapshot, shard)
        return None

    def run(self, instant: str | None = None) -> None:
        timeline = self.table.timeline
        snapshot = self.index.snapshot({i.timestamp for i in timeline.completed_writes()}, timeline.start)
        # every new run first, outside the lock: a micro-batch may run meanwhile
        folds = [self._fold(snapshot, shard, runs) for shard, runs in snapshot.runs.items()]
        self.hold()
        with self.batch_lock:
            for fold in folds:
                if fold is not None:
                    self.index.retire(fold)
            if len(snapshot.coverage_files) > self.limit:
                self.index.compact_coverage(snapshot)
