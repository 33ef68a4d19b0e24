"""Rollback: plan what an instant wrote, refuse what would lose rows, delete, record, drop its timeline files.

``<t>.rollback.requested`` holds the plan (Hudi's ``HoodieRollbackPlan``),
then the target is un-completed (its files hide from readers), its files
go, ``<t>.rollback`` records what went, and the target's timeline files are
removed, a completed compaction's plan first. Every step can be repeated: a
rollback interrupted anywhere is finished by asking again (or ``recover``).

A target is a commit, deltacommit or replacecommit, or a pending compaction.
``force`` allows a completed one that is not the newest; nothing allows a
rollback that would lose rows that are not the target's own
(``rollback_guard``). A restore checks the state it returns to as a whole
and passes ``restoring`` to skip the checks of each step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from laketide.coordinator.actions import TimelineAction
from laketide.coordinator.rollback_guard import NeedsForce, RollbackRefused, refuse_loss
from laketide.coordinator.sweep import written_by
from laketide.table.format.instant import (
    COMMIT,
    COMPACTION,
    ROLLBACK,
    WRITE_ACTIONS,
    Instant,
    State,
    validate_instant_time,
)
from laketide.table.format.markers import WriteMarkers
from laketide.table.format.rollback import RollbackMetadata, RollbackPlan
from laketide.table.format.timeline import InstantNotFound, Timeline

if TYPE_CHECKING:
    from laketide.coordinator.lifecycle import Coordinator

log = logging.getLogger(__name__)

__all__ = ["RollbackRefused", "RollbackResult", "Rollbacks"]


@dataclass
class RowChanges:
    """The rows a completed write changed; rolling it back takes them back."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0


@dataclass
class RollbackResult:
    instant: str
    action: str
    rollback_instant: str | None
    files: list[str] = field(default_factory=list)
    was_completed: bool = False
    dry_run: bool = False
    # the rows the rolled-back write had changed, which go back to what they were (its commit's totals);
    # None for a write that never completed
    rows: RowChanges | None = None
    # a dry run without force of what only a forced rollback may do: why (the run itself is refused without force)
    needs_force: str | None = None


class Rollbacks:
    """The rollbacks of one coordinator, under its lease."""

    def __init__(self, coordinator: Coordinator):
        self.coordinator = coordinator
        self.table = coordinator.table
        self.steps = TimelineAction(coordinator, ROLLBACK)

    def pending(self, timeline: Timeline) -> dict[str, tuple[Instant, RollbackPlan]]:
        """Rollbacks begun but not completed, by the instant they roll back."""
        found = {}
        for rb in timeline.pending([ROLLBACK]):
            requested = rb.with_state(State.REQUESTED)
            plan = RollbackPlan.from_bytes(timeline.read_bytes(requested), self.table.uri)
            found[plan.target] = (rb, plan)
        return found

    def completed(self, timeline: Timeline) -> dict[str, Instant]:
        found = {}
        for rb in timeline.filter({State.COMPLETED}, [ROLLBACK]):
            found[RollbackMetadata.from_bytes(timeline.read_bytes(rb)).target] = rb
        return found

    def _target(self, instant_time: str, timeline: Timeline) -> Instant:
        """The write (or pending compaction) ``instant_time`` names."""
        found = timeline.find(instant_time)
        targets = [i for i in found if i.action in WRITE_ACTIONS] or [
            i for i in found if i.action == COMPACTION and not i.is_completed
        ]
        if not targets:
            raise InstantNotFound(
                instant_time, f"{instant_time} is not a commit, deltacommit, replacecommit or pending compaction"
            )
        return targets[0]

    def plan(
        self, instant_time: str, force: bool = False, timeline: Timeline | None = None, restoring: bool = False
    ) -> RollbackPlan:
        """What rolling back ``instant_time`` would delete; raises ``RollbackRefused`` if it may not be rolled back.

        ``force`` allows a completed instant that is not the newest; nothing allows one
        whose rollback would lose rows that are not its own (``rollback_guard``), but a
        restore (``restoring``) checks the state it returns to as a whole instead.
        """
        validate_instant_time(instant_time)
        timeline = timeline or self.table.timeline
        target = self._target(instant_time, timeline)
        view = self.table.file_system_view(timeline)
        files = self._files_of(instant_time, timeline, view)
        if target.is_completed:
            # what nothing allows is said first: an operator told "needs force" would only be refused again
            if not restoring:
                refuse_loss(self.table.io, view, instant_time, set(files))
            newest = timeline.latest_completed_write()
            if newest is not None and newest.timestamp != instant_time and not force:
                raise NeedsForce(
                    f"{instant_time} is completed and not the newest completed instant ({newest.timestamp}); "
                    "rolling it back needs force"
                )
        return RollbackPlan(instant_time, target.action, tuple(files))

    def _files_of(self, instant_time: str, timeline: Timeline, view=None) -> list[str]:
        """Every file an instant wrote: data files by name, by its write statuses and by marker, and its index runs."""
        io = self.table.io
        view = view or self.table.file_system_view(timeline)
        named = view.uncommitted_files(instant_time) + [
            p for p in view.log_files_before(instant_time) if self._created_by(p, instant_time)
        ]
        if timeline.is_completed_write(instant_time):
            # a compaction's carried-over logs hold other instants' blocks: its write statuses name them
            stats = timeline.commit_metadata(timeline.find(instant_time)[0]).write_stats()
            named += [s.path for s in stats if s.path and io.is_file(s.path)]
        marked = [p for p in WriteMarkers(io, instant_time).data_paths() if io.is_file(p)]
        return sorted(set(named) | set(marked) | set(self.coordinator.side_files(instant_time)))

    def _created_by(self, log_path: str, instant_time: str) -> bool:
        """Whether a log file holds blocks of ``instant_time`` from its start: the instant created it, and
        deleting it removes nothing else. (Blocks another writer appended to an older log file are left:
        with the instant gone from the timeline, readers skip them.)"""
        return written_by(self.table.io, log_path, instant_time)

    def rollback(
        self,
        instant_time: str,
        force: bool = False,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
        restoring: bool = False,
    ) -> RollbackResult:
        """Roll back one instant: delete its files, record a rollback instant, drop its timeline files.

        Every step can be repeated: a rollback interrupted at any point is
        finished by calling ``rollback`` (or ``recover``) again.
        """
        coordinator = self.coordinator
        if not dry_run:
            coordinator.hold()
        timeline = self.table.timeline
        if not dry_run and coordinator.settle(instant_time, timeline):
            timeline = self.table.timeline
        pending = self.pending(timeline)
        if instant_time in pending:
            rb, plan = pending[instant_time]
            return self._execute(rb.timestamp, plan, timeline, progress)
        done = self.completed(timeline).get(instant_time)
        if done is not None:
            # Rolled back already; at most the target's timeline files are left to remove.
            meta = RollbackMetadata.from_bytes(timeline.read_bytes(done), self.table.uri)
            if not dry_run:
                self.steps.remove_all_states(instant_time, meta.target_action)
            return RollbackResult(instant_time, meta.target_action, done.timestamp, meta.deleted, dry_run=dry_run)
        if dry_run:
            return self._dry_run(instant_time, force, timeline, restoring)
        plan = self.plan(instant_time, force, timeline, restoring)
        rollback_time = self.steps.new_time(timeline)
        self.steps.request(rollback_time, plan.to_bytes(self.table.uri))
        return self._execute(rollback_time, plan, timeline, progress)

    def _dry_run(self, instant_time: str, force: bool, timeline: Timeline, restoring: bool) -> RollbackResult:
        """What the rollback would do; without force, of an instant only force may roll back (one a micro-batch has
        since committed after), what the forced one would do, saying so: the operator decides with it in view."""
        needs_force = None
        try:
            plan = self.plan(instant_time, force, timeline, restoring)
        except NeedsForce as refused:
            needs_force = str(refused)
            plan = self.plan(instant_time, True, timeline, restoring)
        was_completed = timeline.is_completed_write(instant_time)
        return RollbackResult(
            instant_time,
            plan.target_action,
            None,
            list(plan.files),
            was_completed,
            True,
            _rows(timeline, instant_time),
            needs_force,
        )

    def _execute(
        self,
        rollback_time: str,
        plan: RollbackPlan,
        timeline: Timeline,
        progress: Callable[[int, int], None] | None = None,
    ) -> RollbackResult:
        started = time.monotonic()
        coordinator, steps = self.coordinator, self.steps
        coordinator.lease.check()
        steps.start(rollback_time)
        was_completed = timeline.is_completed_write(plan.target)
        rows = _rows(timeline, plan.target)
        if plan.target_action == COMMIT:
            # A completed compaction's plan goes first, while its commit still hides it: once the commit is
            # gone, a plan left behind would read as a pending compaction, and run again (Hudi's rollback
            # deletes the requested and inflight files of what it rolls back too).
            steps.remove(
                Instant(plan.target, COMPACTION, State.INFLIGHT), Instant(plan.target, COMPACTION, State.REQUESTED)
            )
        # Un-completing the instant first hides its files from readers before any is deleted.
        steps.remove(Instant(plan.target, plan.target_action, State.COMPLETED))
        files = sorted(set(plan.files) | set(self._files_of(plan.target, timeline)))
        for done, path in enumerate(files, 1):
            self.table.io.delete(path)
            if progress is not None:
                progress(done, len(files))
        elapsed = int((time.monotonic() - started) * 1000)
        metadata = RollbackMetadata(rollback_time, plan.target, plan.target_action, files, elapsed)
        coordinator.lease.check()
        steps.complete(rollback_time, metadata.to_bytes(self.table.uri))
        steps.remove_all_states(plan.target, plan.target_action)
        # The markers stay: a task of the target's writer, paused between a marker and its data file, may
        # write that file after this rollback, and the sweep finds it only by its marker.
        coordinator.fence.forget(plan.target)
        log.info("rolled back %s with %s (%d files deleted)", plan.target, rollback_time, len(files))
        coordinator.metrics.rollbacks.inc()
        return RollbackResult(plan.target, plan.target_action, rollback_time, files, was_completed, rows=rows)


def _rows(timeline: Timeline, instant_time: str) -> RowChanges | None:
    """The rows a completed write changed: what rolling it back takes back."""
    if not timeline.is_completed_write(instant_time):
        return None
    totals = timeline.commit_metadata(timeline.find(instant_time)[0]).totals()
    return RowChanges(inserts=totals["inserts"], updates=totals["updates"], deletes=totals["deletes"])
