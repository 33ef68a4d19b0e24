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
from typing import TYPE_CHECKING, TypeVar

from laketide.table.format.clean import cleaned_files
from laketide.table.format.files import BaseFile, LogFile, parse_data_file
from laketide.table.format.instant import CLEAN, ROLLBACK, SAVEPOINT, WRITE_ACTIONS, Instant, State
from laketide.table.format.rollback import RollbackMetadata
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileGroup, FileSlice, FileSystemView, GroupKey, group_files, list_data_files

F = TypeVar("F", BaseFile, LogFile)

if TYPE_CHECKING:
    from laketide.table.table import Table

log = logging.getLogger(__name__)
DataFile = BaseFile | LogFile
# actions that change no data file
_NO_FILES = frozenset({SAVEPOINT})


class ViewSync:
    """The writer's file-system view, refreshed from new instants; thread-safe.

    Each view is made from the last one: the file groups the new instants touched are rebuilt, every other
    group is the same object, and so is its latest slice when the timeline only gained instants applied
    here (see ``FileSystemView``). The cost of a view then follows the files a micro-batch wrote."""

    def __init__(self, table: Table):
        self.table = table
        # guards everything below: the views are made by whichever thread asks first
        self._lock = threading.Lock()
        self._files: dict[str, DataFile] = {}
        self._groups: dict[GroupKey, FileGroup] = {}
        self._applied: set[tuple[str, str]] = set()
        # since the last view: the groups whose files changed, and the write instants applied
        self._changed: set[GroupKey] = set()
        self._newly_applied: set[str] = set()
        # groups with files of instants that were pending at the listing: when one completes, those files
        # count even where its write stats do not name them, so their groups are rebuilt
        self._pending: dict[str, set[GroupKey]] = {}
        self._last: FileSystemView | None = None
        self.listings = 0

    def view(self, timeline: Timeline | None = None) -> FileSystemView:
        """The view as of ``timeline`` (default: the timeline on storage now)."""
        timeline = timeline or self.table.timeline
        with self._lock:
            self._refresh(timeline)
            view = FileSystemView(timeline, groups=dict(self._groups), carried=self._carry(timeline))
            self._last, self._changed, self._newly_applied = view, set(), set()
            return view

    def files(self, timeline: Timeline | None = None) -> tuple[list[BaseFile], list[LogFile]]:
        """The base and log files of the completed instants of ``timeline`` (default: the timeline on storage
        now): what the Delta mirror takes instead of listing the table."""
        timeline = timeline or self.table.timeline
        with self._lock:
            self._refresh(timeline)
            bases = [f for f in self._files.values() if isinstance(f, BaseFile)]
            return bases, [f for f in self._files.values() if isinstance(f, LogFile)]

    def _refresh(self, timeline: Timeline) -> None:
        if self.listings == 0:
            self._list(timeline)
        else:
            self._apply_new(timeline)

    def _carry(self, timeline: Timeline) -> dict[GroupKey, FileSlice | None]:
        """The last view's latest slices that hold under ``timeline``: none unless the timeline starts where the
        last one did and every write it newly shows was applied here (an older timeline, a listing, or an
        archival that moved the start make every slice be worked out again)."""
        last = self._last
        if last is None or last.timeline.start != timeline.start:
            return {}
        before = {i.timestamp for i in last.timeline.completed_writes()}
        now = {i.timestamp for i in timeline.completed_writes()}
        if not before <= now or not now - before <= self._newly_applied:
            return {}
        return last.slices_known_now(keep=lambda key: key not in self._changed and key in self._groups)

    def _list(self, timeline: Timeline) -> None:
        bases, logs = list_data_files(self.table.io)
        self._files = {f.path: f for f in [*bases, *logs]}
        self._groups = group_files(bases, logs)
        completed = {i.timestamp for i in timeline.completed_writes()}
        start = timeline.start
        self._pending = {}
        for f in self._files.values():
            instant = _visible_by(f)
            if instant not in completed and not (start is not None and instant < start):
                self._pending.setdefault(instant, set()).add((f.partition, f.file_id))
        self._applied = {(i.timestamp, i.action) for i in timeline.filter({State.COMPLETED})}
        self._last = None
        self.listings += 1

    def _put(self, f: DataFile) -> None:
        old = self._files.get(f.path)
        self._files[f.path] = f
        key = (f.partition, f.file_id)
        group = self._groups.get(key) or FileGroup(*key)
        # a new FileGroup, never a changed one: the views made before hold the old one
        if isinstance(f, BaseFile):
            bases, logs = _placed(list(group.base_files), old, f), list(group.log_files)
        else:
            bases, logs = list(group.base_files), _placed(list(group.log_files), old, f)
        self._groups[key] = FileGroup(*key, bases, logs)
        self._changed.add(key)

    def _drop(self, path: str) -> None:
        f = self._files.pop(path, None)
        if f is None:
            return
        key = (f.partition, f.file_id)
        group = self._groups[key]
        bases = [b for b in group.base_files if b.path != path]
        logs = [lf for lf in group.log_files if lf.path != path]
        if bases or logs:
            self._groups[key] = FileGroup(*key, bases, logs)
        else:
            del self._groups[key]
        self._changed.add(key)

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
                log.info(
                    "%s %s cannot be applied to the view; listing the table again", instant.action, instant.timestamp
                )
                self._list(timeline)
                return
            self._applied.add((instant.timestamp, instant.action))

    def _apply(self, instant: Instant, timeline: Timeline) -> bool:
        if instant.action in WRITE_ACTIONS:
            for stat in timeline.commit_metadata(instant).write_stats():
                if (
                    stat.path
                    and (f := parse_data_file(*posixpath.split(stat.path), stat.file_size_in_bytes)) is not None
                ):
                    self._put(f)
            self._changed |= self._pending.pop(instant.timestamp, set())
            self._newly_applied.add(instant.timestamp)
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
            self._drop(path)


def _visible_by(f: DataFile) -> str:
    """The instant whose completion makes ``f`` count: a base file's own, a log file's slice's."""
    return f.instant_time if isinstance(f, BaseFile) else f.base_instant


def _placed(files: list[F], old: object, new: F) -> list[F]:
    """``files`` with ``new`` in the place of ``old`` (the same file listed again, its size known now), or added."""
    for at, file in enumerate(files):
        if old is not None and file == old:
            files[at] = new
            return files
    files.append(new)
    return files
