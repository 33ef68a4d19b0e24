"""Rollback plan and rollback metadata, in the Avro form Hudi keeps on its timeline.

``<ts>.rollback.requested`` holds a ``HoodieRollbackPlan`` and ``<ts>.rollback``
a ``HoodieRollbackMetadata``, each one record in an Avro container file. Files
are named by absolute path in both, as Hudi's ``MarkerBasedRollbackStrategy``
plans them and ``BaseRollbackHelper.deleteFiles`` records them: a Hudi writer
that finishes a rollback resolves each one's partition against the base path.
In memory they are relative to the table, as everywhere else here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from laketide.table.format import avro_models
from laketide.table.format.files import absolute_path, table_relative


def _partition_of(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


@dataclass(frozen=True)
class RollbackPlan:
    """What rolling back ``target`` will delete. Written before anything is deleted."""

    target: str
    target_action: str
    files: tuple[str, ...]

    def to_bytes(self, base_uri: str) -> bytes:
        by_partition: dict[str, list[str]] = defaultdict(list)
        for path in self.files:
            by_partition[_partition_of(path)].append(absolute_path(base_uri, path))
        requests = [
            {
                "partitionPath": p,
                "fileId": None,
                "latestBaseInstant": self.target,
                "filesToBeDeleted": files,
                "logBlocksToBeDeleted": None,
            }
            for p, files in sorted(by_partition.items())
        ]
        record = {
            "instantToRollback": {"commitTime": self.target, "action": self.target_action},
            "RollbackRequests": requests,
            "version": 1,
        }
        return avro_models.write_container("HoodieRollbackPlan", record)

    @classmethod
    def from_bytes(cls, data: bytes, base_uri: str) -> RollbackPlan:
        record = avro_models.read_container(data)
        target = record["instantToRollback"]
        files = [
            table_relative(f, r["partitionPath"], base_uri)
            for r in record.get("RollbackRequests") or []
            for f in r["filesToBeDeleted"]
        ]
        return cls(target["commitTime"], target["action"], tuple(files))


@dataclass
class RollbackMetadata:
    start_time: str
    target: str
    target_action: str
    deleted: list[str] = field(default_factory=list)
    time_taken_ms: int = 0

    def to_bytes(self, base_uri: str) -> bytes:
        partitions: dict[str, list[str]] = defaultdict(list)
        for path in self.deleted:
            partitions[_partition_of(path)].append(absolute_path(base_uri, path))
        record = {
            "startRollbackTime": self.start_time,
            "timeTakenInMillis": self.time_taken_ms,
            "totalFilesDeleted": len(self.deleted),
            "commitsRollback": [self.target],
            "partitionMetadata": {
                p: {
                    "partitionPath": p,
                    "successDeleteFiles": files,
                    "failedDeleteFiles": [],
                    "rollbackLogFiles": None,
                    "writtenLogFiles": None,
                }
                for p, files in partitions.items()
            },
            "version": 1,
            "instantsRollback": [{"commitTime": self.target, "action": self.target_action}],
        }
        return avro_models.write_container("HoodieRollbackMetadata", record)

    @classmethod
    def from_bytes(cls, data: bytes, base_uri: str | None = None) -> RollbackMetadata:
        """``base_uri`` makes the deleted files relative to the table; without it they stay as written."""
        record = avro_models.read_container(data)
        info = (record.get("instantsRollback") or [{"commitTime": record["commitsRollback"][0], "action": "commit"}])[0]
        deleted = [
            f if base_uri is None else table_relative(f, pm["partitionPath"], base_uri)
            for pm in record["partitionMetadata"].values()
            for f in pm["successDeleteFiles"]
        ]
        return cls(
            record["startRollbackTime"], info["commitTime"], info["action"], deleted, record["timeTakenInMillis"]
        )
