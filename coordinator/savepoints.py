"""Savepoints and restore under the lease, as Hudi's savepoint and restore actions.

A savepoint pins one completed commit: cleaning keeps the files a read as of
it needs (each slice's base file and log files), and archival stops before
it. A restore rolls back every write after a savepoint, newest first, pending
compactions included, so the table reads as it did then. It first checks
that every file of that state is still there, and refuses, naming what is
missing, rather than return part of the table.

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

from laketide.coordinator.actions import TimelineAction
from laketide.coordinator.lifecycle import Coordinator
from laketide.table.errors import Refused
from laketide.table.format.compaction import pending_compactions
from laketide.table.format.instant import (
    RESTORE,
    ROLLBACK,
    SAVEPOINT,
    WRITE_ACTIONS,
    Instant,
    State,
)
from laketide.table.format.rollback import RollbackMetadata
from laketide.table.format.savepoint import (
    RestoreMetadata,
    RestorePlan,
    SavepointMetadata,
    held_files,
    lookup_window_start,
    savepoints,
)
from laketide.table.format.slice_history import replay, replay_steps
from laketide.table.format.timeline import InstantNotFound, Timeline

log = logging.getLogger(__name__)


class SavepointRefused(Refused, ValueError):
    pass


def _listed(names: list[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


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
        self.savepoint_steps = TimelineAction(coordinator, SAVEPOINT)
        self.restore_steps = TimelineAction(coordinator, RESTORE)

    def list(self) -> list[SavepointMetadata]:
        return savepoints(self.table.timeline)

    def create(self, instant: str | None = None, user: str | None = None, comment: str = "") -> SavepointMetadata:
        """Savepoint a completed write (default: the latest); saving one already saved returns it."""
        coordinator = self.coordinator
        coordinator.hold()
        timeline = self.table.timeline
        target = self._completed_write(timeline, instant)
        done = Instant(target, SAVEPOINT, State.COMPLETED)
        if self.savepoint_steps.exists(target, State.COMPLETED):
            return SavepointMetadata.from_bytes(target, timeline.read_bytes(done))
        window = lookup_window_start(timeline)
        if window is not None and target < window:
            raise SavepointRefused(
                f"{target} cannot be savepointed: it is before {window}, the oldest commit the last clean kept, "
                f"so cleaning may have deleted files a read of it needs; savepoint {window} or a newer commit"
            )
        view = self.table.file_system_view(timeline)
        files = held_files(self.table.io, view.latest_slices(as_of=target), target)
        on_storage = _on_storage(view)
        missing = sorted((replay(timeline, target).files() | set(files)) - on_storage)
        if missing:
            raise SavepointRefused(
                f"{target} cannot be savepointed: files a read of it needs are gone ({_listed(missing, 3)})"
            )
        metadata = SavepointMetadata(target, user or getpass.getuser(), int(time.time() * 1000), comment, files)
        self.savepoint_steps.start(target)
        coordinator.hold()
        self.savepoint_steps.complete(target, metadata.to_bytes())
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

    def delete(self, instant: str) -> None:
        """Drop a savepoint: its completed file, then its inflight one (Hudi's order)."""
        self.coordinator.hold()
        steps = self.savepoint_steps
        if not (steps.exists(instant, State.COMPLETED) or steps.exists(instant, State.INFLIGHT)):
            raise InstantNotFound(instant, f"no savepoint {instant} on {self.table.uri}")
        done = Instant(instant, SAVEPOINT, State.COMPLETED)
        steps.remove(done, done.with_state(State.INFLIGHT))
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
        saved = next((sp for sp in savepoints(timeline) if sp.instant == savepoint), None)
        if saved is None:
            raise InstantNotFound(savepoint, f"no savepoint {savepoint} on {self.table.uri}")
        later = [sp.instant for sp in savepoints(timeline) if sp.instant > savepoint]
        if later:
            raise SavepointRefused(
                f"savepoint {_listed(later)} is newer than {savepoint}, and restoring would roll back the "
                "commit it holds; "
                f"delete it first (laketide savepoint delete TABLE {later[0]})"
            )
        self._check_whole(timeline, saved)
        # pending compactions after the savepoint go too: their plans may name logs of writes rolled back here
        after = sorted(
            {
                (i.timestamp, i.action)
                for i in [*timeline.filter(actions=WRITE_ACTIONS), *pending_compactions(timeline)]
                if i.timestamp > savepoint
            },
            reverse=True,
        )
        if not after:
            return RestoreResult(savepoint, None)
        plan = RestorePlan(savepoint, tuple(after))
        restore_time = self.restore_steps.new_time(timeline)
        self.restore_steps.request(restore_time, plan.to_bytes())
        return self._execute(restore_time, plan, progress)

    def _check_whole(self, timeline: Timeline, saved: SavepointMetadata) -> None:
        """Refuse a restore that would return part of the table: every file of the savepointed state must exist.

        That state is the files the savepoint lists, and the slices the commits up
        to it wrote by their metadata (savepoints written before they listed log
        files name base files only). Nothing is changed when a file is missing.
        """
        on_storage = _on_storage(self.table.file_system_view(timeline))
        missing = sorted((set(saved.files) | replay(timeline, saved.instant).files()) - on_storage)
        if not missing:
            return
        raise SavepointRefused(
            f"restoring to {saved.instant} would return part of the table: {len(missing)} files of that state are gone "
            f"({_listed(missing)}), deleted by a clean or by hand. Nothing was changed. "
            f"{self._nearest_whole(timeline, saved.instant, on_storage)}"
        )

    def _nearest_whole(self, timeline: Timeline, savepoint: str, on_storage: set[str]) -> str:
        """Where the table can go back to without loss instead: a whole savepoint, or the oldest whole write after this
        one."""
        whole = [
            sp.instant
            for sp in reversed(savepoints(timeline))
            if sp.instant != savepoint and not (set(sp.files) | replay(timeline, sp.instant).files()) - on_storage
        ]
        if whole:
            return f"Savepoint {whole[0]} can be restored without loss."
        for write, history in replay_steps(timeline):
            if write.timestamp > savepoint and not history.files() - on_storage:
                return (
                    f"The oldest state after it that can be restored without loss is {write.timestamp}: "
                    f"savepoint it (laketide savepoint create TABLE {write.timestamp}), then restore to it."
                )
        return "No older state of the table is whole."

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

    def _execute(
        self, restore_time: str, plan: RestorePlan, progress: Callable[[int, int], None] | None
    ) -> RestoreResult:
        coordinator = self.coordinator
        started = time.monotonic()
        self.restore_steps.start(restore_time)
        for done, (target, _) in enumerate(plan.instants, 1):
            if any(i.timestamp == target for i in self.table.timeline):
                # checked as a whole before the plan was written: the savepointed state is whole, though a
                # state on the way there (a compaction rolled back before the one it replaced) may not be
                coordinator.rollback(target, force=True, restoring=True)
            if progress is not None:
                progress(done, len(plan.instants))
        rollbacks = self._rollbacks_of(restore_time, plan)
        metadata = RestoreMetadata(
            restore_time,
            plan,
            {t: body for t, (_, body) in rollbacks.items()},
            int((time.monotonic() - started) * 1000),
        )
        coordinator.hold()
        self.restore_steps.complete(restore_time, metadata.to_bytes())
        # the restore's metadata holds its rollbacks, so their own instants go, as Hudi's finishRestore removes them;
        # pending states first, so a crash part way leaves a completed rollback, never a pending one
        for rollback_time, _ in rollbacks.values():
            self.restore_steps.remove(
                *(
                    Instant(rollback_time, ROLLBACK, state)
                    for state in (State.REQUESTED, State.INFLIGHT, State.COMPLETED)
                )
            )
        files = sum(len(RollbackMetadata.from_bytes(body).deleted) for _, body in rollbacks.values())
        log.info(
            "restored to savepoint %s with %s: %d instants rolled back, %d files deleted",
            plan.savepoint,
            restore_time,
            len(plan.instants),
            files,
        )
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


def _on_storage(view) -> set[str]:
    return {f.path for group in view.groups.values() for f in [*group.base_files, *group.log_files]}
