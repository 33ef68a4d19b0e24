"""Savepoints and restore under the lease, as Hudi's savepoint and restore actions.

A savepoint pins one completed commit: cleaning keeps the files a read as of
it needs, and archival stops before it. A restore rolls back every write
after a savepoint, newest first, so the table reads as it did then.

Each step can be repeated. A savepoint interrupted before its completed file
is finished by creating it again; a deletion interrupted half way by deleting
again. A restore records its plan first; a restore interrupted anywhere is
finished by ``resume_restore`` (the job calls it at start) or by asking again.
"""

from __future__ import annotations

import getpass
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from laketide.coordinator.lifecycle import Coordinator
from laketide.table.instant import RESTORE, ROLLBACK, SAVEPOINT, WRITE_ACTIONS, Instant, State
from laketide.table.rollback import RollbackMetadata
from laketide.table.savepoint import RestoreMetadata, RestorePlan, SavepointMetadata, savepoints
from laketide.table.timeline import InstantNotFound, Timeline

log = logging.getLogger(__name__)


class SavepointRefused(ValueError):
    pass


@dataclass
class RestoreResult:
    savepoint: str
    restore_instant: str | None  # None: nothing was written after the savepoint
    rolled_back: list[str] = field(default_factory=list)
    files: int = 0


class Savepoints:
    def __init__(self, coordinator: Coordinator):
        self.coordinator = coordinator
        self.table = coordinator.table

    def list(self) -> list[SavepointMetadata]:
        return savepoints(self.table.timeline)

    def create(self, instant: str | None = None, user: str | None = None, comment: str = "") -> SavepointMetadata:
        """Savepoint a completed write (default: the latest); saving one already saved returns it."""
        coordinator = self.coordinator
        coordinator.hold()
        timeline = self.table.timeline
        target = self._completed_write(timeline, instant)
        done = Instant(target, SAVEPOINT, State.COMPLETED)
        if coordinator.timeline_writer.exists(done):
            return SavepointMetadata.from_bytes(target, timeline.read_bytes(done))
        missing = self._cleaned_files(timeline, target)
        if missing:
            raise SavepointRefused(f"{target} cannot be savepointed: cleaning already deleted files a read of it needs ({missing[:3]})")
        slices = self.table.file_system_view(timeline).latest_slices(as_of=target)
        files = tuple(sorted(s.base_file.path for s in slices if s.base_file is not None))
        metadata = SavepointMetadata(target, user or getpass.getuser(), int(time.time() * 1000), comment, files)
        writer = coordinator.timeline_writer
        coordinator.retry.run(lambda: writer.write(done.with_state(State.INFLIGHT)), f"savepoint {target}")
        coordinator.hold()
        coordinator.retry.run(lambda: coordinator.write_completed(done, metadata.to_bytes()), f"complete savepoint {target}")
        log.info("savepointed %s (%d files held)", target, len(files))
        return metadata

    def _completed_write(self, timeline: Timeline, instant: str | None) -> str:
        if instant is None:
            latest = timeline.latest_completed_write()
            if latest is None:
                raise SavepointRefused("the table has no completed write to savepoint")
            return latest.timestamp
        if not timeline.is_completed_write(instant):
            timeline.find(instant)  # InstantNotFound when it is not on the timeline at all
            raise SavepointRefused(f"{instant} is not a completed write; only completed writes can be savepointed")
        return instant

    def _cleaned_files(self, timeline: Timeline, target: str) -> list[str]:
        """Files a read as of ``target`` needs that are gone: per file group, the newest one its commits up to ``target`` wrote."""
        newest: dict[tuple[str, str], str] = {}
        for write in timeline.completed_writes():
            if write.timestamp > target:
                break
            meta = timeline.commit_metadata(write)
            for partition, file_id in meta.replaced_file_ids():
                newest.pop((partition, file_id), None)
            for stat in meta.write_stats():
                if stat.path:
                    newest[(stat.partition_path or "", stat.file_id)] = stat.path
        return sorted(p for p in newest.values() if not self.table.io.exists(p))

    def delete(self, instant: str) -> None:
        """Drop a savepoint: its completed file, then its inflight one (Hudi's order)."""
        coordinator = self.coordinator
        coordinator.hold()
        writer = coordinator.timeline_writer
        done = Instant(instant, SAVEPOINT, State.COMPLETED)
        if not (writer.exists(done) or writer.exists(done.with_state(State.INFLIGHT))):
            raise InstantNotFound(instant)
        writer.delete(done)
        writer.delete(done.with_state(State.INFLIGHT))
        log.info("deleted savepoint %s", instant)

    # -- restore ----------------------------------------------------------

    def restore(self, savepoint: str, progress: Callable[[int, int], None] | None = None) -> RestoreResult:
        """Roll the table back to a savepoint. A pending restore to the same savepoint is finished instead."""
        coordinator = self.coordinator
        coordinator.hold()
        timeline = self.table.timeline
        pending = self._pending_restore(timeline)
        if pending is not None:
            restore_time, plan = pending
            if plan.savepoint != savepoint:
                raise SavepointRefused(f"a restore to {plan.savepoint} is pending ({restore_time}); finish it first")
            return self._execute(restore_time, plan, progress)
        if not coordinator.timeline_writer.exists(Instant(savepoint, SAVEPOINT, State.COMPLETED)):
            raise InstantNotFound(savepoint)
        after = sorted({(i.timestamp, i.action) for i in timeline if i.action in WRITE_ACTIONS and i.timestamp > savepoint}, reverse=True)
        if not after:
            return RestoreResult(savepoint, None)
        plan = RestorePlan(savepoint, tuple(after))
        restore_time = coordinator.clock.next(after=timeline.last_timestamp)
        requested = Instant(restore_time, RESTORE, State.REQUESTED)
        coordinator.retry.run(lambda: coordinator.timeline_writer.write(requested, plan.to_bytes()), f"plan restore {restore_time}")
        return self._execute(restore_time, plan, progress)

    def resume_restore(self) -> RestoreResult | None:
        """Finish a restore a crash interrupted; ``None`` when there is none."""
        pending = self._pending_restore(self.table.timeline)
        if pending is None:
            return None
        log.warning("finishing the restore %s to savepoint %s", pending[0], pending[1].savepoint)
        return self._execute(*pending, None)

    def _pending_restore(self, timeline: Timeline) -> tuple[str, RestorePlan] | None:
        for instant in timeline.pending([RESTORE]):
            return instant.timestamp, RestorePlan.from_bytes(timeline.read_bytes(instant.with_state(State.REQUESTED)))
        return None

    def _execute(self, restore_time: str, plan: RestorePlan, progress: Callable[[int, int], None] | None) -> RestoreResult:
        coordinator = self.coordinator
        started = time.monotonic()
        writer = coordinator.timeline_writer
        writer.write(Instant(restore_time, RESTORE, State.INFLIGHT))
        for done, (target, _) in enumerate(plan.instants, 1):
            if any(i.timestamp == target for i in self.table.timeline):
                coordinator.rollback(target, force=True)
            if progress is not None:
                progress(done, len(plan.instants))
        rollbacks = self._rollbacks_of(restore_time, plan)
        metadata = RestoreMetadata(restore_time, plan, {t: body for t, (_, body) in rollbacks.items()}, int((time.monotonic() - started) * 1000))
        coordinator.hold()
        completed = Instant(restore_time, RESTORE, State.COMPLETED)
        coordinator.retry.run(lambda: coordinator.write_completed(completed, metadata.to_bytes()), f"complete restore {restore_time}")
        # the restore's metadata holds its rollbacks, so their own instants go, as Hudi's finishRestore removes them;
        # pending states first, so a crash part way leaves a completed rollback, never a pending one
        for rollback_time, _ in rollbacks.values():
            for state in (State.REQUESTED, State.INFLIGHT, State.COMPLETED):
                writer.delete(Instant(rollback_time, ROLLBACK, state))
        files = sum(len(RollbackMetadata.from_bytes(body).deleted) for _, body in rollbacks.values())
        log.info("restored to savepoint %s with %s: %d instants rolled back, %d files deleted", plan.savepoint, restore_time, len(plan.instants), files)
        return RestoreResult(plan.savepoint, restore_time, [t for t, _ in plan.instants], files)

    def _rollbacks_of(self, restore_time: str, plan: RestorePlan) -> dict[str, tuple[str, bytes]]:
        """target -> (rollback time, rollback metadata) of the rollbacks this restore made."""
        timeline = self.table.timeline
        targets = {t for t, _ in plan.instants}
        found = {}
        for rb in timeline.filter({State.COMPLETED}, [ROLLBACK]):
            if rb.timestamp > restore_time:
                body = timeline.read_bytes(rb)
                target = RollbackMetadata.from_bytes(body).target
                if target in targets:
                    found[target] = (rb.timestamp, body)
        return found
