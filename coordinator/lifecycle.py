"""The instant lifecycle: begin, commit, roll back and recover instants of one table.

One ``Coordinator`` drives the timeline of one table for one writer. It
writes only while its lease holds, stamps the lease epoch, the writer id and
the streaming batch id into every instant, and leaves the table in a state
readers open after a crash at any step: an instant is either completed or,
once rolled back, gone.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable

from laketide.coordinator.fence import COMMITTED, CommitFence
from laketide.coordinator.lease import Lease, LeaseLost
from laketide.coordinator.metrics import Metrics
from laketide.coordinator.retry import RetryPolicy
from laketide.coordinator.rollback import RollbackResult, Rollbacks
from laketide.coordinator.sweep import Sweeper
from laketide.table.format.commit import (
    BATCH_ID_KEY,
    BATCHES_KEY,
    EPOCH_KEY,
    WRITER_ID_KEY,
    CommitMetadata,
    WriteStat,
    requested_replace,
)
from laketide.table.format.commit_avro import commit_bytes
from laketide.table.format.compaction import pending_compactions
from laketide.table.format.instant import (
    COMMIT,
    COMPACTION,
    REPLACE_COMMIT,
    WRITE_ACTIONS,
    Instant,
    InstantClock,
    State,
)
from laketide.table.format.markers import WriteMarkers
from laketide.table.format.timeline import Timeline, TimelineWriter, redrawn
from laketide.table.storage.io import InstantFileExists
from laketide.table.table import Table

log = logging.getLogger(__name__)


class Coordinator:
    """The timeline of one table for one writer.

    Threads: the micro-batch thread begins and commits; the table-services thread cleans, compacts and
    archives through ``hold()``, ``clock``, ``retry`` and ``timeline_writer`` (each safe to share); an
    operator's change from the API runs under the writer's batch lock, so never beside a micro-batch.
    ``_lock`` guards what this object keeps between calls: the fenced epoch and the maps of inflight
    instants and committed batches.
    """

    def __init__(
        self,
        table: Table,
        lease: Lease,
        writer_id: str,
        clock: InstantClock | None = None,
        retry: RetryPolicy | None = None,
        instant_side_files: Callable[[str], list[str]] | None = None,
        metrics: Metrics | None = None,
    ):
        """``instant_side_files`` lists what an instant wrote besides data files (index deltas); rollback deletes them
        too."""
        self.table = table
        self.lease = lease
        self.writer_id = writer_id
        self.clock = clock or InstantClock()
        self.retry = retry or RetryPolicy()
        self.timeline_writer = TimelineWriter(table.io, table.config, self.clock)
        self._inflight: dict[str, dict[str, str]] = {}
        self._side_files = instant_side_files or (lambda instant: [])
        self._batch_of: dict[str, dict[str, int]] = {}
        self.metrics = metrics or Metrics(table.name)
        self.fence = CommitFence(table.io)
        self._fenced_epoch: int | None = None
        self._lock = threading.RLock()
        self.sweeper = Sweeper(self)
        self.rollbacks = Rollbacks(self)

    def is_own_pending(self, instant_time: str) -> bool:
        """Whether this coordinator began ``instant_time`` and has not finished it."""
        with self._lock:
            return instant_time in self._inflight

    def _began(self, instant_time: str) -> dict[str, str]:
        with self._lock:
            return self._inflight.get(instant_time, {})

    def side_files(self, instant_time: str) -> list[str]:
        """What ``instant_time`` wrote besides data files (index deltas)."""
        return self._side_files(instant_time)

    def hold(self) -> None:
        """Raise ``LeaseLost`` unless this writer holds the lease and has fenced the table with its epoch."""
        self.lease.check()
        self._ensure_fenced()

    def _ensure_fenced(self) -> None:
        """Record this holder's epoch on storage before it acts on the timeline (see ``coordinator.fence``)."""
        with self._lock:
            self._fence()

    def _fence(self) -> None:
        if self._fenced_epoch == self.lease.epoch:
            return
        newest = max(self.fence.epochs(), default=0)
        if self._fenced_epoch is None and newest > self.lease.epoch:
            # The table has seen a higher epoch than the lease counter gives: the counter was reset
            # (a new ZooKeeper ensemble, a lost lease file). The held lease is current, so move on past it.
            log.warning(
                "the table has seen epoch %d but the lease gave %d; taking epoch %d",
                newest,
                self.lease.epoch,
                newest + 1,
            )
            self.lease.advance_epoch(newest + 1)
        self.fence.raise_to(self.lease.epoch)
        self._fenced_epoch = self.lease.epoch

    # -- begin / commit ---------------------------------------------------

    def committed_batches(self, timeline: Timeline | None = None) -> dict[str, int]:
        """The newest streaming batch id committed per writer id, archived commits included.

        Each commit carries the whole map forward (``BATCHES_KEY``), so the
        active timeline alone answers for batches archival moved away.
        """
        if timeline is None:
            return self._batches_now()[1]
        newest: dict[str, int] = {}
        writes = timeline.completed_writes()
        # archived commits drop out of the cache, so it stays as long as the active timeline
        active = {i.timestamp for i in writes}
        with self._lock:
            self._batch_of = {ts: b for ts, b in self._batch_of.items() if ts in active}
            for instant in writes:
                for writer, batch in self._batches_of(instant, timeline).items():
                    newest[writer] = max(newest.get(writer, -1), batch)
        return newest

    @redrawn
    def _batches_now(self) -> tuple[Timeline, dict[str, int]]:
        """The timeline as it is now and the batches it holds: drawn again from a new listing should the services
        thread archive a commit the listing shows before it is read."""
        timeline = self.table.timeline
        return timeline, self.committed_batches(timeline)

    def _batches_of(self, instant: Instant, timeline: Timeline) -> dict[str, int]:
        if instant.timestamp not in self._batch_of:
            # completed instants never change, so each commit's metadata is read once per coordinator
            extra = timeline.commit_metadata(instant).extra_metadata
            batches = {w: int(b) for w, b in json.loads(extra.get(BATCHES_KEY, "{}")).items()}
            if BATCH_ID_KEY in extra and WRITER_ID_KEY in extra:
                batches[extra[WRITER_ID_KEY]] = int(extra[BATCH_ID_KEY])
            self._batch_of[instant.timestamp] = batches
        return self._batch_of[instant.timestamp]

    def is_committed(self, batch_id: int, timeline: Timeline | None = None) -> bool:
        """Whether a batch of this writer is committed: Spark runs a query's batches in order, so any id up to the
        newest."""
        return batch_id <= self.committed_batches(timeline).get(self.writer_id, -1)

    def begin(self, batch_id: int, action: str = COMMIT, operation: str = "UPSERT") -> str | None:
        """Start the instant of one micro-batch; ``None`` when this batch is already committed.

        ``operation`` is Hudi's ``WriteOperationType`` name (UPSERT, INSERT, BULK_INSERT,
        DELETE_PARTITION, ...); a replacecommit's requested file records it, as Hudi's do.
        """
        self.lease.check()
        self._ensure_fenced()
        timeline, batches = self._batches_now()
        if batch_id <= batches.get(self.writer_id, -1):
            log.info("batch %s of writer %s is already committed; skipping its replay", batch_id, self.writer_id)
            return None
        instant_time = self.clock.next(after=timeline.last_timestamp)
        extra = {
            BATCH_ID_KEY: str(batch_id),
            WRITER_ID_KEY: self.writer_id,
            EPOCH_KEY: str(self.lease.epoch),
            BATCHES_KEY: json.dumps({**batches, self.writer_id: batch_id}, sort_keys=True),
        }
        requested = Instant(instant_time, action, State.REQUESTED)
        plan = requested_replace(operation, extra) if action == REPLACE_COMMIT else b""
        self.retry.run(lambda: self.timeline_writer.write(requested, plan), f"request {instant_time}")
        began = CommitMetadata(extra_metadata=extra, operation_type=operation)
        body = commit_bytes(began, self.table.config.version, action == REPLACE_COMMIT)
        inflight = requested.with_state(State.INFLIGHT)
        self.retry.run(lambda: self.timeline_writer.write(inflight, body), f"mark {instant_time} inflight")
        with self._lock:
            self._inflight[instant_time] = extra
        return instant_time

    def commit(
        self,
        instant_time: str,
        write_stats: Iterable[WriteStat],
        extra: dict[str, str] | None = None,
        action: str = COMMIT,
        operation: str = "UPSERT",
        replaced_file_ids: dict[str, list[str]] | None = None,
        pending_action: str | None = None,
    ) -> Instant:
        """Complete an instant: one atomic write of its commit metadata, while the lease holds.

        A replacecommit names the file groups it replaces in ``replaced_file_ids`` (partition -> ids).
        ``pending_action`` is the action of the inflight file when it is not ``action``: a
        compaction is inflight as ``compaction`` and completes as a ``commit``.
        """
        partitions: dict[str, list[WriteStat]] = defaultdict(list)
        for stat in write_stats:
            partitions[stat.partition_path or ""].append(stat)
        metadata = CommitMetadata(
            partition_to_write_stats=dict(partitions),
            extra_metadata={**self._began(instant_time), **(extra or {})},
            operation_type=operation,
            partition_to_replace_file_ids=replaced_file_ids or {},
            compacted=pending_action == COMPACTION,
        )
        body = commit_bytes(metadata, self.table.config.version, action == REPLACE_COMMIT)
        completed = Instant(instant_time, action, State.COMPLETED)
        inflight = Instant(instant_time, pending_action or action, State.INFLIGHT)
        self._reconcile(instant_time, metadata)

        def decide_and_complete() -> Instant:
            self.lease.check()
            self.fence.decide_commit(instant_time, self.lease.epoch, body)
            if not self.timeline_writer.exists(inflight):
                raise LeaseLost(f"{instant_time} was rolled back by a newer lease holder; it is not completed")
            return self.write_completed(completed, body)

        instant = self.retry.run(decide_and_complete, f"commit {instant_time}")
        with self._lock:
            self._inflight.pop(instant_time, None)
        self.finished(instant_time)
        self.metrics.commits.inc()
        log.info("committed %s (%d files)", instant_time, len(metadata.write_stats()))
        try:
            self.sweep()
        except (OSError, ValueError, LeaseLost):
            log.exception("sweeping after %s failed; the next commit sweeps again", instant_time)
        return instant

    def write_completed(self, completed: Instant, body: bytes) -> Instant:
        """Write a completed timeline file once; an earlier attempt that landed with the same body counts."""
        try:
            return self.timeline_writer.write(completed, body)
        except InstantFileExists:
            # An earlier attempt's rename landed although it reported a failure.
            if self.table.io.read_bytes(self.timeline_writer.path(completed)) == body:
                return completed
            raise

    def _reconcile(self, instant_time: str, metadata: CommitMetadata) -> None:
        """Delete the files of failed or duplicate task attempts: marked, but not in the write statuses."""
        written = {s.path for s in metadata.write_stats()}
        extra = sorted(WriteMarkers(self.table.io, instant_time).data_paths() - written)
        for path in extra:
            self.table.io.delete(path)
        if extra:
            log.info("%s: deleted %d files of task attempts that did not win: %s", instant_time, len(extra), extra[:5])

    def finished(self, instant_time: str) -> None:
        """An instant is completed or rolled back: its outcome and markers are no longer needed."""
        self.fence.forget(instant_time)
        WriteMarkers(self.table.io, instant_time).delete_all()

    # -- rollback ---------------------------------------------------------

    def rollback(
        self,
        instant_time: str,
        force: bool = False,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
        restoring: bool = False,
    ) -> RollbackResult:
        """Roll back one instant (see ``coordinator.rollback``); safe to repeat after a crash at any step."""
        return self.rollbacks.rollback(instant_time, force, dry_run, progress, restoring)

    def settle(self, instant_time: str, timeline: Timeline) -> bool:
        """Claim a pending write for rollback; ``True`` when its writer had decided to commit, and it is now
        completed."""
        pending = [i for i in timeline.pending(WRITE_ACTIONS) if i.timestamp == instant_time]
        if not pending:
            return False
        decided = self.fence.claim_rollback(instant_time, self.lease.epoch)
        if decided is None or decided.outcome != COMMITTED:
            return False
        completed = Instant(instant_time, pending[0].action, State.COMPLETED)
        self.retry.run(lambda: self.write_completed(completed, decided.metadata), f"complete {instant_time}")
        self.finished(instant_time)
        log.warning(
            "%s was decided by the writer of epoch %s before it stopped; completed it", instant_time, decided.epoch
        )
        return True

    def recover(self) -> list[RollbackResult]:
        """Finish interrupted rollbacks and roll back (or complete, if decided) every write left requested or
        inflight."""
        self.lease.check()
        self._ensure_fenced()
        results = []
        timeline = self.table.timeline
        targets = set(self.rollbacks.pending(timeline))
        targets |= {i.timestamp for i in timeline.pending(WRITE_ACTIONS)}
        # a compaction whose rollback completed but whose plan files a crash left must not run again
        targets |= {c.timestamp for c in pending_compactions(timeline)} & set(self.rollbacks.completed(timeline))
        for instant_time in sorted(targets):
            if self.settle(instant_time, timeline):
                continue
            results.append(self.rollback(instant_time, force=True))
        self.sweep()
        return results

    def sweep(self, now: float | None = None) -> list[str]:
        """Delete what writes that never complete leave behind (see ``coordinator.sweep``)."""
        return self.sweeper.sweep(now)
