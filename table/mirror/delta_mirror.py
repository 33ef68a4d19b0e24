"""The Delta mirror: a Delta Lake version for every completed action on the Hudi timeline.

Hudi stays the source of truth. A Delta version is appended only after the
Hudi action it mirrors has completed, and it names the same parquet files:
the latest base file of each file group (for merge-on-read, the read-optimized
view: log files are not mirrored). Version n stands for the n-th completed
commit, deltacommit, replacecommit (compactions included), clean, rollback or
restore, in completion order; its commitInfo names the Hudi instant. A clean
changes no live file, so its version carries only that commitInfo; a rollback
or a restore of a completed write is a compensating version that removes what
the write added and adds back what it had replaced.

The mirror catches up from the last version it published: after a crash
between a Hudi commit and its Delta version, the next run publishes the
versions that are missing, each from the timeline as it stood when that
action completed (its completed file's modification time orders them).

The Hudi cleaner is the only process that deletes data files. Delta's VACUUM
must never run on the mirror: it would delete the older file slices that Hudi
time travel and incremental reads still use.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from laketide.table.format.instant import CLEAN, RESTORE, ROLLBACK, WRITE_ACTIONS, Instant, State
from laketide.table.format.schema import with_meta_schema
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSystemView, list_data_files
from laketide.table.mirror.delta_log import CHECKPOINT_INTERVAL, LOG_DIR, DeltaLog, LogState, new_metadata, relative_uri
from laketide.table.mirror.delta_stats import delta_schema, file_stats, partition_value, protocol_for

log = logging.getLogger("laketide.mirror")
MIRRORED_ACTIONS = WRITE_ACTIONS | {CLEAN, ROLLBACK, RESTORE}
_NO_ACTION = (-1, "", "")


@dataclass(frozen=True)
class CompletedAction:
    instant: Instant
    completed_ns: int  # modification time of its completed file: the order actions completed in

    @property
    def key(self) -> tuple[int, str, str]:
        return (self.completed_ns, self.instant.timestamp, self.instant.action)


def completed_actions(table) -> list[CompletedAction]:
    """The timeline's completed actions that change what a reader sees, in the order they completed."""
    layout = table.config.timeline_layout_version
    found = []
    for entry in table.io.list_dir(table.config.timeline_dir):
        instant = None if entry.is_dir else Instant.parse_file_name(entry.name, layout)
        if instant is not None and instant.is_completed and instant.action in MIRRORED_ACTIONS:
            found.append(CompletedAction(instant, entry.mtime_ns))
    return sorted(found, key=lambda a: a.key)


def _timeline_at(timeline: Timeline, done: set[str]) -> Timeline:
    """The timeline when only the writes in ``done`` had completed: later ones were still in flight."""
    instants = [
        i
        if not (i.is_completed and i.is_write) or i.timestamp in done
        else Instant(i.timestamp, i.action, State.INFLIGHT)
        for i in timeline.instants
    ]
    return Timeline(timeline.io, timeline.config, instants)


def has_mirror(io) -> bool:
    """A table with a Delta log keeps it current: every writer and operation catches it up."""
    return io.exists(LOG_DIR)


class DeltaMirror:
    """Appends the Delta versions the Hudi timeline is ahead by; one run at a time per process."""

    def __init__(
        self,
        table,
        log_retention_versions: int = 1000,
        data_files: Callable[[], tuple[list, list]] | None = None,
        hold: Callable[[], None] = lambda: None,
    ):
        """``data_files`` gives the table's base and log files (a job passes its synced view's, so
        that a micro-batch's version costs no listing of the table); by default the table is listed.
        ``hold`` raises unless this writer still holds the table's lease: it runs before each version,
        so a writer paused past its lease writes none from a timeline another holder has moved on."""
        self.table = table
        self._hold = hold
        self._data_files = data_files or (lambda: list_data_files(table.io))
        self.log = DeltaLog(table.io)
        self.log_retention_versions = log_retention_versions
        self._lock = threading.Lock()
        self._state: LogState | None = None

    def catch_up(self) -> list[int]:
        """Publish a version for each completed action not mirrored yet; returns the versions written."""
        with self._lock:
            try:
                return self._catch_up()
            except BaseException:
                # the log on storage is the truth: read it again next time
                self._state = None
                raise

    def _catch_up(self) -> list[int]:
        state = self._state if self._state is not None else self.log.state()
        actions = completed_actions(self.table)
        last = _last_published(state)
        pending = [a for a in actions if a.key > last]
        if not pending:
            self._state = state
            return []
        timeline = self.table.timeline
        bases, logs = self._data_files()
        done = {a.instant.timestamp for a in actions if a.key <= last and a.instant.is_write}
        written = []
        for action in pending:
            if action.instant.is_write:
                done.add(action.instant.timestamp)
            view = FileSystemView(_timeline_at(timeline, done), bases, logs)
            written.append(self._publish(state, action, view))
        self._state = state
        return written

    def _publish(self, state: LogState, action: CompletedAction, view: FileSystemView) -> int:
        version = state.version + 1
        schema = self.table.schema(view.timeline)
        schema = with_meta_schema(schema) if schema is not None else None
        actions = self._table_actions(state, schema, action)
        metadata = next((a["metaData"] for a in actions if "metaData" in a), state.metadata)
        partition_columns = metadata["partitionColumns"] if metadata else []
        actions += self._file_actions(state, view, schema, partition_columns, action.completed_ns // 1_000_000)
        actions.append({"commitInfo": _commit_info(action)})
        self._hold()
        self.log.write_version(version, actions)
        state.apply(version, actions)
        log.info("delta version %d mirrors %s %s", version, action.instant.action, action.instant.timestamp)
        if version % CHECKPOINT_INTERVAL == 0:
            self.log.write_checkpoint(state)
            self._expire(version)
        return version

    def _table_actions(self, state: LogState, schema: pa.Schema | None, action: CompletedAction) -> list[dict]:
        """protocol and metaData: in the first version, and again when the schema (meta columns included)
        or the partitioning changed."""
        if schema is None:
            return []
        delta = delta_schema(schema)
        partition_columns = [
            f
            for f in self.table.config.partition_fields
            if f in schema.names and not pa.types.is_nested(schema.field(f).type)
        ]
        meta = state.metadata
        if (
            meta is not None
            and json.loads(meta["schemaString"]) == delta
            and meta["partitionColumns"] == partition_columns
        ):
            return []
        actions = []
        protocol = protocol_for(delta)
        if protocol != state.protocol:
            actions.append({"protocol": protocol})
        created = meta["createdTime"] if meta else action.completed_ns // 1_000_000
        actions.append(
            {"metaData": new_metadata(self.table.name, delta, partition_columns, created, meta["id"] if meta else None)}
        )
        return actions

    def _live_files(self, view: FileSystemView) -> dict[str, object]:
        return {relative_uri(s.base_file.path): s.base_file for s in view.latest_slices() if s.base_file is not None}

    def _file_actions(
        self,
        state: LogState,
        view: FileSystemView,
        schema: pa.Schema | None,
        partition_columns: list[str],
        completed_ms: int,
    ) -> list[dict]:
        live = self._live_files(view)
        now = int(time.time() * 1000)
        actions = [
            {
                "remove": {
                    "path": path,
                    "deletionTimestamp": now,
                    "dataChange": True,
                    "extendedFileMetadata": True,
                    "partitionValues": add.get("partitionValues", {}),
                    "size": add.get("size"),
                }
            }
            for path, add in sorted(state.files.items())
            if path not in live
        ]
        for path, base in sorted(live.items()):
            if path not in state.files:
                actions.append({"add": self._add(path, base, schema, partition_columns, completed_ms)})
        return actions

    def _add(self, path: str, base, schema: pa.Schema | None, partition_columns: list[str], written_ms: int) -> dict:
        """The add action of a base file; its modification time is when the action that wrote it completed."""
        io = self.table.io
        with io.open_input(base.path) as f:
            metadata = pq.read_metadata(f)
        stats = file_stats(metadata, schema) if schema is not None else {"numRecords": metadata.num_rows}
        return {
            "path": path,
            "partitionValues": {c: partition_value(metadata, c) for c in partition_columns},
            "size": io.size(base.path),
            "modificationTime": written_ms,
            "dataChange": True,
            "stats": json.dumps(stats, separators=(",", ":")),
        }

    def _expire(self, version: int) -> None:
        """Keep the log bounded: drop what lies before the newest checkpoint ``log_retention_versions`` old."""
        cutoff = version - self.log_retention_versions
        checkpoint = cutoff - cutoff % CHECKPOINT_INTERVAL
        if checkpoint > 0:
            deleted = self.log.delete_before(checkpoint)
            if deleted:
                log.info("delta log: %d files of versions before %d deleted", deleted, checkpoint)


def _last_published(state: LogState) -> tuple[int, str, str]:
    info = (state.commit_info or {}).get("laketide")
    if not info:
        return _NO_ACTION
    return (int(info["hudiCompletedNs"]), info["hudiInstant"], info["hudiAction"])


def _commit_info(action: CompletedAction) -> dict:
    instant = action.instant
    return {
        "timestamp": action.completed_ns // 1_000_000,
        "operation": f"HUDI {instant.action.upper()}",
        "operationParameters": {"instant": instant.timestamp},
        "engineInfo": "laketide",
        "isBlindAppend": False,
        "laketide": {
            "hudiInstant": instant.timestamp,
            "hudiAction": instant.action,
            "hudiCompletedNs": str(action.completed_ns),
        },
    }
