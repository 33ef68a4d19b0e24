"""The clean action under the lease: plan, record the plan, delete, record what was deleted.

Every step can be repeated: a clean interrupted anywhere is finished by the
next ``clean()``, which executes the pending plan before planning anew.
Deleting a file that is already gone counts as done.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from laketide.coordinator.actions import TimelineAction
from laketide.coordinator.lifecycle import Coordinator
from laketide.table.format.clean import CleanerPlan, CleanMetadata, Retention, plan_clean
from laketide.table.format.instant import CLEAN, State
from laketide.table.format.savepoint import savepointed_files
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSystemView

log = logging.getLogger(__name__)


@dataclass
class CleanResult:
    clean_instant: str | None
    earliest_to_retain: str | None
    files: list[str] = field(default_factory=list)
    dry_run: bool = False


class Cleaner:
    def __init__(
        self,
        coordinator: Coordinator,
        retention: Retention,
        obsolete_side_files: Callable[[], list[str]] | None = None,
        view: Callable[[Timeline], FileSystemView] | None = None,
    ):
        """``obsolete_side_files`` lists laketide's own files a clean may delete too (index runs a compaction replaced);
        ``view`` gives the file-system view of a timeline (the job passes its synced view, so a clean lists no
        files)."""
        self.coordinator = coordinator
        self.table = coordinator.table
        self.retention = retention
        self._obsolete_side_files = obsolete_side_files or (list)
        self._view = view or self.table.file_system_view
        self.steps = TimelineAction(coordinator, CLEAN)

    def plan(self) -> CleanerPlan:
        return self._plan(self.table.timeline)

    def _plan(self, timeline: Timeline) -> CleanerPlan:
        return plan_clean(self._view(timeline), self.retention, kept=savepointed_files(timeline))

    def clean(self, dry_run: bool = False, progress: Callable[[int, int], None] | None = None) -> CleanResult:
        """Finish a pending clean, then clean what the retention allows; no instant when there is nothing to do."""
        if dry_run:
            plan = self.plan()
            return CleanResult(None, plan.earliest_to_retain, list(plan.files), dry_run=True)
        coordinator = self.coordinator
        coordinator.hold()
        timeline = self.table.timeline
        for pending in timeline.pending([CLEAN]):
            plan = CleanerPlan.from_bytes(
                timeline.read_bytes(pending.with_state(State.REQUESTED)), self.table.io.full_path("")
            )
            self._execute(pending.timestamp, plan, progress)
        timeline = self.table.timeline
        plan = self._plan(timeline)
        side = [p for p in self._obsolete_side_files() if self.table.io.delete(p)]
        if plan.is_empty():
            return CleanResult(None, plan.earliest_to_retain, side)
        clean_time = self.steps.new_time(timeline)
        self.steps.request(clean_time, plan.to_bytes(self.table.io.full_path("")))
        deleted = self._execute(clean_time, plan, progress)
        return CleanResult(clean_time, plan.earliest_to_retain, deleted + side)

    def _execute(self, clean_time: str, plan: CleanerPlan, progress: Callable[[int, int], None] | None) -> list[str]:
        coordinator, io = self.coordinator, self.table.io
        started = time.monotonic()
        coordinator.hold()
        self.steps.start(clean_time, plan.to_bytes(io.full_path("")))
        for done, path in enumerate(plan.files, 1):
            io.delete(path)
            if progress is not None:
                progress(done, len(plan.files))
        metadata = CleanMetadata(clean_time, plan, list(plan.files), [], int((time.monotonic() - started) * 1000))
        self.steps.complete(clean_time, metadata.to_bytes())
        log.info(
            "cleaned with %s: %d files deleted, reads from %s on kept",
            clean_time,
            len(plan.files),
            plan.earliest_to_retain,
        )
        return list(plan.files)
