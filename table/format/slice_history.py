"""What each file group's latest file slice is made of, by the commit metadata alone.

A listing of storage cannot tell a file that was never written from one a
clean deleted. The write statuses of the completed writes can: replayed in
instant order, they give, for every file group, the base file and the log
files its latest slice was written with. A state of the table is whole when
every one of those files exists; savepoints, restores and rollbacks check
that before they return the table to a state.

Only the active timeline is replayed. A file group whose latest write was
archived is not in the history; callers that know its files otherwise (a
savepoint's list, the listing) add them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from laketide.table.format.commit import CommitMetadata
from laketide.table.format.files import BaseFile, LogFile, parse_data_file
from laketide.table.format.instant import Instant
from laketide.table.format.timeline import Timeline

GroupKey = tuple[str, str]  # (partition, file id)


@dataclass
class RecordedSlice:
    base_instant: str
    files: set[str] = field(default_factory=set)


class SliceHistory:
    """The latest slice of every file group after the writes applied so far."""

    def __init__(self, logs_name_slices: bool = True) -> None:
        """``logs_name_slices``: version 6, where a log file is named by its slice's base instant; version 8 names
        it by the deltacommit that wrote it, and it is on the group's latest slice."""
        self.slices: dict[GroupKey, RecordedSlice] = {}
        self.logs_name_slices = logs_name_slices

    def apply(self, metadata: CommitMetadata) -> None:
        for key in metadata.replaced_file_ids():
            self.slices.pop(key, None)
        written = [
            ((partition, stat.file_id), parse_data_file(posixpath.dirname(stat.path), posixpath.basename(stat.path)))
            for partition, stats in metadata.partition_to_write_stats.items()
            for stat in stats
            if stat.path
        ]
        # base files first: the logs a compaction carries over belong to the slice its base file starts
        for key, data_file in sorted(written, key=lambda kf: not isinstance(kf[1], BaseFile)):
            if isinstance(data_file, BaseFile):
                self.slices[key] = RecordedSlice(data_file.instant_time, {data_file.path})
            elif isinstance(data_file, LogFile):
                self._add_log(key, data_file)

    def _add_log(self, key: GroupKey, log: LogFile) -> None:
        current = self.slices.get(key)
        if current is not None and not self.logs_name_slices:
            current.files.add(log.path)
        elif current is None or log.base_instant > current.base_instant:
            self.slices[key] = RecordedSlice(log.base_instant, {log.path})
        elif log.base_instant == current.base_instant:
            current.files.add(log.path)
        # a log on an older slice than the latest was carried over to the latest by its compaction

    def files(self, groups: Iterable[GroupKey] | None = None) -> set[str]:
        keys = self.slices.keys() if groups is None else [k for k in groups if k in self.slices]
        return {path for key in keys for path in self.slices[key].files}


def replay(timeline: Timeline, until: str | None = None, inclusive: bool = True) -> SliceHistory:
    """The history after every completed write up to ``until`` (``inclusive``: at it too; ``None``: all)."""
    history = SliceHistory()
    for step in replay_steps(timeline, until, inclusive):
        history = step[1]
    return history


def replay_steps(
    timeline: Timeline, until: str | None = None, inclusive: bool = True
) -> Iterator[tuple[Instant, SliceHistory]]:
    """The history after each completed write, in instant order (one object, updated in place)."""
    history = SliceHistory(logs_name_slices=timeline.config.version < 8)
    for write in timeline.completed_writes():
        if until is not None and (write.timestamp > until or (not inclusive and write.timestamp == until)):
            break
        history.apply(timeline.commit_metadata(write))
        yield write, history
