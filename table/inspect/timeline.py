"""The timeline as an operator reads it: each instant with what it wrote and how long it took, paging on
into the archive; and the table services' last runs and what is pending.

Part of ``table.inspect`` (``InspectTable.timeline`` and ``InspectTable.services``). A page reads the
active timeline's listing once, the commit metadata of its own instants (cached by the table), and the
archive only when it pages past the active timeline: an operator's first look never decodes the archive.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from laketide.table.errors import Invalid
from laketide.table.format import avro_models
from laketide.table.format.archive import (
    ENTRY,
    ArchivedInstant,
    ArchivedTimeline,
    archive_file_version,
    archived_instant,
)
from laketide.table.format.commit import CommitMetadata
from laketide.table.format.instant import (
    CLEAN,
    COMMIT,
    COMPACTION,
    INSTANT_TIME,
    ROLLBACK,
    WRITE_ACTIONS,
    Instant,
    State,
    instant_to_datetime,
)
from laketide.table.format.logfile import CorruptLog, LogBlock, avro_records, read_blocks
from laketide.table.format.lsm_history import HistoryEntry, LsmHistory
from laketide.table.format.savepoint import SavepointMetadata, savepoints
from laketide.table.lru import LruCache
from laketide.table.storage.io import FileEntry

if TYPE_CHECKING:
    from laketide.table.format.timeline import Timeline
    from laketide.table.table import Table


class TimelineRow(BaseModel):
    """One instant: its action and state and, for a write, what it wrote."""

    instant: str
    action: str
    kind: str = Field(
        default="", description="what the instant did: a commit that is a compaction says 'compaction'; else its action"
    )
    state: str
    archived: bool = False
    operation: str | None = None
    records: int | None = None
    inserts: int | None = None
    updates: int | None = None
    deletes: int | None = None
    files: int | None = None
    bytes: int | None = None
    seconds: float | None = Field(
        default=None, description="from the instant time to its completed file (active timeline only)"
    )


class TimelinePage(BaseModel):
    items: list[TimelineRow]
    next_before: str | None = Field(
        default=None, description="pass as `before` for the next (older) page; it goes on into the archive"
    )
    active_instants: int = Field(description="instants on the active timeline, in every state")


class ServiceRun(BaseModel):
    instant: str
    state: str
    seconds: float | None = None


class ArchiveInfo(BaseModel):
    files: int
    bytes: int
    newest_archived: str | None = Field(default=None, description="the newest instant the last archival moved")
    last_archived_at: str | None = Field(default=None, description="when the archive was last written (UTC)")


class ServicesView(BaseModel):
    """The table services as the timeline shows them."""

    last_clean: ServiceRun | None = None
    last_compaction: ServiceRun | None = None
    last_rollback: ServiceRun | None = None
    pending: list[ServiceRun] = Field(
        default_factory=list, description="requested and inflight instants, with their action in `state`"
    )
    pending_compactions: int = 0
    archive: ArchiveInfo
    savepoints: list[SavepointMetadata] = Field(default_factory=list)


# decoded archive blocks, by (file, block number, length): archival only appends blocks, so a block never
# changes; shared by every request of a process (``LruCache`` guards itself)
ARCHIVE_BLOCKS: LruCache[list[TimelineRow]] = LruCache(64)
# the archive's summary, by its files' names and sizes: read again only after an archival
ARCHIVE_INFO: LruCache[ArchiveInfo] = LruCache(16)


def _write_row(row: TimelineRow, meta: CommitMetadata) -> TimelineRow:
    totals = meta.totals()
    return row.model_copy(
        update={
            "operation": meta.operation_type,
            "records": totals["writes"],
            "inserts": totals["inserts"],
            "updates": totals["updates"],
            "deletes": totals["deletes"],
            "files": totals["files"],
            "bytes": totals["bytes"],
            "kind": "compaction" if meta.is_compaction else row.action,
        }
    )


def _seconds(instant: Instant, timeline: Timeline) -> float | None:
    """From the instant time to its completed file, as the timeline's listing dates it."""
    written = timeline.completed_at.get((instant.timestamp, instant.action))
    if not written:
        return None
    return max(0.0, round(written / 1e9 - instant_to_datetime(instant.timestamp).timestamp(), 3))


def _active_rows(timeline: Timeline, instants: list[Instant]) -> list[TimelineRow]:
    rows = []
    for instant in instants:
        row = TimelineRow(
            instant=instant.timestamp,
            action=instant.action,
            kind=instant.action,
            state=instant.state.value,
            seconds=_seconds(instant, timeline),
        )
        if instant.action in WRITE_ACTIONS and instant.is_completed:
            meta = timeline.commit_metadata(instant)
            row = _write_row(row, meta)
        rows.append(row)
    return rows


def _archived_row(archived: ArchivedInstant) -> TimelineRow:
    instant, entry = archived.instant, archived.entry
    row = TimelineRow(
        instant=instant.timestamp, action=instant.action, kind=instant.action, state=instant.state.value, archived=True
    )
    record = entry.get("hoodieCommitMetadata") or entry.get("hoodieReplaceCommitMetadata")
    if not record or not instant.is_completed:
        return row
    meta = CommitMetadata.from_avro_record(record)
    return _write_row(row, meta)


def _block_rows(block: LogBlock) -> list[TimelineRow]:
    """One archival's instants, newest first, one row per instant (its furthest state)."""
    latest: dict[tuple[str, str], TimelineRow] = {}
    for entry in avro_records(block, avro_models.schema(ENTRY)):
        row = _archived_row(ArchivedInstant(archived_instant(entry), entry))
        kept = latest.get((row.instant, row.action))
        if kept is None or State(row.state).rank > State(kept.state).rank:
            latest[(row.instant, row.action)] = row
    return sorted(latest.values(), key=lambda r: (r.instant, r.action), reverse=True)


def _history_row(entry: HistoryEntry) -> TimelineRow:
    row = TimelineRow(
        instant=entry.instant_time, action=entry.action, kind=entry.action, state="COMPLETED", archived=True
    )
    if entry.action not in WRITE_ACTIONS or not entry.metadata:
        return row
    return _write_row(row, CommitMetadata.from_bytes(entry.metadata))


def _history_newest_first(table: Table) -> Iterator[TimelineRow]:
    """Version 8: the LSM history's actions, newest first, read once per snapshot and process."""
    history = LsmHistory(table.io, table.config.history_dir)
    key = (table.io.full_path(history.path), history.snapshot(), -1)
    rows = ARCHIVE_BLOCKS.get(key)
    if rows is None:
        rows = [_history_row(e) for e in reversed(history.entries())]
        ARCHIVE_BLOCKS.put(key, rows)
    yield from rows


def _archived_newest_first(table: Table) -> Iterator[TimelineRow]:
    """The archive's instants, newest first: files newest first, and in each its blocks (one per archival)
    newest first, each decoded only when the page reaches it, and once per process."""
    if table.config.version >= 8:
        yield from _history_newest_first(table)
        return
    archive = ArchivedTimeline(table.io, table.config.archive_dir)
    for _, path in reversed(archive.files()):
        try:
            blocks = list(read_blocks(table.io.read_bytes(path)))
        except CorruptLog:
            continue  # a torn newest file (a crash while archiving): Hudi's reader skips it too
        for number in reversed(range(len(blocks))):
            key = (table.io.full_path(path), number, len(blocks[number].content))
            rows = ARCHIVE_BLOCKS.get(key)
            if rows is None:
                rows = _block_rows(blocks[number])
                ARCHIVE_BLOCKS.put(key, rows)
            yield from rows


def timeline_page(
    table: Table,
    states: Iterable[State] | None,
    actions: Iterable[str] | None,
    before: str | None,
    limit: int,
    archived: bool = True,
) -> TimelinePage:
    """Instants newest first, ``limit`` at a time, from the active timeline and then (``archived``) the archive;
    ``before`` (the next page's start) must have an instant time's 17 digits (any, as a bound)."""
    if before is not None and not INSTANT_TIME.match(before):
        raise Invalid(f"before must be an instant time, 17 digits yyyyMMddHHmmssSSS, not {before!r}")
    states = {State(s) for s in states} if states else None
    actions = set(actions) if actions else None
    timeline = table.timeline
    active = [i for i in reversed(timeline.filter(states, actions)) if before is None or i.timestamp < before]
    rows = _active_rows(timeline, active[: limit + 1])
    if archived:
        # archival goes by action, so the archive and the active timeline overlap in time (a clean kept active
        # is older than commits archived after it): the two are merged by instant, each instant shown once
        on_timeline = {(i.timestamp, i.action) for i in timeline.instants}
        older = (
            row
            for row in _archived_newest_first(table)
            if (row.instant, row.action) not in on_timeline
            and (before is None or row.instant < before)
            and (states is None or State(row.state) in states)
            and (actions is None or row.action in actions)
        )
        rows = list(islice(heapq.merge(rows, older, key=lambda row: row.instant, reverse=True), limit + 1))
    page = rows[:limit]
    return TimelinePage(
        items=page, next_before=page[-1].instant if len(rows) > limit else None, active_instants=len(timeline)
    )


def _last(instants: list[Instant], timeline: Timeline) -> ServiceRun | None:
    if not instants:
        return None
    newest = instants[-1]
    return ServiceRun(instant=newest.timestamp, state=newest.state.value, seconds=_seconds(newest, timeline))


def _archive_files(table: Table) -> tuple[str, list[FileEntry]]:
    """The archive's folder and files: version 8's LSM history (its parquet files), else the archive log files."""
    if table.config.version >= 8:
        path = table.config.history_dir
        return path, [e for e in table.io.list_dir(path) if not e.is_dir and e.name.endswith(".parquet")]
    path = table.config.archive_dir
    return path, [e for e in table.io.list_dir(path) if not e.is_dir and archive_file_version(e.name) is not None]


def _archive_info(table: Table) -> ArchiveInfo:
    folder, entries = _archive_files(table)
    if not entries:
        return ArchiveInfo(files=0, bytes=0)
    key = (table.io.full_path(folder), tuple(sorted((e.name, e.size) for e in entries)))
    info = ARCHIVE_INFO.get(key)
    if info is None:
        newest = next(_archived_newest_first(table), None)  # the newest block's first row: what the last archival moved
        written = max(e.mtime_ns for e in entries)
        at = datetime.fromtimestamp(written / 1e9, tz=UTC).isoformat(timespec="seconds") if written else None
        info = ArchiveInfo(
            files=len(entries),
            bytes=sum(e.size for e in entries),
            newest_archived=newest.instant if newest else None,
            last_archived_at=at,
        )
        ARCHIVE_INFO.put(key, info)
    return info


def services(table: Table) -> ServicesView:
    """The last clean, compaction and rollback, what is pending, the archive and the savepoints."""
    timeline = table.timeline
    completed = timeline.filter({State.COMPLETED})
    # a merge-on-read table's writes are deltacommits: its commits are compactions (Hudi's own reading)
    compacting = table.config.table_type == "MERGE_ON_READ"
    pending = timeline.pending()
    return ServicesView(
        last_clean=_last([i for i in completed if i.action == CLEAN], timeline),
        last_compaction=_last([i for i in completed if compacting and i.action == COMMIT], timeline),
        last_rollback=_last([i for i in completed if i.action == ROLLBACK], timeline),
        pending=[ServiceRun(instant=i.timestamp, state=f"{i.action} {i.state.value}") for i in pending],
        pending_compactions=sum(1 for i in pending if i.action == COMPACTION),
        archive=_archive_info(table),
        savepoints=savepoints(timeline),
    )
