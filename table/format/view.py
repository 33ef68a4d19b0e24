"""The file-system view: file groups, and the latest committed file slice of each.

A file counts only when its instant is a completed write (or is older than
the whole timeline, which means it was archived). File groups replaced by a
completed replacecommit drop out. These are the rules Hudi's readers apply,
so a table looks the same through this view as through theirs.
"""

from __future__ import annotations

import posixpath
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field

from laketide.table.format.files import PARTITION_METADATA, RESERVED_TOP_DIRS, BaseFile, LogFile, parse_data_file
from laketide.table.format.instant import Instant
from laketide.table.format.timeline import Timeline
from laketide.table.storage.io import FileIO


@dataclass
class FileSlice:
    partition: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None = None
    log_files: list[LogFile] = field(default_factory=list)
    # bytes of the slice's files, summed once: a slice is not changed once built, and a page of the layout
    # sorts 10,000 slices by it
    size: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.size = sum(f.size for f in self.files)

    @property
    def files(self) -> list[BaseFile | LogFile]:
        """The slice's base file, if any, then its log files in order."""
        return ([self.base_file] if self.base_file else []) + self.log_files


@dataclass
class FileGroup:
    partition: str
    file_id: str
    base_files: list[BaseFile] = field(default_factory=list)
    log_files: list[LogFile] = field(default_factory=list)


def list_data_files(io: FileIO) -> tuple[list[BaseFile], list[LogFile]]:
    """Every base and log file in the table's partitions, committed or not."""
    bases, logs = [], []
    for top in io.list_dir(""):
        if top.name in RESERVED_TOP_DIRS:
            continue
        entries = io.walk(top.path) if top.is_dir else [top]
        for entry in entries:
            if entry.is_dir or entry.name.startswith(PARTITION_METADATA):
                continue
            found = parse_data_file(posixpath.dirname(entry.path), entry.name, entry.size)
            if isinstance(found, BaseFile):
                bases.append(found)
            elif found is not None:
                logs.append(found)
    return bases, logs


@dataclass(frozen=True)
class Visibility:
    """Whether an instant's writes count in a read as of ``as_of``: a plain value, so that a
    read planned on the driver carries it to the tasks that read the slices."""

    visible: frozenset[str]
    earliest: str | None  # the active timeline's start: older instants were archived, so committed
    as_of: str | None

    def __call__(self, instant_time: str) -> bool:
        return FileSystemView._committed(instant_time, self.visible, self.earliest, self.as_of)


GroupKey = tuple[str, str]  # (partition, file id)


def group_files(base_files: Iterable[BaseFile], log_files: Iterable[LogFile]) -> dict[GroupKey, FileGroup]:
    groups: dict[GroupKey, FileGroup] = {}
    for files, kind in ((base_files, "base_files"), (log_files, "log_files")):
        for f in files:
            key = (f.partition, f.file_id)
            if (group := groups.get(key)) is None:
                group = groups[key] = FileGroup(f.partition, f.file_id)
            getattr(group, kind).append(f)
    return groups


class FileSystemView:
    """The file groups of a table as of one timeline. A view never changes once built (a sync builds a new one).

    ``groups`` and ``carried`` come from ``ViewSync``, which builds each view from the last: the groups its new
    instants did not touch keep their ``FileGroup`` objects, and their latest slices as of now (``carried``)
    when the timeline only gained instants the sync applied. A micro-batch then recomputes the slices of the
    groups it wrote, not of the whole table."""

    def __init__(
        self,
        timeline: Timeline,
        base_files: Sequence[BaseFile] = (),
        log_files: Sequence[LogFile] = (),
        *,
        groups: dict[GroupKey, FileGroup] | None = None,
        carried: dict[GroupKey, FileSlice | None] | None = None,
    ):
        self.timeline = timeline
        self.groups = groups if groups is not None else group_files(base_files, log_files)
        # latest slices by (as_of, partition). Threads that share a view may race on these caches; the loser
        # computes the same value again.
        self._latest: dict[tuple[str | None, str | None], list[FileSlice]] = {}
        # each group's latest slice as of now, before replaced groups drop out (None: nothing committed yet)
        self._current: dict[GroupKey, FileSlice | None] | None = None
        self._carried = carried or {}
        # version 8: when each completed write completed, which places its log files in a slice
        self._completions = (
            {i.timestamp: i.completion_time for i in timeline.completed_writes() if i.completion_time}
            if timeline.config.version >= 8
            else {}
        )

    @classmethod
    def load(cls, io: FileIO, timeline: Timeline) -> FileSystemView:
        return cls(timeline, *list_data_files(io))

    def partitions(self) -> list[str]:
        return sorted({p for p, _ in self.groups})

    def _visible_instants(self, as_of: str | None) -> tuple[set[str], str | None]:
        writes = self.timeline.completed_writes()
        if as_of is not None:
            writes = [i for i in writes if i.timestamp <= as_of]
        return {i.timestamp for i in writes}, self.timeline.start

    def visibility(self, as_of: str | None = None) -> Visibility:
        """Whether an instant's writes count in a read as of ``as_of``."""
        visible, earliest = self._visible_instants(as_of)
        return Visibility(frozenset(visible), earliest, as_of)

    def is_committed(self, instant_time: str, as_of: str | None = None) -> bool:
        visible, earliest = self._visible_instants(as_of)
        return self._committed(instant_time, visible, earliest, as_of)

    @staticmethod
    def _committed(instant_time: str, visible: Set[str], earliest: str | None, as_of: str | None) -> bool:
        if instant_time in visible:
            return True
        archived = earliest is not None and instant_time < earliest
        return archived and (as_of is None or instant_time <= as_of)

    def replaced_groups(self, as_of: str | None = None) -> set[tuple[str, str]]:
        writes = self.timeline.completed_writes()
        return self._replaced_by([i for i in writes if as_of is None or i.timestamp <= as_of])

    def _replaced_by(self, writes: Iterable[Instant]) -> set[tuple[str, str]]:
        """The file groups the replacecommits among ``writes`` replaced."""
        replaced: set[tuple[str, str]] = set()
        for instant in writes:
            if instant.action == "replacecommit":
                replaced |= self.timeline.commit_metadata(instant).replaced_file_ids()
        return replaced

    def latest_slices(self, as_of: str | None = None, partition: str | None = None) -> list[FileSlice]:
        """The newest committed slice of every live file group, as of instant time ``as_of`` (default: now).

        Time travel goes by instant (request) time in every table version, as Hudi's readers do.
        """
        found = self._latest.get((as_of, partition))
        if found is None:
            found = self._latest[(as_of, partition)] = self._latest_slices(as_of, partition)
        return list(found)

    def _latest_slices(self, as_of: str | None, partition: str | None) -> list[FileSlice]:
        replaced = self.replaced_groups(as_of)
        if as_of is None:
            candidates = self.current_slices().items()
        else:
            visible, earliest = self._visible_instants(as_of)
            candidates = (
                (key, self._slice(group, visible, earliest, as_of, self._completions))
                for key, group in sorted(self.groups.items())
            )
        return [
            found
            for key, found in candidates
            if found is not None and key not in replaced and (partition is None or found.partition == partition)
        ]

    def latest_slices_completed_by(self, end: str) -> tuple[list[FileSlice], Visibility]:
        """Version 8's read up to ``end`` by completion time (an incremental read's end, as Hudi 1.x compares it):
        the latest slices once the writes that completed by ``end`` had, and what counts in them. A write that began
        before ``end`` and completed after it is not in it, as time travel by instant time would have it."""
        timeline = self.timeline
        writes = [i for i in timeline.completed_writes() if timeline.visible_time(i) <= end]
        visible, earliest, replaced = {i.timestamp for i in writes}, timeline.start, self._replaced_by(writes)
        found = [
            found
            for key, group in sorted(self.groups.items())
            if key not in replaced
            and (found := self._slice(group, visible, earliest, None, self._completions)) is not None
        ]
        return found, Visibility(frozenset(visible), earliest, None)

    def current_slices(self) -> dict[GroupKey, FileSlice | None]:
        """Each file group's latest slice as of now, replaced groups included, in group order: what the next
        view carries over for the groups its instants leave alone."""
        current = self._current
        if current is None:
            visible, earliest = self._visible_instants(None)
            carried = self._carried
            current = {
                key: carried[key] if key in carried else self._slice(group, visible, earliest, None, self._completions)
                for key, group in sorted(self.groups.items())
            }
            self._current, self._carried = current, {}
        return current

    def slices_known_now(self, keep: Callable[[GroupKey], bool]) -> dict[GroupKey, FileSlice | None]:
        """The groups' latest slices as of now that this view has worked out or carried, those ``keep`` takes."""
        known = self._current if self._current is not None else self._carried
        return {key: found for key, found in known.items() if keep(key)}

    @classmethod
    def _slice(
        cls,
        group: FileGroup,
        visible: set[str],
        earliest: str | None,
        as_of: str | None,
        completions: Mapping[str, str] | None = None,
    ) -> FileSlice | None:
        """The group's newest committed slice. A version 6 log file names its slice's base instant; a version 8 one
        names the deltacommit that wrote it, and belongs to the newest slice whose base instant is not after that
        deltacommit's completion (``completions``; Hudi 1.x's file-slice rule, as hudi-rs's ``FileGroup.add_log_file``
        applies it): a deltacommit that began before a compaction and completed after it is on the compacted slice."""
        base = None  # the newest committed base file (the last listed of equals, as a stable sort gives)
        for b in group.base_files:
            if (base is None or b.instant_time >= base.instant_time) and cls._committed(
                b.instant_time, visible, earliest, as_of
            ):
                base = b
        start = base.instant_time if base else ""
        completions = completions or {}
        logs = [
            lf
            for lf in group.log_files
            if completions.get(lf.base_instant, lf.base_instant) >= start
            and cls._committed(lf.base_instant, visible, earliest, as_of)
        ]
        if base is None and not logs:
            return None
        logs.sort(key=lambda lf: lf.order)
        return FileSlice(group.partition, group.file_id, start, base, logs)

    def log_slice(self, log: LogFile, base_instants: Sequence[str]) -> str | None:
        """The base instant of the slice ``log`` belongs to among a group's ``base_instants`` (ascending). A version
        6 log names it; a version 8 log is on the newest base instant not after its deltacommit's completion (its
        instant, once archived), as ``_slice`` places it, and ``None`` when it precedes them all."""
        if self.timeline.config.version < 8:
            return log.base_instant
        at = bisect_right(base_instants, self._completions.get(log.base_instant, log.base_instant))
        return base_instants[at - 1] if at else None

    def next_log_version(self, partition: str, file_id: str, base_instant: str) -> int:
        """The version a new log file on a slice takes: one past every log file there, committed or not."""
        group = self.groups.get((partition, file_id))
        versions = [lf.version for lf in group.log_files if lf.base_instant == base_instant] if group else []
        return max(versions, default=0) + 1

    def uncommitted_files(self, instant_time: str) -> list[str]:
        """Paths of the base files that carry ``instant_time`` in their name.

        A log file's name carries the base instant of its slice, not the
        instant that wrote it: see ``log_files_before``.
        """
        return sorted(
            b.path for group in self.groups.values() for b in group.base_files if b.instant_time == instant_time
        )

    def log_files_before(self, instant_time: str) -> list[str]:
        """Paths of the log files that ``instant_time`` may have written: those on slices not newer than it."""
        return sorted(
            lf.path for group in self.groups.values() for lf in group.log_files if lf.base_instant <= instant_time
        )
