"""Savepoint and restore metadata, in the Avro form Hudi keeps on its timeline.

A savepoint of commit ``T`` is ``T.savepoint.inflight`` then ``T.savepoint``,
holding a ``HoodieSavepointMetadata``: per partition, the files of every file
slice a read as of ``T`` sees, its base file and its log files
(``hudi-common/src/main/avro/HoodieSavePointMetadata.avsc``; Hudi's
``SavepointActionExecutor`` lists ``getLatestFileSlicesBeforeOrOn`` the same
way). Cleaning keeps those files, and archival stops before the first savepoint.

A restore to savepoint ``T`` is ``R.restore.requested`` (``HoodieRestorePlan``:
the instants after ``T``, newest first), ``R.restore.inflight``, then
``R.restore`` (``HoodieRestoreMetadata``, with the rollback metadata of each
instant rolled back), as ``HoodieRestorePlan.avsc`` and
``HoodieRestoreMetadata.avsc`` define them.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from laketide.table.format import avro_models
from laketide.table.format.clean import CleanerPlan, retained_by_last_clean
from laketide.table.format.instant import CLEAN, SAVEPOINT, State
from laketide.table.format.logfile import CorruptLog, first_block_instant
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSlice
from laketide.table.storage.io import FileIO

RESTORE_PLAN_VERSION = 2  # HoodieRestorePlan.version: plans name the instants with their actions


@dataclass(frozen=True)
class SavepointMetadata:
    instant: str
    user: str
    saved_at_ms: int
    comment: str
    files: tuple[str, ...]  # relative to the table

    def to_bytes(self) -> bytes:
        partitions: dict[str, list[str]] = {}
        for path in self.files:
            partitions.setdefault(posixpath.dirname(path), []).append(posixpath.basename(path))
        record = {
            "savepointedBy": self.user,
            "savepointedAt": self.saved_at_ms,
            "comments": self.comment,
            "partitionMetadata": {
                p: {"partitionPath": p, "savepointDataFile": sorted(names)} for p, names in sorted(partitions.items())
            },
        }
        return avro_models.write_container("HoodieSavepointMetadata", record)

    @classmethod
    def from_bytes(cls, instant: str, data: bytes) -> SavepointMetadata:
        record = avro_models.read_container(data, "HoodieSavepointMetadata")
        files = [
            posixpath.join(p, name) if p else name
            for p, meta in record["partitionMetadata"].items()
            for name in meta["savepointDataFile"]
        ]
        return cls(instant, record["savepointedBy"], record["savepointedAt"], record["comments"], tuple(sorted(files)))


def savepoints(timeline: Timeline) -> list[SavepointMetadata]:
    """The completed savepoints of a table, oldest first."""
    return [
        SavepointMetadata.from_bytes(i.timestamp, timeline.read_bytes(i))
        for i in timeline.filter({State.COMPLETED}, [SAVEPOINT])
    ]


def held_files(io: FileIO, slices: list[FileSlice], as_of: str) -> tuple[str, ...]:
    """What a savepoint of ``as_of`` holds: each slice's base file and the log files written up to ``as_of``.

    A log file's name carries its slice's base instant, not the instant that
    wrote it, so the first block's header tells: logs written after ``as_of``
    (and copies a compaction carried over of them) belong to writes a restore
    rolls back, not to the savepointed state.
    """
    files = []
    for fs in slices:
        if fs.base_file is not None:
            files.append(fs.base_file.path)
        for log in fs.log_files:
            try:
                with io.open_input(log.path) as f:
                    written = first_block_instant(f)
            except (CorruptLog, FileNotFoundError):
                written = None
            if written is None or written <= as_of:
                files.append(log.path)
    return tuple(sorted(files))


def lookup_window_start(timeline: Timeline) -> str | None:
    """The oldest commit whose files the last clean (completed or pending) promised to keep.

    Hudi's ``SavepointActionExecutor`` refuses to savepoint a commit before it:
    cleaning may already have deleted files a read of that commit needs.
    """
    cleans = timeline.filter(actions=[CLEAN])
    if cleans and not cleans[-1].is_completed:
        requested = cleans[-1].with_state(State.REQUESTED)
        return CleanerPlan.from_bytes(timeline.read_bytes(requested), timeline.io.full_path("")).earliest_to_retain
    return retained_by_last_clean(timeline)


def savepointed_files(timeline: Timeline) -> frozenset[str]:
    """Every file a savepoint holds: cleaning never deletes these."""
    return frozenset(path for sp in savepoints(timeline) for path in sp.files)


@dataclass(frozen=True)
class RestorePlan:
    savepoint: str
    instants: tuple[tuple[str, str], ...]  # (instant time, action) to roll back, newest first

    def to_bytes(self) -> bytes:
        record = {
            "instantsToRollback": [{"commitTime": t, "action": a} for t, a in self.instants],
            "version": RESTORE_PLAN_VERSION,
            "savepointToRestoreTimestamp": self.savepoint,
        }
        return avro_models.write_container("HoodieRestorePlan", record)

    @classmethod
    def from_bytes(cls, data: bytes) -> RestorePlan:
        record = avro_models.read_container(data, "HoodieRestorePlan")
        return cls(
            record["savepointToRestoreTimestamp"],
            tuple((i["commitTime"], i["action"]) for i in record["instantsToRollback"]),
        )


@dataclass
class RestoreMetadata:
    restore_time: str
    plan: RestorePlan
    rollbacks: dict[str, bytes] = field(default_factory=dict)  # instant -> its HoodieRollbackMetadata container
    elapsed_ms: int = 0

    def to_bytes(self) -> bytes:
        record = {
            "startRestoreTime": self.restore_time,
            "timeTakenInMillis": self.elapsed_ms,
            "instantsToRollback": [t for t, _ in self.plan.instants],
            "hoodieRestoreMetadata": {
                t: [avro_models.read_container(body, "HoodieRollbackMetadata")] for t, body in self.rollbacks.items()
            },
            "version": 1,
            "restoreInstantInfo": [{"commitTime": t, "action": a} for t, a in self.plan.instants],
            "extraMetadata": {"savepoint": self.plan.savepoint},
        }
        return avro_models.write_container("HoodieRestoreMetadata", record)
