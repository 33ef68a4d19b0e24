"""Commit metadata as a version 8 table holds it: one Avro record in a container file.

A version 6 table keeps a write's metadata as JSON (``CommitMetadata.to_json_bytes``). Hudi 1.x writes
``HoodieCommitMetadata`` (``HoodieReplaceCommitMetadata`` for a replacecommit) as Avro, with the 1.x form of
``HoodieWriteStat``: the fields of ``hudi-common/src/main/avro/HoodieCommitMetadata.avsc`` in Hudi 1.0, as
its Spark writer wrote them into the version 8 tables of hudi-rs's test data (``tests/fixtures/hudi-1x``:
``prevFilePathOverwritten`` is gone; ``logVersion`` to ``numUpdates`` and the ``compacted`` flag are new).
``CommitMetadata.from_bytes`` reads both forms.
"""

from __future__ import annotations

import io
from functools import cache

import fastavro

from laketide.table.format.avro_schemas import NAMESPACE
from laketide.table.format.commit import CommitMetadata

_STRING = {"type": "string", "avro.java.string": "String"}

# HoodieWriteStat of Hudi 1.0, in its field order
_WRITE_STAT_FIELDS = [
    ("fileId", _STRING),
    ("path", _STRING),
    ("prevCommit", _STRING),
    ("numWrites", "long"),
    ("numDeletes", "long"),
    ("numUpdateWrites", "long"),
    ("totalWriteBytes", "long"),
    ("totalWriteErrors", "long"),
    ("partitionPath", _STRING),
    ("totalLogRecords", "long"),
    ("totalLogFiles", "long"),
    ("totalUpdatedRecordsCompacted", "long"),
    ("numInserts", "long"),
    ("totalLogBlocks", "long"),
    ("totalCorruptLogBlock", "long"),
    ("totalRollbackBlocks", "long"),
    ("fileSizeInBytes", "long"),
    ("logVersion", "int"),
    ("logOffset", "long"),
    ("baseFile", _STRING),
    ("logFiles", {"type": "array", "items": _STRING, "default": None}),
    ("cdcStats", {"type": "map", "values": "long", "avro.java.string": "String", "default": None}),
    ("prevBaseFile", _STRING),
    ("minEventTime", "long"),
    ("maxEventTime", "long"),
    (
        "runtimeStats",
        {
            "type": "record",
            "name": "HoodieRuntimeStats",
            "namespace": NAMESPACE,
            "fields": [
                {"name": name, "type": ["null", "long"], "default": None}
                for name in ("totalScanTime", "totalCreateTime", "totalUpsertTime")
            ],
        },
    ),
    ("totalLogFilesCompacted", "long"),
    ("totalLogReadTimeMs", "long"),
    ("totalLogSizeCompacted", "long"),
    ("tempPath", _STRING),
    ("numUpdates", "long"),
]
WRITE_STAT_FIELDS = tuple(name for name, _ in _WRITE_STAT_FIELDS)


def _optional(name: str, kind) -> dict:
    return {"name": name, "type": ["null", kind], "default": None}


@cache
def commit_schema(replace: bool) -> dict:
    """``HoodieCommitMetadata`` (``HoodieReplaceCommitMetadata`` with ``replace``) as Hudi 1.0 writes it."""
    stat = {
        "type": "record",
        "name": "HoodieWriteStat",
        "namespace": NAMESPACE,
        "fields": [_optional(name, kind) for name, kind in _WRITE_STAT_FIELDS],
    }
    fields = [
        _optional("partitionToWriteStats", {"type": "map", "values": {"type": "array", "items": stat}}),
        _optional("compacted", "boolean"),
        _optional("extraMetadata", {"type": "map", "values": _STRING, "default": None}),
        {"name": "version", "type": ["int", "null"], "default": 1},
        _optional("operationType", _STRING),
    ]
    if replace:
        fields.append(
            _optional("partitionToReplaceFileIds", {"type": "map", "values": {"type": "array", "items": _STRING}})
        )
    name = "HoodieReplaceCommitMetadata" if replace else "HoodieCommitMetadata"
    return {"type": "record", "name": name, "namespace": NAMESPACE, "fields": fields}


@cache
def _parsed(replace: bool):
    return fastavro.parse_schema(commit_schema(replace))


def commit_record(
    metadata: CommitMetadata, replace: bool, stat_fields: tuple[str, ...] = WRITE_STAT_FIELDS, compacted: bool = True
) -> dict:
    """``metadata`` as an Avro record: Hudi 1.x's by default, every stat field present (null where laketide has no
    value); ``stat_fields`` and ``compacted`` give another form's (the archive of a version 6 table keeps 0.x's)."""
    stats = {
        partition: [_stat_record(stat.model_dump(by_alias=True, exclude_none=True), stat_fields) for stat in stats]
        for partition, stats in metadata.partition_to_write_stats.items()
    }
    record: dict = {
        "partitionToWriteStats": stats,
        "extraMetadata": metadata.extra_metadata,
        "version": 1,
        "operationType": metadata.operation_type,
    }
    if compacted:
        record["compacted"] = metadata.compacted
    if replace:
        record["partitionToReplaceFileIds"] = metadata.partition_to_replace_file_ids
    return record


def _stat_record(stat: dict, fields: tuple[str, ...]) -> dict:
    return {name: stat.get(name) for name in fields}


def commit_avro_bytes(metadata: CommitMetadata, replace: bool = False) -> bytes:
    """``metadata`` in an Avro container file, as a version 8 timeline holds a write's metadata."""
    buf = io.BytesIO()
    fastavro.writer(buf, _parsed(replace), [commit_record(metadata, replace)])
    return buf.getvalue()


def commit_bytes(metadata: CommitMetadata, version: int, replace: bool = False) -> bytes:
    """The body of a write's inflight or completed timeline file on a ``version`` table: JSON to 6, Avro from 8."""
    return commit_avro_bytes(metadata, replace) if version >= 8 else metadata.to_json_bytes()
