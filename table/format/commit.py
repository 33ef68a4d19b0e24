"""Typed commit metadata: the body of a completed commit, deltacommit or replacecommit.

Field names follow Hudi's JSON (``HoodieCommitMetadata``/``HoodieWriteStat``),
so the same model reads Spark-written commits and writes ours.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

NULL_COMMIT = "null"

# extraMetadata keys
SCHEMA_KEY = "schema"
BATCH_ID_KEY = "laketide.batch.id"
WRITER_ID_KEY = "laketide.writer.id"
EPOCH_KEY = "laketide.lease.epoch"
# the newest batch id of every writer so far, as JSON: replay detection survives archival
BATCHES_KEY = "laketide.batches"
# set by writers that keep the state index: the other writers' commits on the active timeline it accounts for
INDEX_SEEN_KEY = "laketide.index.seen"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class WriteStat(_Model):
    """What one task wrote into one file of one file group."""

    file_id: str
    path: str | None = None
    partition_path: str | None = None
    prev_commit: str = NULL_COMMIT
    num_writes: int = 0
    num_inserts: int = 0
    num_update_writes: int = 0
    num_deletes: int = 0
    total_write_bytes: int = 0
    total_write_errors: int = 0
    file_size_in_bytes: int = 0
    base_file: str | None = None  # merge-on-read: the base file of the slice a log file was written on
    log_files: list[str] | None = None
    log_version: int | None = None
    log_offset: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data):
        # Hudi writes absent counters as null (JSON) or as the null branch of a union (Avro).
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class CommitMetadata(_Model):
    partition_to_write_stats: dict[str, list[WriteStat]] = Field(default_factory=dict)
    partition_to_replace_file_ids: dict[str, list[str]] = Field(default_factory=dict)
    compacted: bool = False
    extra_metadata: dict[str, str] = Field(default_factory=dict)
    operation_type: str | None = None

    @property
    def is_compaction(self) -> bool:
        """A completed compaction: laketide marks it ``compacted``; Apache Hudi's writer names its operation
        ``COMPACT``."""
        return self.compacted or self.operation_type == "COMPACT"

    def write_stats(self) -> list[WriteStat]:
        return [s for stats in self.partition_to_write_stats.values() for s in stats]

    def file_ids(self) -> set[tuple[str, str]]:
        """(partition, file id) of every file group this commit wrote."""
        return {(p, s.file_id) for p, stats in self.partition_to_write_stats.items() for s in stats if s.file_id}

    def replaced_file_ids(self) -> set[tuple[str, str]]:
        return {(p, f) for p, ids in self.partition_to_replace_file_ids.items() for f in ids}

    def totals(self) -> dict[str, int]:
        stats = self.write_stats()
        return {
            "files": len(stats),
            "writes": sum(s.num_writes for s in stats),
            "inserts": sum(s.num_inserts for s in stats),
            "updates": sum(s.num_update_writes for s in stats),
            "deletes": sum(s.num_deletes for s in stats),
            "bytes": sum(s.total_write_bytes for s in stats),
        }

    def to_json_bytes(self) -> bytes:
        body = self.model_dump(by_alias=True, exclude_none=True)
        if not self.partition_to_replace_file_ids:
            body.pop("partitionToReplaceFileIds", None)
        return json.dumps(body, indent=2).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> CommitMetadata:
        """Parse a v6 JSON body or a v8 Avro container file."""
        if data[:4] == b"Obj\x01":
            return cls._from_avro(data)
        if not data.strip():
            return cls()
        return cls.model_validate_json(data)

    @classmethod
    def _from_avro(cls, data: bytes) -> CommitMetadata:
        from laketide.table.format.avro_models import read_container

        return cls.from_avro_record(read_container(data))

    @classmethod
    def from_avro_record(cls, record: dict) -> CommitMetadata:
        """A ``HoodieCommitMetadata`` Avro record (a v8 commit, or an archived entry's), its null branches dropped."""
        stats = record.get("partitionToWriteStats") or {}
        return cls.model_validate(
            {
                **record,
                "partitionToWriteStats": {p: [s for s in (v or []) if s] for p, v in stats.items()},
                "extraMetadata": {k: v for k, v in (record.get("extraMetadata") or {}).items() if v is not None},
                "partitionToReplaceFileIds": record.get("partitionToReplaceFileIds") or {},
            }
        )


def requested_replace(operation: str, extra: dict[str, str]) -> bytes:
    """The body of a ``.replacecommit.requested`` that is not clustering: ``HoodieRequestedReplaceMetadata``
    naming the operation, as Hudi's ``SparkDeletePartitionCommitActionExecutor`` writes it."""
    from laketide.table.format.avro_models import write_container

    return write_container(
        "HoodieRequestedReplaceMetadata",
        {"operationType": operation, "clusteringPlan": None, "extraMetadata": extra, "version": 1},
    )
