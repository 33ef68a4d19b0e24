"""A table's files moved between table versions 6 and 8, as Hudi's ``UpgradeDowngrade`` moves them.

Upgrade (``hudi-client/hudi-client-common/.../table/upgrade/SixToEightUpgradeHandler.java``): every instant file
of ``.hoodie/`` is written again under ``.hoodie/timeline/`` with its layout 2 name, a completed one named with its
completion time (its file's modification time, as Hudi takes it for a version 6 instant), and a write's metadata
turned from JSON into Avro (``CommitMetadataSerDeV2``); the archive's actions go into the LSM history
(``UpgradeDowngradeUtils.upgradeToLSMTimeline``); ``hoodie.properties`` becomes version 8, layout 2, with the keys
version 8 adds and ``hoodie.table.initial.version = 6``; then the old instant files go. Downgrade
(``EightToSixDowngradeHandler.java``) is the reverse. What must happen first (failed writes rolled back, a
merge-on-read table's logs compacted away) is the caller's (``writer.operations``).

A crash at any step leaves a table of one version that readers open: until ``hoodie.properties`` changes, the new
files sit where the old version does not look (and a run again starts them afresh); after it, the old files are
what a run again finishes deleting.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from laketide.table.format import avro_models
from laketide.table.format.archive import ArchivedTimeline, archived_entry
from laketide.table.format.commit import CommitMetadata
from laketide.table.format.commit_avro import commit_avro_bytes
from laketide.table.format.instant import (
    CLEAN,
    COMMIT,
    COMPACTION,
    DELTA_COMMIT,
    REPLACE_COMMIT,
    ROLLBACK,
    SAVEPOINT,
    WRITE_ACTIONS,
    Instant,
    State,
    format_epoch_ms,
)
from laketide.table.format.lsm_history import HistoryEntry, LsmHistory
from laketide.table.format.properties import TableConfig
from laketide.table.format.properties_file import modify, read_properties
from laketide.table.storage.io import FileEntry, FileIO

# the keys only version 8 has, which a downgrade drops
VERSION_8_KEYS = ("hoodie.timeline.path", "hoodie.timeline.history.path", "hoodie.table.initial.version")
# the Avro record of an archived action's completed metadata, by action (writes are HoodieCommitMetadata)
_COMPLETED_RECORD = {
    CLEAN: ("hoodieCleanMetadata", "HoodieCleanMetadata"),
    ROLLBACK: ("hoodieRollbackMetadata", "HoodieRollbackMetadata"),
    SAVEPOINT: ("hoodieSavePointMetadata", "HoodieSavepointMetadata"),
}
_PLAN_RECORD = {
    COMPACTION: ("hoodieCompactionPlan", "HoodieCompactionPlan"),
    CLEAN: ("hoodieCleanerPlan", "HoodieCleanerPlan"),
    REPLACE_COMMIT: ("hoodieRequestedReplaceMetadata", "HoodieRequestedReplaceMetadata"),
}


@dataclass
class VersionChange:
    """What a version change moves (or, in a dry run, would)."""

    table: str
    from_version: int
    to_version: int
    timeline_files: int = 0
    archived_actions: int = 0
    removed: list[str] = field(default_factory=list)


def upgrade_to_8(io: FileIO, config: TableConfig, dry_run: bool = False) -> VersionChange:
    """Move a version 6 table's timeline, archive and properties to version 8 (see the module's docstring)."""
    target = config.model_copy(update={"version": 8, "extra": {**config.extra, "hoodie.table.initial.version": "6"}})
    instants = _listed(io, config)
    archived = _archived_as_history(io, config)
    change = VersionChange(io.full_path(""), config.version, 8, len(instants), len(archived))
    if dry_run:
        return change
    io.delete_dir(target.timeline_dir)  # what an attempt that crashed before the properties changed left
    io.makedirs(target.history_dir)
    for instant, entry in instants:
        body = io.read_bytes(entry.path)
        moved = instant
        if instant.is_completed:
            moved = instant.with_state(State.COMPLETED, _completion(instant.timestamp, entry.mtime_ns))
        io.write_atomic(
            posixpath.join(target.timeline_dir, moved.file_name(2)), _to_avro(instant, body), overwrite=True
        )
    LsmHistory(io, target.history_dir).append(archived)
    modify(io, lambda props: {**props, **target.to_properties()})
    change.removed = _remove_instant_files(io, config)
    return change


def downgrade_to_6(io: FileIO, config: TableConfig, dry_run: bool = False) -> VersionChange:
    """Move a version 8 table's timeline, LSM history and properties back to version 6."""
    target = config.model_copy(update={"version": 6})
    instants = _listed(io, config)
    history = LsmHistory(io, config.history_dir).entries()
    change = VersionChange(io.full_path(""), config.version, 6, len(instants), len(history))
    if dry_run:
        return change
    for instant, entry in instants:
        body = io.read_bytes(entry.path)
        plain = Instant(instant.timestamp, instant.action, instant.state)  # layout 1 names carry no completion time
        io.write_atomic(
            posixpath.join(target.timeline_dir, plain.file_name(1)), _to_json(instant, body), overwrite=True
        )
    archive = ArchivedTimeline(io, target.archive_dir)
    if not _already_archived(archive, history):
        archive.append(entry for h in history for entry in _archived_entries(h))
    modify(io, lambda props: {k: v for k, v in {**props, **target.to_properties()}.items() if k not in VERSION_8_KEYS})
    io.delete_dir(config.timeline_dir)
    change.removed = [config.timeline_dir]
    return change


def finish_upgrade(io: FileIO) -> list[str]:
    """The version 6 instant files an upgrade that crashed after its properties changed left in ``.hoodie/``."""
    props = read_properties(io)
    if props.get("hoodie.table.version") != "8":
        return []
    return _remove_instant_files(io, TableConfig.from_properties({**props, "hoodie.table.version": "6"}))


def _listed(io: FileIO, config: TableConfig) -> list[tuple[Instant, FileEntry]]:
    """Every instant file of the timeline (all states) with its entry, in instant order: they are written again in
    that order, so the order their files were written in (which the Delta mirror follows) holds."""
    layout = config.timeline_layout_version
    found = [
        (i, e)
        for e in io.list_dir(config.timeline_dir)
        if not e.is_dir and (i := Instant.parse_file_name(e.name, layout)) is not None
    ]
    return sorted(found, key=lambda pair: (pair[0].completion_time or pair[0].timestamp, pair[0].state.rank))


def _remove_instant_files(io: FileIO, config: TableConfig) -> list[str]:
    """Delete the layout 1 instant files of ``.hoodie/``: requested and inflight first, as an archival does."""
    found = sorted(_listed(io, config), key=lambda pair: (pair[0].state is State.COMPLETED, pair[0].timestamp))
    paths = [entry.path for _, entry in found]
    for path in paths:
        io.delete(path)
    return paths


def _completion(instant_time: str, mtime_ns: int) -> str:
    """A version 6 instant's completion time: when its completed file was written, and after the instant itself."""
    written = format_epoch_ms(mtime_ns // 1_000_000) if mtime_ns else instant_time
    return max(written, instant_time)


def _to_avro(instant: Instant, body: bytes) -> bytes:
    """A write's JSON metadata (completed or inflight) as version 8 holds it; any other body as it is."""
    if instant.action not in WRITE_ACTIONS or instant.state is State.REQUESTED or not body.strip():
        return body
    if body.startswith(b"Obj\x01"):
        return body
    return commit_avro_bytes(CommitMetadata.from_bytes(body), instant.action == REPLACE_COMMIT)


def _to_json(instant: Instant, body: bytes) -> bytes:
    """A write's Avro metadata as version 6 holds it: JSON."""
    if instant.action not in WRITE_ACTIONS or instant.state is State.REQUESTED or not body.startswith(b"Obj\x01"):
        return body
    return CommitMetadata.from_bytes(body).to_json_bytes()


def _archived_as_history(io: FileIO, config: TableConfig) -> list[HistoryEntry]:
    """The v6 archive's completed actions as the LSM history holds them, each with its plan. An archived action
    carries no completion time: its instant time stands for it."""
    entries = [a.entry for a in ArchivedTimeline(io, config.archive_dir).instants()]
    plans = {(e["commitTime"], e["actionType"]): e for e in entries if e.get("actionState") == State.REQUESTED.value}
    out = []
    for e in entries:
        if (e.get("actionState") or State.COMPLETED.value) != State.COMPLETED.value:
            continue
        ts, action = e["commitTime"], e["actionType"]
        plan_entry = plans.get((ts, COMPACTION)) if action == COMMIT else plans.get((ts, action))
        out.append(HistoryEntry(ts, ts, action, _completed_bytes(action, e), _plan_bytes(plan_entry)))
    return out


def _completed_bytes(action: str, entry: dict) -> bytes | None:
    if action in (COMMIT, DELTA_COMMIT, REPLACE_COMMIT):
        record = entry.get("hoodieCommitMetadata") or entry.get("hoodieReplaceCommitMetadata")
        if record is None:
            return None
        return commit_avro_bytes(CommitMetadata.from_avro_record(record), action == REPLACE_COMMIT)
    field_name, schema = _COMPLETED_RECORD.get(action, (None, None))
    record = entry.get(field_name) if field_name else None
    return avro_models.write_container(schema, record) if schema and record else None


def _plan_bytes(entry: dict | None) -> bytes | None:
    if entry is None:
        return None
    for field_name, schema in _PLAN_RECORD.values():
        if entry.get(field_name):
            return avro_models.write_container(schema, entry[field_name])
    return None


def _archived_entries(history: HistoryEntry) -> list[dict]:
    """One LSM history action as the v6 archive holds it: its plan's entry, if any, then its completed one."""
    out = []
    if history.plan:
        planned = COMPACTION if history.action == COMMIT and b"HoodieCompactionPlan" in history.plan else history.action
        out.append(archived_entry(Instant(history.instant_time, planned, State.REQUESTED), history.plan))
    completed = Instant(history.instant_time, history.action, State.COMPLETED)
    out.append(archived_entry(completed, _to_json(completed, history.metadata or b"")))
    return out


def _already_archived(archive: ArchivedTimeline, history: list[HistoryEntry]) -> bool:
    """Whether a downgrade that crashed before its properties changed already wrote ``history`` to the archive."""
    if not history:
        return True
    newest = max(history, key=lambda h: h.instant_time)
    return Instant(newest.instant_time, newest.action, State.COMPLETED) in archive.last_block_instants()
