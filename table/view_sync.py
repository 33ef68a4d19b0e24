"""A file-system view kept current from the timeline, not by listing the table.

A long-running writer lists its table's files once, at start. After that it
applies what each newly completed instant says it did: a write adds the files
in its write stats, a clean or a rollback removes the files its metadata
names. This is Hudi's incremental timeline sync
(``IncrementalTimelineSyncFileSystemView``); it makes the per-batch cost of
the view follow the instants since the last batch instead of the number of
files. The timeline directory is still read on every refresh: archival keeps
it bounded, and it is how commits of other writers become visible.

An instant it cannot apply (a restore, or an action it does not know) makes it
list the table again.
"""

from __future__ import annotations

import logging
import posixpath
import threading

from laketide.table.clean import cleaned_files
from laketide.table.files import BaseFile, LogFile, parse_data_file
from laketide.table.instant import CLEAN, ROLLBACK, SAVEPOINT, WRITE_ACTIONS, Instant, State
from laketide.table.rollback import RollbackMetadata
from laketide.table.table import Table
from laketide.table.timeline import Timeline
from laketide.table.view import FileSystemView, list_data_files

log = logging.getLogger(__name__)
DataFile = BaseFile | LogFile
# actions that change no data file
_NO_FILES = frozenset({SAVEPOINT})


class ViewSync:
    """The writer's file-system view, refreshed from new instants; thread-safe."""

    def __init__(self, table: Table):
        self.table = table
        self._lock = threading.Lock()
        self._files: dict[str, DataFile] = {}
        self._applied: set[tuple[str, str]] = set()
        self.listings = 0

    def view(self, timeline: Timeline | None = None) -> FileSystemView:
        """The view as of ``timeline`` (default: the timeline on storage now)."""
        timeline = timeline or self.table.timeline
        return FileSystemView(timeline, *self.files(timeline))

    def files(self, timeline: Timeline | None = None) -> tuple[list[BaseFile], list[LogFile]]:
        """The base and log files of the completed instants of ``timeline`` (default: the timeline on storage now)."""
        timeline = timeline or self.table.timeline
        with self._lock:
            if self.listings == 0:
                self._list(timeline)
            else:
                self._apply_new(timeline)
            return self._split()

    def _list(self, timeline: Timeline) -> None:
        bases, logs = list_data_files(self.table.io)
        self._files = {f.path: f for f in [*bases, *logs]}
        self._applied = {(i.timestamp, i.action) for i in timeline.filter({State.COMPLETED})}
        self.listings += 1

    def _split(self) -> tuple[list[BaseFile], list[LogFile]]:
        bases = [f for f in self._files.values() if isinstance(f, BaseFile)]
        return bases, [f for f in self._files.values() if isinstance(f, LogFile)]

    def _apply_new(self, timeline: Timeline) -> None:
        completed = timeline.filter({State.COMPLETED})
        # archived instants drop out, so what is remembered stays about as long as the active timeline;
        # by the timeline's start, not its contents, so that a thread holding an older timeline
        # cannot make a write be applied again after a clean removed its files
        if (start := timeline.start) is not None:
            on_timeline = {(i.timestamp, i.action) for i in completed}
            self._applied = {key for key in self._applied if key[0] >= start or key in on_timeline}
        for instant in completed:
            if (instant.timestamp, instant.action) in self._applied:
                continue
            if not self._apply(instant, timeline):
                log.info("%s %s cannot be applied to the view; listing the table again", instant.action, instant.timestamp)
                self._list(timeline)
                return
            self._applied.add((instant.timestamp, instant.action))

    def _apply(self, instant: Instant, timeline: Timeline) -> bool:
        if instant.action in WRITE_ACTIONS:
            for stat in timeline.commit_metadata(instant).write_stats():
                if stat.path and (f := parse_data_file(*posixpath.split(stat.path), stat.file_size_in_bytes)) is not None:
                    self._files[f.path] = f
            return True
        if instant.action == CLEAN:
            self._remove(cleaned_files(timeline.read_bytes(instant), self.table.uri))
            return True
        if instant.action == ROLLBACK:
            self._remove(RollbackMetadata.from_bytes(timeline.read_bytes(instant), self.table.uri).deleted)
            return True
        return instant.action in _NO_FILES

    def _remove(self, paths: list[str]) -> None:
        for path in paths:
            self._files.pop(path, None)
