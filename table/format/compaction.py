"""Compaction plans of merge-on-read tables: which slices to fold, and the logs written since the plan.

A plan (``<instant>.compaction.requested``, Hudi's ``HoodieCompactionPlan``,
version 2: file names relative to their partition, as
``CompactionUtils.buildFromFileSlice`` writes them) names the slices to fold.
The completed compaction is ``<instant>.commit``, marked ``compacted``.

Hudi's writers put the logs of a group under a pending compaction on the new
slice at once; hudi-rs ignores log files named after an instant that is not
completed, so it would not see those updates until the compaction commits.
laketide's deltacommits keep writing on the committed slice instead, and the
compaction, just before it commits, carries the logs written since its plan
over to the new slice (``late_logs``, ``carried_name``).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from laketide.table.format import avro_models
from laketide.table.format.files import BaseFile, LogFile
from laketide.table.format.instant import COMPACTION, Instant, State
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSlice

PLAN_VERSION = 2


@dataclass(frozen=True)
class CompactionOperation:
    partition: str
    file_id: str
    base_instant: str
    base_file: str | None  # name within the partition
    log_files: tuple[str, ...]  # names within the partition, oldest first

    def file_slice(self) -> FileSlice:
        base = BaseFile.parse(self.partition, self.base_file) if self.base_file else None
        logs = [lf for lf in (LogFile.parse(self.partition, name) for name in self.log_files) if lf is not None]
        return FileSlice(self.partition, self.file_id, self.base_instant, base, logs)


@dataclass(frozen=True)
class CompactionPlan:
    operations: tuple[CompactionOperation, ...]

    def to_bytes(self) -> bytes:
        record = {
            "operations": [
                {
                    "baseInstantTime": op.base_instant,
                    "deltaFilePaths": list(op.log_files),
                    "dataFilePath": op.base_file,
                    "fileId": op.file_id,
                    "partitionPath": op.partition,
                    "metrics": {"TOTAL_LOG_FILES": float(len(op.log_files))},
                }
                for op in self.operations
            ],
            "extraMetadata": {},
            "version": PLAN_VERSION,
        }
        return avro_models.write_container("HoodieCompactionPlan", record)

    @classmethod
    def from_bytes(cls, data: bytes) -> CompactionPlan:
        record = avro_models.read_container(data, "HoodieCompactionPlan")
        ops = []
        for op in record.get("operations") or []:
            base, logs = op.get("dataFilePath"), op.get("deltaFilePaths") or []
            ops.append(
                CompactionOperation(
                    op.get("partitionPath") or "",
                    op["fileId"],
                    op["baseInstantTime"],
                    _name(base) if base else None,
                    tuple(_name(p) for p in logs),
                )
            )
        return cls(tuple(ops))

    def file_groups(self) -> set[tuple[str, str]]:
        return {(op.partition, op.file_id) for op in self.operations}


def _name(path: str) -> str:
    """A file name from a plan: version 1 plans name files by full path, version 2 by name."""
    return posixpath.basename(path)


def pending_compactions(timeline: Timeline) -> list[Instant]:
    """Compactions planned (requested or inflight) whose commit is not on the timeline yet."""
    return timeline.filter({State.REQUESTED, State.INFLIGHT}, [COMPACTION])


def compaction_plan(timeline: Timeline, instant: Instant) -> CompactionPlan:
    return CompactionPlan.from_bytes(timeline.read_bytes(Instant(instant.timestamp, COMPACTION, State.REQUESTED)))


def groups_under_compaction(timeline: Timeline) -> set[tuple[str, str]]:
    """(partition, file id) of the file groups a pending compaction holds: no second plan takes them."""
    return {
        group for instant in pending_compactions(timeline) for group in compaction_plan(timeline, instant).file_groups()
    }


def late_logs(op: CompactionOperation, current: FileSlice | None) -> list[LogFile]:
    """Committed logs of the planned slice that the plan does not name: written after it was made."""
    if current is None or current.base_instant != op.base_instant:
        return []
    planned = set(op.log_files)
    return sorted((lf for lf in current.log_files if lf.name not in planned), key=lambda lf: lf.order)


def carried_name(log: LogFile, compaction_instant: str, version: int) -> LogFile:
    """A late log's copy on the slice the compaction starts."""
    return LogFile(log.partition, log.file_id, compaction_instant, version, log.write_token)


def slices_to_compact(
    slices: list[FileSlice], delta_commits: int, max_log_bytes: int, busy: set[tuple[str, str]]
) -> list[FileSlice]:
    """Slices with at least ``delta_commits`` log files (one per deltacommit, as laketide writes them)
    or ``max_log_bytes`` of logs, that no pending compaction holds."""
    return [
        s
        for s in slices
        if s.log_files
        and (s.partition, s.file_id) not in busy
        and (len(s.log_files) >= delta_commits or sum(lf.size for lf in s.log_files) >= max_log_bytes)
    ]


def plan_for(slices: list[FileSlice]) -> CompactionPlan:
    return CompactionPlan(
        tuple(
            CompactionOperation(
                s.partition,
                s.file_id,
                s.base_instant,
                s.base_file.name if s.base_file else None,
                tuple(lf.name for lf in s.log_files),
            )
            for s in slices
        )
    )
