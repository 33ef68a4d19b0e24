"""The timeline: every instant of a table, read from and written to ``.hoodie/``.

A timeline object is a snapshot of the directory listing when it was loaded;
``Table.timeline`` loads a fresh one. Writing goes through ``TimelineWriter`` so
that every transition is one atomic file write.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Iterable
from functools import cached_property, wraps
from typing import ParamSpec, TypeVar

from laketide.table.errors import NotFound, UnsupportedTableError
from laketide.table.format.commit import CommitMetadata
from laketide.table.format.damage import reading_timeline_file
from laketide.table.format.instant import COMMIT, COMPACTION, WRITE_ACTIONS, Instant, InstantClock, State
from laketide.table.format.properties import TableConfig
from laketide.table.storage.io import FileIO, InstantFileExists

T = TypeVar("T")
P = ParamSpec("P")
log = logging.getLogger(__name__)
# the table versions laketide writes: 6 (Hudi 0.14 and 0.15) and 8 (Hudi 1.0)
WRITTEN_VERSIONS = (6, 8)
# each draw lists the timeline anew, which no longer shows what went; a draw takes milliseconds and archival and
# cleans run once a round after a commit, so a third miss in a row is not a race
DRAW_ATTEMPTS = 3


def drawn_again(draw: Callable[[], T], attempts: int = DRAW_ATTEMPTS) -> T:
    """``draw()``, again (up to ``attempts`` in all) when a file it read went meanwhile: archival moved a commit
    file into the archive, a clean or a rollback deleted files. Each attempt loads the timeline anew, which
    says where the file went."""
    for _ in range(attempts - 1):
        try:
            return draw()
        except FileNotFoundError as gone:
            log.info("a file went while it was read (archival, a clean or a rollback); reading again: %s", gone)
    return draw()


def redrawn(function: Callable[P, T]) -> Callable[P, T]:
    """``function`` drawn again (``drawn_again``) when a file it read went meanwhile: for what lists the timeline
    itself and reads what the listing shows, beside a thread that archives or cleans."""

    @wraps(function)
    def again(*args: P.args, **kwargs: P.kwargs) -> T:
        return drawn_again(lambda: function(*args, **kwargs))

    return again


def _forget_gone(details: dict[str, CommitMetadata], completed: set[str]) -> None:
    """Drop from a shared metadata cache what left the active timeline (archived, rolled back), the oldest first,
    keeping as many as the timeline holds: another thread may still hold a listing made before an archival
    (a micro-batch's plan beside the services thread's archival) and ask for a commit whose file is gone now.
    The cache stays within about twice the active timeline."""
    gone = sorted(t for t in list(details) if t not in completed)
    for timestamp in gone[: max(0, len(gone) - len(completed))]:
        details.pop(timestamp, None)


class InstantNotFound(NotFound, KeyError):
    """No such instant (or savepoint) on the timeline; ``instant`` names it."""

    def __init__(self, instant: str, detail: str | None = None):
        super().__init__(instant)
        self.instant = instant
        self.detail = detail or f"no instant {instant} on the timeline"

    def __str__(self) -> str:  # KeyError's would be the repr of the key
        return self.detail


class Timeline:
    def __init__(
        self,
        io: FileIO,
        config: TableConfig,
        instants: Iterable[Instant],
        details: dict[str, CommitMetadata] | None = None,
    ):
        """``details`` caches the metadata of completed writes; a long-lived table passes one cache to
        every timeline it loads, so each commit's metadata is read once, not once per load."""
        self.io = io
        self.config = config
        latest: dict[tuple[str, str], Instant] = {}
        for instant in instants:
            key = (instant.timestamp, instant.action)
            if key not in latest or instant.state.rank > latest[key].state.rank:
                latest[key] = instant
        # a compaction completes as a commit at its own instant time; its requested and inflight files stay
        compacted = {ts for (ts, action), i in latest.items() if action == COMMIT and i.is_completed}
        kept = [i for (ts, action), i in latest.items() if not (action == COMPACTION and ts in compacted)]
        self.instants: list[Instant] = sorted(kept, key=lambda i: (i.timestamp, i.action))
        # when each completed instant's file was written (ns), by (instant, action), as the listing of a loaded
        # timeline tells it: how long an instant took, with its instant time
        self.completed_at: dict[tuple[str, str], int] = {}
        self._details: dict[str, CommitMetadata] = {} if details is None else details
        if details:
            _forget_gone(details, {i.timestamp for i in self.instants if i.is_completed and i.action in WRITE_ACTIONS})

    @classmethod
    def load(cls, io: FileIO, config: TableConfig, details: dict[str, CommitMetadata] | None = None) -> Timeline:
        layout = config.timeline_layout_version
        listed = [
            (i, e.mtime_ns)
            for e in io.list_dir(config.timeline_dir)
            if not e.is_dir and (i := Instant.parse_file_name(e.name, layout))
        ]
        timeline = cls(io, config, (i for i, _ in listed), details)
        timeline.completed_at = {(i.timestamp, i.action): mtime for i, mtime in listed if i.is_completed and mtime}
        return timeline

    def __iter__(self):
        return iter(self.instants)

    def __len__(self) -> int:
        return len(self.instants)

    def filter(self, states: set[State] | None = None, actions: Iterable[str] | None = None) -> list[Instant]:
        actions = set(actions) if actions is not None else None
        return [
            i
            for i in self.instants
            if (states is None or i.state in states) and (actions is None or i.action in actions)
        ]

    def completed_writes(self) -> list[Instant]:
        """Completed commits, deltacommits and replacecommits: the instants readers see."""
        return self.filter({State.COMPLETED}, WRITE_ACTIONS)

    def pending(self, actions: Iterable[str] | None = None) -> list[Instant]:
        return self.filter({State.REQUESTED, State.INFLIGHT}, actions)

    def latest_completed_write(self) -> Instant | None:
        writes = self.completed_writes()
        return writes[-1] if writes else None

    @property
    def last_timestamp(self) -> str | None:
        return self.instants[-1].timestamp if self.instants else None

    @property
    def start(self) -> str | None:
        """The oldest write instant on the active timeline, in any state.

        Files of older instants belong to archived commits, so readers take
        them as committed (Hudi's ``isBeforeTimelineStarts``). Archival never
        moves this past a write that failed and left files behind.
        """
        for instant in self.instants:
            if instant.action in WRITE_ACTIONS:
                return instant.timestamp
        return None

    @cached_property
    def _completed_by_time(self) -> dict[str, Instant]:
        return {i.timestamp: i for i in self.completed_writes()}

    def is_completed_write(self, timestamp: str) -> bool:
        return timestamp in self._completed_by_time

    def visible_time(self, instant: Instant) -> str:
        """The time incremental reads order a completed write by: completion time in v8, instant time in v6."""
        return instant.completion_time or instant.timestamp

    def find(self, timestamp: str) -> list[Instant]:
        found = [i for i in self.instants if i.timestamp == timestamp]
        if not found:
            raise InstantNotFound(timestamp)
        return found

    def instant_path(self, instant: Instant) -> str:
        return posixpath.join(self.config.timeline_dir, instant.file_name(self.config.timeline_layout_version))

    def read_bytes(self, instant: Instant) -> bytes:
        return self.io.read_bytes(self.instant_path(instant))

    def commit_metadata(self, instant: Instant) -> CommitMetadata:
        """The metadata of a completed write (cached: completed instants never change)."""
        # several threads may share the cache (a server's requests): single dict operations, so a race only reads a
        # commit again
        cached = self._details.get(instant.timestamp) if instant.is_completed else None
        if cached is not None:
            return cached
        path = self.instant_path(instant)
        with reading_timeline_file(self.io.full_path(path)):
            metadata = CommitMetadata.from_bytes(self.io.read_bytes(path))
        if instant.is_completed:
            self._details[instant.timestamp] = metadata
        return metadata


class TimelineWriter:
    """Writes instant transitions, each one atomically, to a timeline of layout 1 (table version 6) or 2 (8).

    Under layout 2 a completed file is named by its instant and its completion time,
    ``<requested>_<completed>.<action>`` (Hudi 1.x's ``InstantFileNameGenerator`` for version 8); the completion time
    comes from ``clock`` when the file is written. An instant is completed once: its completed file is looked up by
    listing, so a retried completion finds the file an earlier attempt wrote, under whatever completion time.
    """

    def __init__(self, io: FileIO, config: TableConfig, clock: InstantClock | None = None):
        if config.version not in WRITTEN_VERSIONS:
            raise UnsupportedTableError(
                f"writing table version {config.version} is not supported; laketide writes versions "
                + " and ".join(str(v) for v in WRITTEN_VERSIONS)
            )
        self.io = io
        self.config = config
        self.clock = clock or InstantClock()
        self._layout = config.timeline_layout_version

    def path(self, instant: Instant) -> str:
        """The file of ``instant``; a completed one of layout 2 without its completion time is the one on the timeline
        (``InstantNotFound`` when there is none)."""
        named = self._named(instant)
        if named is None:
            raise InstantNotFound(instant.timestamp, f"{instant.timestamp} has no completed {instant.action} file")
        return posixpath.join(self.config.timeline_dir, named.file_name(self._layout))

    def write(self, instant: Instant, body: bytes = b"") -> Instant:
        """Write the file of ``instant`` and return it (with its completion time under layout 2). A completed
        instant is never overwritten, nor completed twice."""
        if self._layout >= 2 and instant.is_completed:
            if self._completed(instant) is not None:
                raise InstantFileExists(f"{instant.timestamp} is already completed as a {instant.action}")
            if instant.completion_time is None:
                instant = instant.with_state(State.COMPLETED, self.clock.next(after=instant.timestamp))
        self.io.write_atomic(self.path(instant), body, overwrite=not instant.is_completed)
        return instant

    def exists(self, instant: Instant) -> bool:
        if self._layout >= 2 and instant.is_completed:
            return self._completed(instant) is not None
        return self.io.is_file(self.path(instant))

    def delete(self, instant: Instant) -> None:
        named = self._named(instant)
        if named is not None:
            self.io.delete(self.path(named))

    def _named(self, instant: Instant) -> Instant | None:
        """``instant`` with all its file name needs: a completed one of layout 2 without its completion time is looked
        up on the timeline (``None`` when it is not there)."""
        if self._layout >= 2 and instant.is_completed and instant.completion_time is None:
            return self._completed(instant)
        return instant

    def _completed(self, instant: Instant) -> Instant | None:
        """The completed instant of ``instant``'s time and action on a layout 2 timeline, from a listing."""
        prefix, suffix = f"{instant.timestamp}_", f".{instant.action}"
        for entry in self.io.list_dir(self.config.timeline_dir):
            if entry.name.startswith(prefix) and entry.name.endswith(suffix):
                found = Instant.parse_file_name(entry.name, self._layout)
                if found is not None and found.is_completed and found.action == instant.action:
                    return found
        return None

    def delete_all_states(self, timestamp: str, action: str) -> None:
        """Remove the completed, then the inflight, then the requested file of one instant.

        Removing the completed file first means a crash part way leaves a
        pending instant, whose files readers ignore, never a dangling one.
        """
        for state in (State.COMPLETED, State.INFLIGHT, State.REQUESTED):
            self.delete(Instant(timestamp, action, state))
