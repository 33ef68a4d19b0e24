"""Cleaning: which old file versions a table no longer needs, and the clean action's timeline files.

``<ts>.clean.requested`` holds a ``HoodieCleanerPlan`` and ``<ts>.clean`` a
``HoodieCleanMetadata``, each one record in an Avro container file, with the
schemas of Apache Hudi's ``hudi-common/src/main/avro/HoodieCleanerPlan.avsc``,
``HoodieCleanMetadata.avsc`` and ``HoodieCleanPartitionMetadata.avsc`` (the
newest versions, which older Hudi readers resolve through Avro's defaults).

The planning rules are Hudi's ``CleanPlanner``: under KEEP_LATEST_COMMITS
(and KEEP_LATEST_BY_HOURS, which only picks the earliest retained commit
another way) a file version is kept while any read as of a retained commit
needs it; under KEEP_LATEST_FILE_VERSIONS each file group keeps its newest N.
The latest version of a live file group is never deleted, nor is a file a
savepoint holds.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from laketide.table.format import avro_models
from laketide.table.format.files import LogFile, absolute_path, table_relative
from laketide.table.format.instant import CLEAN, COMMIT, REPLACE_COMMIT, Instant, State, instant_to_datetime
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSystemView


class CleanPolicy(StrEnum):
    KEEP_LATEST_COMMITS = "KEEP_LATEST_COMMITS"
    KEEP_LATEST_FILE_VERSIONS = "KEEP_LATEST_FILE_VERSIONS"
    KEEP_LATEST_BY_HOURS = "KEEP_LATEST_BY_HOURS"


@dataclass(frozen=True)
class Retention:
    policy: CleanPolicy = CleanPolicy.KEEP_LATEST_COMMITS
    commits: int = 10
    file_versions: int = 1
    hours: float = 24.0


# Hudi's CleanerUtils.CLEAN_METADATA_VERSION_2 / CLEANER_PLAN_VERSION_2: file paths, not names
VERSION = 2


def _partition_of(path: str) -> str:
    return posixpath.dirname(path)


@dataclass(frozen=True)
class CleanerPlan:
    """Files to delete, relative to the table; written as absolute paths, as Hudi's planner writes them."""

    policy: CleanPolicy
    earliest_to_retain: str | None
    last_completed: str
    files: tuple[str, ...] = ()

    def to_bytes(self, base_uri: str) -> bytes:
        per_partition: dict[str, list[dict]] = {}
        for path in self.files:
            per_partition.setdefault(_partition_of(path), []).append(
                {"filePath": absolute_path(base_uri, path), "isBootstrapBaseFile": False}
            )
        earliest = (
            {"timestamp": self.earliest_to_retain, "action": COMMIT, "state": State.COMPLETED.value}
            if self.earliest_to_retain
            else None
        )
        record = {
            "earliestInstantToRetain": earliest,
            "lastCompletedCommitTimestamp": self.last_completed,
            "policy": self.policy.value,
            "filesToBeDeletedPerPartition": None,
            "version": VERSION,
            "filePathsToBeDeletedPerPartition": per_partition,
            "partitionsToBeDeleted": [],
            "extraMetadata": None,
        }
        return avro_models.write_container("HoodieCleanerPlan", record)

    @classmethod
    def from_bytes(cls, data: bytes, base_uri: str) -> CleanerPlan:
        record = avro_models.read_container(data)
        files = []
        for partition, infos in (record.get("filePathsToBeDeletedPerPartition") or {}).items():
            files += [table_relative(i["filePath"], partition, base_uri) for i in infos if i.get("filePath")]
        for partition, names in (record.get("filesToBeDeletedPerPartition") or {}).items():
            files += [posixpath.join(partition, n) for n in names]  # version 1 plans name files only
        earliest = record.get("earliestInstantToRetain")
        return cls(
            CleanPolicy(record["policy"]),
            earliest["timestamp"] if earliest else None,
            record.get("lastCompletedCommitTimestamp") or "",
            tuple(sorted(files)),
        )

    def is_empty(self) -> bool:
        return not self.files


@dataclass
class CleanMetadata:
    start_time: str
    plan: CleanerPlan
    deleted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    time_taken_ms: int = 0

    def to_bytes(self) -> bytes:
        partitions: dict[str, dict] = {}
        for path, ok in [(p, True) for p in self.deleted] + [(p, False) for p in self.failed]:
            partition = _partition_of(path)
            entry = partitions.setdefault(
                partition,
                {
                    "partitionPath": partition,
                    "policy": self.plan.policy.value,
                    "deletePathPatterns": [],
                    "successDeleteFiles": [],
                    "failedDeleteFiles": [],
                    "isPartitionDeleted": False,
                },
            )
            name = posixpath.basename(path)
            entry["deletePathPatterns"].append(name)
            entry["successDeleteFiles" if ok else "failedDeleteFiles"].append(name)
        record = {
            "startCleanTime": self.start_time,
            "timeTakenInMillis": self.time_taken_ms,
            "totalFilesDeleted": len(self.deleted),
            "earliestCommitToRetain": self.plan.earliest_to_retain or "",
            "lastCompletedCommitTimestamp": self.plan.last_completed,
            "partitionMetadata": partitions,
            "version": VERSION,
            "bootstrapPartitionMetadata": {},
            "extraMetadata": None,
        }
        return avro_models.write_container("HoodieCleanMetadata", record)


def cleaned_files(data: bytes, base_uri: str) -> list[str]:
    """The files a completed clean deleted (``HoodieCleanMetadata``), relative to the table."""
    record = avro_models.read_container(data, "HoodieCleanMetadata")
    partitions = (record.get("partitionMetadata") or {}).values()
    return [
        table_relative(name, pm["partitionPath"], base_uri)
        for pm in partitions
        for name in pm.get("successDeleteFiles") or []
    ]


def retained_by_last_clean(timeline: Timeline) -> str | None:
    """The earliest commit the latest completed clean retains: reads as of older instants may miss file versions it
    deleted."""
    cleans = timeline.filter({State.COMPLETED}, [CLEAN])
    if not cleans:
        return None
    return avro_models.read_container(timeline.read_bytes(cleans[-1])).get("earliestCommitToRetain") or None


def earliest_commit_to_retain(timeline: Timeline, retention: Retention, now: datetime | None = None) -> Instant | None:
    """The oldest completed write whose state reads must still be able to see; ``None`` keeps everything."""
    writes = timeline.completed_writes()
    if retention.policy is CleanPolicy.KEEP_LATEST_COMMITS:
        return writes[-retention.commits] if len(writes) > retention.commits else None
    if retention.policy is CleanPolicy.KEEP_LATEST_BY_HOURS:
        cutoff = (now or datetime.now(UTC)) - timedelta(hours=retention.hours)
        recent = [i for i in writes if instant_to_datetime(i.timestamp) >= cutoff]
        return recent[0] if recent and recent[0] is not writes[0] else None
    return None


def _replaced_before(timeline: Timeline, earliest: Instant | None, everything: bool) -> set[tuple[str, str]]:
    """File groups replaced (by clustering or insert-overwrite) early enough that no retained read sees them."""
    replaced: set[tuple[str, str]] = set()
    for instant in timeline.completed_writes():
        if instant.action == REPLACE_COMMIT and (
            everything or (earliest is not None and instant.timestamp < earliest.timestamp)
        ):
            replaced |= timeline.commit_metadata(instant).replaced_file_ids()
    return replaced


def failed_writes(view: FileSystemView) -> list[tuple[str, str]]:
    """(instant time, path) of the data files of writes that will never complete.

    Their instant is neither completed nor pending, is not older than the
    active timeline (that would be archived, hence committed), and is older
    than the newest instant the timeline knows: a write begun after the
    timeline was read has a newer instant time, and is left alone.
    """
    timeline = view.timeline
    first, last = timeline.start, timeline.last_timestamp
    if first is None or last is None:
        return []
    known = {i.timestamp for i in timeline.completed_writes()} | {i.timestamp for i in timeline.pending()}

    def failed(ts: str) -> bool:
        return ts not in known and first <= ts < last

    found = []
    for group in view.groups.values():
        found += [(b.instant_time, b.path) for b in group.base_files if failed(b.instant_time)]
        found += [(lf.base_instant, lf.path) for lf in group.log_files if failed(lf.base_instant)]
    return found


def plan_clean(
    view: FileSystemView,
    retention: Retention,
    kept: frozenset[str] = frozenset(),
    now: datetime | None = None,
) -> CleanerPlan:
    """What a clean deletes now. ``kept`` holds paths a savepoint holds; they are never planned."""
    timeline = view.timeline
    latest = timeline.latest_completed_write()
    earliest = earliest_commit_to_retain(timeline, retention, now)
    completed = {i.timestamp for i in timeline.completed_writes()}
    first_active = timeline.start
    by_versions = retention.policy is CleanPolicy.KEEP_LATEST_FILE_VERSIONS
    replaced = _replaced_before(timeline, earliest, everything=by_versions)
    files: list[str] = [path for _, path in failed_writes(view)]

    def done(instant_time: str) -> bool:
        # an instant before the active timeline was archived, so it completed
        return instant_time in completed or (first_active is not None and instant_time < first_active)

    for key, group in view.groups.items():
        versions = sorted(
            (b for b in group.base_files if done(b.instant_time)),
            key=lambda b: b.instant_time,
            reverse=True,
        )
        if key in replaced:
            doomed = versions
        elif by_versions:
            doomed = versions[retention.file_versions :]
        elif earliest is None:
            doomed = []
        else:
            # keep every version from the earliest retained commit on, and the newest one before it,
            # which a read as of that commit sees (CleanPlanner.getLatestVersionBeforeCommit)
            doomed = [b for b in versions if b.instant_time < earliest.timestamp][1:]
        # a merge-on-read slice goes with its logs
        gone = {b.instant_time for b in doomed}
        files += [b.path for b in doomed if b.path not in kept]
        if group.log_files:
            # a slice older than every version kept its logs only (or lost its base to an earlier clean)
            older_gone = key in replaced or (
                len(versions) >= retention.file_versions
                if by_versions
                else earliest is not None and any(b.instant_time < earliest.timestamp for b in versions)
            )
            bases = [b.instant_time for b in reversed(versions)]
            logs = _logs_gone(view, group.log_files, bases, gone, older_gone, done)
            files += [path for path in logs if path not in kept]
    return CleanerPlan(
        retention.policy,
        earliest.timestamp if earliest else None,
        latest.timestamp if latest else "",
        tuple(sorted(set(files))),
    )


def _logs_gone(
    view: FileSystemView,
    logs: Sequence[LogFile],
    bases: list[str],
    gone: set[str],
    older_gone: bool,
    done: Callable[[str], bool],
) -> list[str]:
    """The logs of the slices a clean deletes (``gone``, or older than every base in ``bases`` when ``older_gone``).
    Version 8 names a log by the deltacommit that wrote it, and only a completed one (``done``) has a slice: a log
    still being written goes with nothing (a failed one goes as a failed write)."""
    named_by_writer = view.timeline.config.version >= 8
    out = []
    for lf in logs:
        if named_by_writer and not done(lf.base_instant):
            continue
        base = view.log_slice(lf, bases)
        if base in gone or (base is None and older_gone):
            out.append(lf.path)
    return out
