"""Archival under the lease: keep the active timeline between ``min_commits`` and ``max_commits``.

Which instants go follows Hudi's ``TimelineArchiverV1``: once more than
``max_commits`` completed writes are active, the oldest go until
``min_commits`` are left, never past the first savepoint, the oldest pending
write, or the earliest commit the latest clean retains. Completed cleans and
rollbacks go by the same counts, per action, so the latest clean stays.

Readers take a file whose instant is older than the active timeline as
committed. So archival also stops short of any instant whose files a failed
write may have left: data files or index runs of an instant that is neither
completed nor pending, and instants whose markers the sweep has not finished
with (a rolled-back instant stays known, through its rollback, until then).

The steps, each safe to repeat: write the entries as the next archive file
(atomically; entries the newest file already holds are not written again),
then delete the archived timeline files, requested and inflight before
completed, oldest first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from laketide.coordinator.actions import TimelineAction
from laketide.coordinator.lifecycle import Coordinator
from laketide.table.errors import Invalid
from laketide.table.format.archive import ArchivedTimeline, archived_entry
from laketide.table.format.clean import failed_writes, retained_by_last_clean
from laketide.table.format.instant import (
    CLEAN,
    COMMIT,
    COMPACTION,
    ROLLBACK,
    SAVEPOINT,
    WRITE_ACTIONS,
    Instant,
    State,
)
from laketide.table.format.lsm_history import HistoryEntry, LsmHistory
from laketide.table.format.markers import marked_instants
from laketide.table.format.rollback import RollbackMetadata
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSystemView

log = logging.getLogger(__name__)


@dataclass
class ArchiveResult:
    archived: list[Instant] = field(default_factory=list)  # the completed instants moved
    path: str | None = None


def commits_to_archive(
    timeline: Timeline, min_commits: int, max_commits: int, holds: Iterable[str] = (), limit: str | None = None
) -> list[Instant]:
    """Completed writes that may leave the active timeline, oldest first.

    Nothing at or after ``limit`` goes. For each instant time in ``holds`` (a
    pending write, a failed write's leftovers) the completed write before it
    stays too, as Hudi keeps the one before its oldest pending instant: the
    active timeline must start before the held instant for readers to know
    it did not complete.
    """
    writes = timeline.completed_writes()
    if len(writes) <= max_commits:
        return []
    savepoints = [i.timestamp for i in timeline.filter(actions=[SAVEPOINT])]
    stops = [t for t in (limit, savepoints[0] if savepoints else None) if t is not None]
    for held in [*holds, *(i.timestamp for i in timeline.pending(WRITE_ACTIONS))]:
        before = [w.timestamp for w in writes if w.timestamp < held]
        stops.append(before[-1] if before else held)
    stop = min(stops) if stops else None
    return [w for w in writes[: len(writes) - min_commits] if stop is None or w.timestamp < stop]


def services_to_archive(timeline: Timeline, min_commits: int, max_commits: int, kept: set[str]) -> list[Instant]:
    """Completed cleans and rollbacks beyond the counts, oldest first; ``kept`` are timestamps that must stay."""
    out: list[Instant] = []
    for action in (CLEAN, ROLLBACK):
        done = timeline.filter({State.COMPLETED}, [action])
        if len(done) > max_commits:
            out += [i for i in done[: len(done) - min_commits] if i.timestamp not in kept]
    return out


class Archiver:
    def __init__(
        self,
        coordinator: Coordinator,
        min_commits: int = 20,
        max_commits: int = 30,
        index_instants: Callable[[], set[str]] | None = None,
        view: Callable[[Timeline], FileSystemView] | None = None,
        batch_lock: AbstractContextManager | None = None,
    ):
        """``index_instants`` gives the instant times of the state index's delta runs (``StateIndex.instants``);
        ``view`` the file-system view of a timeline (the job passes its synced view). ``batch_lock``: the lock a
        micro-batch holds while it runs (the job's; none without one): the deletes take it, because a listing
        of the timeline made while they go on can show a commit gone and an older one still there. Such a
        timeline starts before the commit, so the commit reads as never completed and its files as none of
        the table's: a micro-batch planned from it found every key of the groups the commit (a compaction)
        rewrote gone, and inserted them again into new file groups."""
        if not 0 < min_commits < max_commits:
            raise Invalid(f"archive needs 0 < min_commits < max_commits; got {min_commits} and {max_commits}")
        self.coordinator = coordinator
        self.table = coordinator.table
        self.steps = TimelineAction(coordinator, "archive")  # archival only removes timeline files
        self.min_commits = min_commits
        self.max_commits = max_commits
        config = self.table.config
        self.archived = ArchivedTimeline(self.table.io, config.archive_dir)
        # version 8 archives into Hudi 1.x's LSM history instead of the archive log files
        self.history = LsmHistory(self.table.io, config.history_dir) if config.version >= 8 else None
        self._index_instants = index_instants or (lambda: set())
        self._view = view or self.table.file_system_view
        self._settled = False  # whether an archival interrupted earlier has been finished
        self.batch_lock = batch_lock or nullcontext()

    def _holds(self, timeline: Timeline) -> set[str]:
        """Instants whose failed writes may have left files or index runs: the active timeline must keep them."""
        known = {i.timestamp for i in timeline.completed_writes()} | {i.timestamp for i in timeline.pending()}
        start = timeline.start
        held = {t for t, _ in failed_writes(self._view(timeline))}
        held |= {t for t in marked_instants(self.table.io) if t not in known}
        held |= {t for t in self._index_instants() if t not in known and start is not None and t >= start}
        return held

    def plan(self, timeline: Timeline | None = None) -> list[Instant]:
        """The completed instants the next archival moves, oldest first."""
        timeline = timeline or self.table.timeline
        writes = timeline.completed_writes()
        if len(writes) <= self.max_commits and all(
            len(timeline.filter({State.COMPLETED}, [a])) <= self.max_commits for a in (CLEAN, ROLLBACK)
        ):
            return []
        commits = commits_to_archive(
            timeline, self.min_commits, self.max_commits, self._holds(timeline), retained_by_last_clean(timeline)
        )
        marked = set(marked_instants(self.table.io))
        # a rollback is how the sweep knows its target failed; it stays while the target's markers do
        kept = {
            rb.timestamp
            for rb in timeline.filter({State.COMPLETED}, [ROLLBACK])
            if self._target_of(timeline, rb) in marked
        }
        return sorted(
            commits + services_to_archive(timeline, self.min_commits, self.max_commits, kept), key=lambda i: i.timestamp
        )

    def _target_of(self, timeline: Timeline, rollback: Instant) -> str:
        return RollbackMetadata.from_bytes(timeline.read_bytes(rollback)).target

    def archive(self) -> ArchiveResult:
        coordinator = self.coordinator
        coordinator.hold()
        if not self._settled:
            self._finish_interrupted()
            self._settled = True
        timeline = self.table.timeline
        chosen = self.plan(timeline)
        if not chosen:
            return ArchiveResult()
        files = self._timeline_files(timeline, chosen)
        # until the deletes are done, a failure leaves work for the next round to finish
        self._settled = False
        if self.history is not None:
            path = self.history.append(self._history_entries(timeline, chosen))
        else:
            path = self.archived.append(archived_entry(i, timeline.read_bytes(i)) for i in files)
        coordinator.hold()
        self._delete(files)
        self._settled = True
        log.info(
            "archived %d instants (%s to %s) into %s", len(chosen), chosen[0].timestamp, chosen[-1].timestamp, path
        )
        return ArchiveResult(chosen, path)

    def _finish_interrupted(self) -> None:
        """Delete the timeline files an archival wrote to the archive but had not deleted yet."""
        timeline = self.table.timeline
        if self.history is not None:  # its entries are completed actions: their other states' files go too
            done = sorted(self.history.last_file_instants(), key=lambda i: i.timestamp)
            archived = self._timeline_files(timeline, done)
        else:
            archived = list(self.archived.last_block_instants())
        left = [i for i in archived if self.table.io.is_file(timeline.instant_path(i))]
        if left:
            log.info("finishing an interrupted archival: %d timeline files left", len(left))
            self._delete(sorted(left, key=lambda i: (i.timestamp, i.state.rank)))

    def _delete(self, files: list[Instant]) -> None:
        """Requested and inflight files first, then completed ones oldest first, between micro-batches: a listing
        that reads the files in order meanwhile shows no gap and no false pending write, but a listing does not
        always read them in order (a directory's entries come in its own order, each looked up as it comes)."""
        with self.batch_lock:
            self.steps.remove(*[i for i in files if not i.is_completed], *[i for i in files if i.is_completed])

    def _history_entries(self, timeline: Timeline, chosen: list[Instant]) -> list[HistoryEntry]:
        """Version 8: each chosen action as the LSM history holds it: its completed file, and its plan."""
        return [
            HistoryEntry(
                instant.timestamp,
                instant.completion_time or instant.timestamp,
                instant.action,
                timeline.read_bytes(instant) or None,
                self._plan_of(timeline, instant),
            )
            for instant in chosen
        ]

    def _plan_of(self, timeline: Timeline, instant: Instant) -> bytes | None:
        """The requested file's bytes, if any: for a commit that completed a compaction, the compaction's plan."""
        io = self.table.io
        requested = Instant(instant.timestamp, instant.action, State.REQUESTED)
        compaction = Instant(instant.timestamp, COMPACTION, State.REQUESTED)
        for planned in (compaction, requested) if instant.action == COMMIT else (requested,):
            path = timeline.instant_path(planned)
            if io.is_file(path):
                return io.read_bytes(path) or None
        return None

    def _timeline_files(self, timeline: Timeline, chosen: list[Instant]) -> list[Instant]:
        """Every timeline file (requested, inflight, completed) of the chosen instants that is on storage."""
        out = []
        for instant in chosen:
            for state in (State.REQUESTED, State.INFLIGHT, State.COMPLETED):
                # the completed file is the chosen instant itself (under layout 2 its name holds its completion time)
                candidate = instant if state is State.COMPLETED else Instant(instant.timestamp, instant.action, state)
                if state is State.COMPLETED or self.table.io.is_file(timeline.instant_path(candidate)):
                    out.append(candidate)
            if instant.action == COMMIT:
                # a compaction completed as this commit: its plan files go with it, or they would read as a pending
                # compaction
                for state in (State.REQUESTED, State.INFLIGHT):
                    planned = Instant(instant.timestamp, COMPACTION, state)
                    if self.table.io.is_file(timeline.instant_path(planned)):
                        out.append(planned)
        return out
