"""The instant lifecycle: begin, commit, roll back and recover instants of one table.

One ``Coordinator`` drives the timeline of one table for one writer. It
writes only while its lease holds, stamps the lease epoch, the writer id and
the streaming batch id into every instant, and leaves the table in a state
readers open after a crash at any step: an instant is either completed or,
once rolled back, gone.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from laketide.coordinator.lease import Lease
from laketide.coordinator.metrics import Metrics
from laketide.coordinator.retry import RetryPolicy
from laketide.table.commit import BATCH_ID_KEY, EPOCH_KEY, WRITER_ID_KEY, CommitMetadata, WriteStat
from laketide.table.instant import COMMIT, ROLLBACK, WRITE_ACTIONS, Instant, InstantClock, State, validate_instant_time
from laketide.table.io import InstantFileExists
from laketide.table.rollback import RollbackMetadata, RollbackPlan
from laketide.table.table import Table
from laketide.table.timeline import InstantNotFound, Timeline, TimelineWriter

log = logging.getLogger(__name__)


class RollbackRefused(RuntimeError):
    """Rolling back this instant needs ``force`` (it is completed and not the newest)."""


@dataclass
class RollbackResult:
    instant: str
    action: str
    rollback_instant: str | None
    files: list[str] = field(default_factory=list)
    was_completed: bool = False
    dry_run: bool = False


class Coordinator:
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
        """``instant_side_files`` lists what an instant wrote besides data files (index deltas); rollback deletes them too."""
        self.table = table
        self.lease = lease
        self.writer_id = writer_id
        self.clock = clock or InstantClock()
        self.retry = retry or RetryPolicy()
        self.timeline_writer = TimelineWriter(table.io, table.config)
        self._inflight: dict[str, dict[str, str]] = {}
        self._side_files = instant_side_files or (lambda instant: [])
        self._batch_of: dict[str, tuple[str, int] | None] = {}
        self.metrics = metrics or Metrics()

    # -- begin / commit ---------------------------------------------------

    def committed_batches(self, timeline: Timeline | None = None) -> dict[str, set[int]]:
        """Streaming batch ids already committed, per writer id."""
        timeline = timeline or self.table.timeline
        batches: dict[str, set[int]] = defaultdict(set)
        for instant in timeline.completed_writes():
            if instant.timestamp not in self._batch_of:
                # completed instants never change, so each commit's metadata is read once per coordinator
                extra = timeline.commit_metadata(instant).extra_metadata
                known = BATCH_ID_KEY in extra and WRITER_ID_KEY in extra
                self._batch_of[instant.timestamp] = (extra[WRITER_ID_KEY], int(extra[BATCH_ID_KEY])) if known else None
            if (writer_batch := self._batch_of[instant.timestamp]) is not None:
                batches[writer_batch[0]].add(writer_batch[1])
        return batches

    def is_committed(self, batch_id: int, timeline: Timeline | None = None) -> bool:
        return batch_id in self.committed_batches(timeline).get(self.writer_id, set())

    def begin(self, batch_id: int, action: str = COMMIT) -> str | None:
        """Start the instant of one micro-batch; ``None`` when this batch is already committed."""
        self.lease.check()
        timeline = self.table.timeline
        if self.is_committed(batch_id, timeline):
            log.info("batch %s of writer %s is already committed; skipping its replay", batch_id, self.writer_id)
            return None
        instant_time = self.clock.next(after=timeline.last_timestamp)
        extra = {BATCH_ID_KEY: str(batch_id), WRITER_ID_KEY: self.writer_id, EPOCH_KEY: str(self.lease.epoch)}
        requested = Instant(instant_time, action, State.REQUESTED)
        self.retry.run(lambda: self.timeline_writer.write(requested), f"request {instant_time}")
        body = CommitMetadata(extra_metadata=extra, operation_type="UPSERT").to_json_bytes()
        inflight = requested.with_state(State.INFLIGHT)
        self.retry.run(lambda: self.timeline_writer.write(inflight, body), f"mark {instant_time} inflight")
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
    ) -> Instant:
        """Complete an instant: one atomic write of its commit metadata, while the lease holds.

        A replacecommit names the file groups it replaces in ``replaced_file_ids`` (partition -> ids).
        """
        partitions: dict[str, list[WriteStat]] = defaultdict(list)
        for stat in write_stats:
            partitions[stat.partition_path or ""].append(stat)
        metadata = CommitMetadata(
            partition_to_write_stats=dict(partitions),
            extra_metadata={**self._inflight.get(instant_time, {}), **(extra or {})},
            operation_type=operation,
            partition_to_replace_file_ids=replaced_file_ids or {},
        )
        body = metadata.to_json_bytes()
        completed = Instant(instant_time, action, State.COMPLETED)

        def write_completed() -> Instant:
            self.lease.check()
            try:
                return self.timeline_writer.write(completed, body)
            except InstantFileExists:
                # An earlier attempt's rename landed although it reported a failure.
                if self.table.io.read_bytes(self.timeline_writer.path(completed)) == body:
                    return completed
                raise

        instant = self.retry.run(write_completed, f"commit {instant_time}")
        self._inflight.pop(instant_time, None)
        self.metrics.commits.inc()
        log.info("committed %s (%d files)", instant_time, len(metadata.write_stats()))
        return instant

    # -- rollback ---------------------------------------------------------

    def _pending_rollbacks(self, timeline: Timeline) -> dict[str, tuple[Instant, RollbackPlan]]:
        """Rollbacks begun but not completed, by the instant they roll back."""
        found = {}
        for rb in timeline.pending([ROLLBACK]):
            requested = rb.with_state(State.REQUESTED)
            plan = RollbackPlan.from_bytes(timeline.read_bytes(requested))
            found[plan.target] = (rb, plan)
        return found

    def _completed_rollbacks(self, timeline: Timeline) -> dict[str, Instant]:
        found = {}
        for rb in timeline.filter({State.COMPLETED}, [ROLLBACK]):
            found[RollbackMetadata.from_bytes(timeline.read_bytes(rb)).target] = rb
        return found

    def plan_rollback(self, instant_time: str, force: bool = False, timeline: Timeline | None = None) -> RollbackPlan:
        """What rolling back ``instant_time`` would delete; raises if it may not be rolled back."""
        validate_instant_time(instant_time)
        timeline = timeline or self.table.timeline
        targets = [i for i in timeline.find(instant_time) if i.action in WRITE_ACTIONS]
        if not targets:
            raise InstantNotFound(f"{instant_time} is not a commit, deltacommit or replacecommit")
        target = targets[0]
        if target.is_completed:
            newest = timeline.latest_completed_write()
            if newest is not None and newest.timestamp != instant_time and not force:
                raise RollbackRefused(
                    f"{instant_time} is completed and not the newest completed instant ({newest.timestamp}); "
                    "rolling it back needs force"
                )
        files = self.table.file_system_view(timeline).uncommitted_files(instant_time) + self._side_files(instant_time)
        return RollbackPlan(instant_time, target.action, tuple(files))

    def rollback(
        self, instant_time: str, force: bool = False, dry_run: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> RollbackResult:
        """Roll back one instant: delete its files, record a rollback instant, drop its timeline files.

        Every step can be repeated: a rollback interrupted at any point is
        finished by calling ``rollback`` (or ``recover``) again.
        """
        if not dry_run:
            self.lease.check()
        timeline = self.table.timeline
        pending = self._pending_rollbacks(timeline)
        if instant_time in pending:
            rb, plan = pending[instant_time]
            return self._execute(rb.timestamp, plan, timeline, progress)
        done = self._completed_rollbacks(timeline).get(instant_time)
        if done is not None:
            # Rolled back already; at most the target's timeline files are left to remove.
            meta = RollbackMetadata.from_bytes(timeline.read_bytes(done))
            if not dry_run:
                self.timeline_writer.delete_all_states(instant_time, meta.target_action)
            return RollbackResult(instant_time, meta.target_action, done.timestamp, meta.deleted, dry_run=dry_run)
        plan = self.plan_rollback(instant_time, force, timeline)
        if dry_run:
            was_completed = timeline.is_completed_write(instant_time)
            return RollbackResult(instant_time, plan.target_action, None, list(plan.files), was_completed, dry_run=True)
        rollback_time = self.clock.next(after=timeline.last_timestamp)
        requested = Instant(rollback_time, ROLLBACK, State.REQUESTED)
        self.retry.run(lambda: self.timeline_writer.write(requested, plan.to_bytes()), f"plan rollback {rollback_time}")
        return self._execute(rollback_time, plan, timeline, progress)

    def _execute(
        self, rollback_time: str, plan: RollbackPlan, timeline: Timeline, progress: Callable[[int, int], None] | None = None
    ) -> RollbackResult:
        started = time.monotonic()
        writer = self.timeline_writer
        self.lease.check()
        writer.write(Instant(rollback_time, ROLLBACK, State.INFLIGHT))
        was_completed = timeline.is_completed_write(plan.target)
        # Un-completing the instant first hides its files from readers before any is deleted.
        writer.delete(Instant(plan.target, plan.target_action, State.COMPLETED))
        late = self.table.file_system_view(timeline).uncommitted_files(plan.target) + self._side_files(plan.target)
        files = sorted(set(plan.files) | set(late))
        for done, path in enumerate(files, 1):
            self.table.io.delete(path)
            if progress is not None:
                progress(done, len(files))
        elapsed = int((time.monotonic() - started) * 1000)
        metadata = RollbackMetadata(rollback_time, plan.target, plan.target_action, files, elapsed)
        completed = Instant(rollback_time, ROLLBACK, State.COMPLETED)
        self.lease.check()
        self.retry.run(lambda: writer.write(completed, metadata.to_bytes()), f"complete rollback {rollback_time}")
        writer.delete_all_states(plan.target, plan.target_action)
        log.info("rolled back %s with %s (%d files deleted)", plan.target, rollback_time, len(files))
        self.metrics.rollbacks.inc()
        return RollbackResult(plan.target, plan.target_action, rollback_time, files, was_completed)

    def recover(self) -> list[RollbackResult]:
        """Finish interrupted rollbacks and roll back every write left requested or inflight."""
        self.lease.check()
        results = []
        timeline = self.table.timeline
        targets = set(self._pending_rollbacks(timeline))
        targets |= {i.timestamp for i in timeline.pending(WRITE_ACTIONS)}
        for instant_time in sorted(targets):
            results.append(self.rollback(instant_time, force=True))
        return results
