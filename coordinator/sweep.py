"""Sweeping: what writes that never complete leave behind.

A stale writer (one that lost its lease while paused) may go on writing
after its instant was rolled back; its tasks mark each file first. The sweep
rolls back its pending instants of an older epoch (the fence keeps them from
completing), deletes the late files of rolled-back instants by their
markers, and removes the markers and outcomes of finished instants. A
completed instant's commit deletes its markers, so a marker of it found
later is a late task's (a zombie attempt): the file it names is deleted
unless the commit names it.

A rollback keeps its target's markers, since a task paused between a marker
and its data file writes the file later; each sweep deletes the files that
such markers name until ``MARKER_GRACE_SECONDS`` after the marker was
written, and then the marker. The cost follows what is left over, not the
table: one listing of ``.hoodie/.temp`` and of the outcomes, and one delete
per marker of an instant that did not complete, written in the last hour.

A compaction is the one write that a second writer completes at the same
instant time as the first (it runs the same plan). A stale first writer that
wakes after that completion may still finish a base file of that instant:
a second base file of one instant in one file group, which readers refuse.
Its marker may be gone already (the completion deleted the instant's
markers), so for ``LATE_FILE_SECONDS`` after a compaction completes, its
partitions are listed every ``LATE_CHECK_SECONDS`` and any base file of its
instant that its commit does not name is deleted.
"""

from __future__ import annotations

import logging
import posixpath
import time
from typing import TYPE_CHECKING

from laketide.table.format.commit import EPOCH_KEY, CommitMetadata
from laketide.table.format.files import BaseFile, LogFile, parse_data_file
from laketide.table.format.instant import COMMIT, ROLLBACK, WRITE_ACTIONS, Instant, State
from laketide.table.format.logfile import CorruptLog, first_block_instant
from laketide.table.format.markers import APPEND, WriteMarkers, marked_instants
from laketide.table.format.rollback import RollbackMetadata
from laketide.table.format.timeline import Timeline
from laketide.table.storage.io import FileIO

if TYPE_CHECKING:
    from laketide.coordinator.lifecycle import Coordinator

log = logging.getLogger(__name__)
# A marker whose data file is not there yet may belong to a stale task that is about to write it.
MARKER_GRACE_SECONDS = 3600
# how long after a compaction completed, and how often, its partitions are looked at for late base files
LATE_FILE_SECONDS = MARKER_GRACE_SECONDS
LATE_CHECK_SECONDS = 60


def written_by(io: FileIO, data_path: str, instant_time: str) -> bool:
    """Whether the file at ``data_path`` holds what ``instant_time`` wrote. A base file's name says so; a log
    file's name gives only its slice and version, which a later instant reuses once the rolled-back file
    is gone, so its first block says (Hudi's ``HoodieLogFile`` names carry no writing instant either)."""
    data_file = parse_data_file(*posixpath.split(data_path))
    if not isinstance(data_file, LogFile):
        return True
    try:
        with io.open_input(data_path) as f:
            return first_block_instant(f) == instant_time
    except FileNotFoundError:
        return False
    except CorruptLog:
        return False  # cut short before its first header: whose it is cannot be told, so it stays


class Sweeper:
    """The sweep of one coordinator; it keeps which instants completed rollbacks targeted, read once each."""

    def __init__(self, coordinator: Coordinator):
        self.coordinator = coordinator
        self._rolled_back: dict[str, str] = {}  # rollback instant -> its target
        self._compactions_checked: dict[str, float] = {}  # a recent compaction -> when its partitions were last listed

    def _epoch_of(self, instant: Instant, timeline: Timeline) -> int | None:
        try:
            extra = CommitMetadata.from_bytes(timeline.read_bytes(instant.with_state(State.INFLIGHT))).extra_metadata
        except (OSError, ValueError):
            return None
        return int(extra[EPOCH_KEY]) if EPOCH_KEY in extra else None

    def _rolled_back_targets(self, timeline: Timeline) -> set[str]:
        rollbacks = timeline.filter({State.COMPLETED}, [ROLLBACK])
        active = {rb.timestamp for rb in rollbacks}
        self._rolled_back = {ts: target for ts, target in self._rolled_back.items() if ts in active}
        for rb in rollbacks:
            if rb.timestamp not in self._rolled_back:  # completed rollbacks never change
                self._rolled_back[rb.timestamp] = RollbackMetadata.from_bytes(timeline.read_bytes(rb)).target
        return set(self._rolled_back.values())

    def sweep(self, now: float | None = None) -> list[str]:
        """Returns the data files deleted."""
        coordinator = self.coordinator
        io = coordinator.table.io
        now = time.time() if now is None else now
        timeline = coordinator.table.timeline
        epoch = coordinator.lease.epoch
        for instant in timeline.pending(WRITE_ACTIONS):
            older = self._epoch_of(instant, timeline)
            if not coordinator.is_own_pending(instant.timestamp) and older is not None and older < epoch:
                log.warning("rolling back %s, left pending by the writer of epoch %s", instant.timestamp, older)
                coordinator.rollback(instant.timestamp, force=True)
                timeline = coordinator.table.timeline
        pending = {i.timestamp for i in timeline.pending()}
        completed = {i.timestamp: i for i in timeline.filter({State.COMPLETED})}
        rolled_back = self._rolled_back_targets(timeline)
        earliest = timeline.start
        deleted = []
        for instant_time in marked_instants(io):
            if instant_time in pending:
                continue
            if instant_time in completed:
                # the commit deleted its markers: these are a late task's, whose file the commit does not name
                named = {s.path for s in timeline.commit_metadata(completed[instant_time]).write_stats() if s.path}
                deleted += self._files_of(WriteMarkers(io, instant_time), named, now)
            elif instant_time in rolled_back or (earliest is not None and instant_time >= earliest):
                deleted += self._files_of(WriteMarkers(io, instant_time), set(), now)
                deleted += [p for p in coordinator.side_files(instant_time) if io.delete(p)]
            else:
                WriteMarkers(io, instant_time).delete_all()  # archived long ago
        for instant_time in coordinator.fence.decided():
            if instant_time not in pending:
                coordinator.fence.forget(instant_time)
        deleted += self._late_base_files(timeline, now)
        if deleted:
            log.warning("swept %d files written late by stale writers: %s", len(deleted), deleted[:5])
        return deleted

    def _files_of(self, markers: WriteMarkers, named: set[str], now: float) -> list[str]:
        """Delete the files ``markers`` name that are not in ``named`` (what the instant's commit keeps), and the
        markers once past their grace; returns the files deleted."""
        io, deleted, waiting = self.coordinator.table.io, [], False
        for marker in markers.markers():
            if marker.data_path in named:
                continue
            if (
                marker.io_type != APPEND
                and written_by(io, marker.data_path, markers.instant_time)
                and io.delete(marker.data_path)
            ):
                deleted.append(marker.data_path)
            if now - marker.mtime_ns / 1e9 < MARKER_GRACE_SECONDS:
                waiting = True  # its writer may still be writing, or write the file again
            else:
                io.delete(marker.path)
        if not waiting:
            markers.delete_all()
        return deleted

    def _late_base_files(self, timeline: Timeline, now: float) -> list[str]:
        """Delete the base files of compactions completed in the last ``LATE_FILE_SECONDS`` that their commits
        do not name (see the module's text); each compaction's partitions listed once a ``LATE_CHECK_SECONDS``."""
        io = self.coordinator.table.io
        recent = {}
        for instant in timeline.filter({State.COMPLETED}, [COMMIT]):
            completed_ns = timeline.completed_at.get((instant.timestamp, instant.action))
            if completed_ns is not None and now - completed_ns / 1e9 < LATE_FILE_SECONDS:
                metadata = timeline.commit_metadata(instant)  # cached: completed instants never change
                if metadata.is_compaction:
                    recent[instant.timestamp] = metadata
        self._compactions_checked = {t: at for t, at in self._compactions_checked.items() if t in recent}
        deleted = []
        for instant_time, metadata in recent.items():
            if now - self._compactions_checked.get(instant_time, 0.0) < LATE_CHECK_SECONDS:
                continue
            self._compactions_checked[instant_time] = now
            named = {s.path for s in metadata.write_stats()}
            for partition in {s.partition_path or "" for s in metadata.write_stats()}:
                for entry in io.list_dir(partition):
                    found = None if entry.is_dir else parse_data_file(partition, entry.name)
                    if (
                        isinstance(found, BaseFile)
                        and found.instant_time == instant_time
                        and entry.path not in named
                        and io.delete(entry.path)
                    ):
                        deleted.append(entry.path)
        return deleted
