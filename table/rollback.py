"""Rollback plan and rollback metadata, in the Avro form Hudi keeps on its timeline.

``<ts>.rollback.requested`` holds a ``HoodieRollbackPlan`` and ``<ts>.rollback``
a ``HoodieRollbackMetadata``, each one record in an Avro container file.
"""

from __future__ import annotations

import io
from collections import defaultdict
from dataclasses import dataclass, field

import fastavro

_INSTANT_INFO = {
    "type": "record",
    "name": "HoodieInstantInfo",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [{"name": "commitTime", "type": "string"}, {"name": "action", "type": "string"}],
}

PLAN_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "HoodieRollbackPlan",
        "namespace": "org.apache.hudi.avro.model",
        "fields": [
            {"name": "instantToRollback", "type": ["null", _INSTANT_INFO], "default": None},
            {
                "name": "RollbackRequests",
                "type": [
                    "null",
                    {
                        "type": "array",
                        "items": {
                            "type": "record",
                            "name": "HoodieRollbackRequest",
                            "fields": [
                                {"name": "partitionPath", "type": "string"},
                                {"name": "fileId", "type": ["null", "string"], "default": None},
                                {"name": "latestBaseInstant", "type": ["null", "string"], "default": None},
                                {"name": "filesToBeDeleted", "type": {"type": "array", "items": "string"}, "default": []},
                                {"name": "logBlocksToBeDeleted", "type": ["null", {"type": "map", "values": "long"}], "default": None},
                            ],
                        },
                    },
                ],
                "default": None,
            },
            {"name": "version", "type": ["int", "null"], "default": 1},
        ],
    }
)

METADATA_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "HoodieRollbackMetadata",
        "namespace": "org.apache.hudi.avro.model",
        "fields": [
            {"name": "startRollbackTime", "type": "string"},
            {"name": "timeTakenInMillis", "type": "long"},
            {"name": "totalFilesDeleted", "type": "int"},
            {"name": "commitsRollback", "type": {"type": "array", "items": "string"}},
            {
                "name": "partitionMetadata",
                "type": {
                    "type": "map",
                    "values": {
                        "type": "record",
                        "name": "HoodieRollbackPartitionMetadata",
                        "fields": [
                            {"name": "partitionPath", "type": "string"},
                            {"name": "successDeleteFiles", "type": {"type": "array", "items": "string"}},
                            {"name": "failedDeleteFiles", "type": {"type": "array", "items": "string"}},
                            {"name": "rollbackLogFiles", "type": ["null", {"type": "map", "values": "long"}], "default": None},
                            {"name": "writtenLogFiles", "type": ["null", {"type": "map", "values": "long"}], "default": None},
                        ],
                    },
                },
            },
            {"name": "version", "type": ["int", "null"], "default": 1},
            {"name": "instantsRollback", "type": {"type": "array", "items": _INSTANT_INFO}, "default": []},
        ],
    }
)


def _write(schema, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, schema, [record])
    return buf.getvalue()


def _read(data: bytes) -> dict:
    return next(iter(fastavro.reader(io.BytesIO(data))))


def _partition_of(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


@dataclass(frozen=True)
class RollbackPlan:
    """What rolling back ``target`` will delete. Written before anything is deleted."""

    target: str
    target_action: str
    files: tuple[str, ...]

    def to_bytes(self) -> bytes:
        by_partition: dict[str, list[str]] = defaultdict(list)
        for path in self.files:
            by_partition[_partition_of(path)].append(path)
        requests = [
            {"partitionPath": p, "fileId": None, "latestBaseInstant": self.target, "filesToBeDeleted": files, "logBlocksToBeDeleted": None}
            for p, files in sorted(by_partition.items())
        ]
        record = {
            "instantToRollback": {"commitTime": self.target, "action": self.target_action},
            "RollbackRequests": requests,
            "version": 1,
        }
        return _write(PLAN_SCHEMA, record)

    @classmethod
    def from_bytes(cls, data: bytes) -> RollbackPlan:
        record = _read(data)
        target = record["instantToRollback"]
        files = [f for r in record.get("RollbackRequests") or [] for f in r["filesToBeDeleted"]]
        return cls(target["commitTime"], target["action"], tuple(files))


@dataclass
class RollbackMetadata:
    start_time: str
    target: str
    target_action: str
    deleted: list[str] = field(default_factory=list)
    time_taken_ms: int = 0

    def to_bytes(self) -> bytes:
        partitions: dict[str, list[str]] = defaultdict(list)
        for path in self.deleted:
            partitions[_partition_of(path)].append(path)
        record = {
            "startRollbackTime": self.start_time,
            "timeTakenInMillis": self.time_taken_ms,
            "totalFilesDeleted": len(self.deleted),
            "commitsRollback": [self.target],
            "partitionMetadata": {
                p: {"partitionPath": p, "successDeleteFiles": files, "failedDeleteFiles": [], "rollbackLogFiles": None, "writtenLogFiles": None}
                for p, files in partitions.items()
            },
            "version": 1,
            "instantsRollback": [{"commitTime": self.target, "action": self.target_action}],
        }
        return _write(METADATA_SCHEMA, record)

    @classmethod
    def from_bytes(cls, data: bytes) -> RollbackMetadata:
        record = _read(data)
        info = (record.get("instantsRollback") or [{"commitTime": record["commitsRollback"][0], "action": "commit"}])[0]
        deleted = [f for pm in record["partitionMetadata"].values() for f in pm["successDeleteFiles"]]
        return cls(record["startRollbackTime"], info["commitTime"], info["action"], deleted, record["timeTakenInMillis"])
