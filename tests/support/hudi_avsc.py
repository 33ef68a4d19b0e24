"""Reader schemas of Hudi's timeline records, written out from Apache Hudi's ``hudi-common/src/main/avro``
definitions (one per file named beside it), kept apart from laketide's own ``table/format/avro_models.py``
so that a test resolves what laketide writes against Hudi's schema, not against laketide's.

``java_decode`` reads an Avro container file with Java's Avro (the jar in the pyspark wheel), the
writer schema taken from the file and resolved against Hudi's reader schema, as Hudi's
``TimelineMetadataUtils.deserializeAvroMetadata`` does.
"""

from __future__ import annotations

import json

NS = "org.apache.hudi.avro.model"
STRINGS = {"type": "array", "items": "string"}
LONG_MAP = {"type": "map", "values": "long"}


def _record(name: str, fields: list[dict]) -> dict:
    return {"namespace": NS, "type": "record", "name": name, "fields": fields}


def _opt(name: str, t, default=None) -> dict:
    return {"name": name, "type": ["null", t], "default": default}


VERSION = {"name": "version", "type": ["int", "null"], "default": 1}

# Dependencies first: later schemas refer to these by name.
SCHEMAS: dict[str, dict] = {
    # HoodieInstantInfo.avsc
    "HoodieInstantInfo": _record(
        "HoodieInstantInfo", [{"name": "commitTime", "type": "string"}, {"name": "action", "type": "string"}]
    ),
    # HoodieCleanPartitionMetadata.avsc
    "HoodieCleanPartitionMetadata": _record(
        "HoodieCleanPartitionMetadata",
        [
            {"name": "partitionPath", "type": "string"},
            {"name": "policy", "type": "string"},
            {"name": "deletePathPatterns", "type": STRINGS},
            {"name": "successDeleteFiles", "type": STRINGS},
            {"name": "failedDeleteFiles", "type": STRINGS},
            _opt("isPartitionDeleted", "boolean"),
        ],
    ),
    # HoodieRollbackMetadata.avsc
    "HoodieRollbackMetadata": _record(
        "HoodieRollbackMetadata",
        [
            {"name": "startRollbackTime", "type": "string"},
            {"name": "timeTakenInMillis", "type": "long"},
            {"name": "totalFilesDeleted", "type": "int"},
            {"name": "commitsRollback", "type": STRINGS},
            {
                "name": "partitionMetadata",
                "type": {
                    "type": "map",
                    "values": _record(
                        "HoodieRollbackPartitionMetadata",
                        [
                            {"name": "partitionPath", "type": "string"},
                            {"name": "successDeleteFiles", "type": STRINGS},
                            {"name": "failedDeleteFiles", "type": STRINGS},
                            _opt("rollbackLogFiles", LONG_MAP),
                            _opt("writtenLogFiles", LONG_MAP),
                        ],
                    ),
                },
            },
            VERSION,
            {"name": "instantsRollback", "default": [], "type": {"type": "array", "items": f"{NS}.HoodieInstantInfo"}},
        ],
    ),
    # HoodieCleanerPlan.avsc
    "HoodieCleanerPlan": _record(
        "HoodieCleanerPlan",
        [
            _opt(
                "earliestInstantToRetain",
                _record(
                    "HoodieActionInstant", [{"name": n, "type": "string"} for n in ("timestamp", "action", "state")]
                ),
            ),
            {"name": "policy", "type": "string"},
            _opt("filesToBeDeletedPerPartition", {"type": "map", "values": STRINGS}),
            VERSION,
            _opt(
                "filePathsToBeDeletedPerPartition",
                {
                    "type": "map",
                    "values": {
                        "type": "array",
                        "items": _record(
                            "HoodieCleanFileInfo", [_opt("filePath", "string"), _opt("isBootstrapBaseFile", "boolean")]
                        ),
                    },
                },
            ),
            _opt("partitionsToBeDeleted", STRINGS),
        ],
    ),
    # HoodieCleanMetadata.avsc
    "HoodieCleanMetadata": _record(
        "HoodieCleanMetadata",
        [
            {"name": "policy", "type": "string", "default": ""},
            {"name": "startCleanTime", "type": "string"},
            {"name": "timeTakenInMillis", "type": "long"},
            {"name": "totalFilesDeleted", "type": "int"},
            {"name": "earliestCommitToRetain", "type": "string"},
            {"name": "lastCompletedCommitTimestamp", "type": "string", "default": ""},
            {"name": "partitionMetadata", "type": {"type": "map", "values": f"{NS}.HoodieCleanPartitionMetadata"}},
            VERSION,
            _opt("bootstrapPartitionMetadata", {"type": "map", "values": f"{NS}.HoodieCleanPartitionMetadata"}),
        ],
    ),
    # HoodieRollbackPlan.avsc
    "HoodieRollbackPlan": _record(
        "HoodieRollbackPlan",
        [
            _opt("instantToRollback", f"{NS}.HoodieInstantInfo"),
            _opt(
                "RollbackRequests",
                {
                    "type": "array",
                    "items": _record(
                        "HoodieRollbackRequest",
                        [
                            {"name": "partitionPath", "type": "string"},
                            _opt("fileId", "string"),
                            _opt("latestBaseInstant", "string"),
                            {"name": "filesToBeDeleted", "default": [], "type": STRINGS},
                            _opt("logBlocksToBeDeleted", LONG_MAP),
                        ],
                    ),
                },
            ),
            VERSION,
        ],
    ),
    # HoodieSavePointMetadata.avsc
    "HoodieSavepointMetadata": _record(
        "HoodieSavepointMetadata",
        [
            {"name": "savepointedBy", "type": "string"},
            {"name": "savepointedAt", "type": "long"},
            {"name": "comments", "type": "string"},
            {
                "name": "partitionMetadata",
                "type": {
                    "type": "map",
                    "values": _record(
                        "HoodieSavepointPartitionMetadata",
                        [{"name": "partitionPath", "type": "string"}, {"name": "savepointDataFile", "type": STRINGS}],
                    ),
                },
            },
        ],
    ),
    # HoodieRestorePlan.avsc
    "HoodieRestorePlan": _record(
        "HoodieRestorePlan",
        [
            {
                "name": "instantsToRollback",
                "default": [],
                "type": {"type": "array", "items": f"{NS}.HoodieInstantInfo"},
            },
            {"name": "version", "type": ["int", "null"], "default": 2},
            {"name": "savepointToRestoreTimestamp", "type": ["string", "null"], "default": None},
        ],
    ),
    # HoodieRestoreMetadata.avsc
    "HoodieRestoreMetadata": _record(
        "HoodieRestoreMetadata",
        [
            {"name": "startRestoreTime", "type": "string"},
            {"name": "timeTakenInMillis", "type": "long"},
            {"name": "instantsToRollback", "type": STRINGS},
            {
                "name": "hoodieRestoreMetadata",
                "type": {"type": "map", "values": {"type": "array", "items": ["null", f"{NS}.HoodieRollbackMetadata"]}},
            },
            VERSION,
            {
                "name": "restoreInstantInfo",
                "default": [],
                "type": {"type": "array", "items": f"{NS}.HoodieInstantInfo"},
            },
            _opt("extraMetadata", {"type": "map", "values": "string"}),
        ],
    ),
    # HoodieCompactionOperation.avsc (the file defines HoodieCompactionPlan)
    "HoodieCompactionPlan": _record(
        "HoodieCompactionPlan",
        [
            _opt(
                "operations",
                {
                    "type": "array",
                    "items": _record(
                        "HoodieCompactionOperation",
                        [
                            {"name": "baseInstantTime", "type": ["null", "string"]},
                            _opt("deltaFilePaths", STRINGS),
                            _opt("dataFilePath", "string"),
                            {"name": "fileId", "type": ["null", "string"]},
                            _opt("partitionPath", "string"),
                            _opt("metrics", {"type": "map", "values": "double"}),
                            _opt("externalDataFilePath", "string"),
                        ],
                    ),
                },
            ),
            _opt("extraMetadata", {"type": "map", "values": "string"}),
            VERSION,
        ],
    ),
}

# timeline file (action, state) -> the record it holds; pending rollbacks, savepoints and restores hold no record
RECORD_OF = {
    ("clean", "REQUESTED"): "HoodieCleanerPlan",
    ("clean", "INFLIGHT"): "HoodieCleanerPlan",
    ("clean", "COMPLETED"): "HoodieCleanMetadata",
    ("rollback", "REQUESTED"): "HoodieRollbackPlan",
    ("rollback", "COMPLETED"): "HoodieRollbackMetadata",
    ("savepoint", "COMPLETED"): "HoodieSavepointMetadata",
    ("restore", "REQUESTED"): "HoodieRestorePlan",
    ("restore", "COMPLETED"): "HoodieRestoreMetadata",
    ("compaction", "REQUESTED"): "HoodieCompactionPlan",
    ("compaction", "INFLIGHT"): "HoodieCompactionPlan",
}


def java_decode(spark, data: bytes, record: str) -> dict:
    """One record of an Avro container file, read by Java's Avro against Hudi's schema of ``record``."""
    jvm = spark._jvm
    parser = jvm.org.apache.avro.Schema.Parser()
    parsed = {name: parser.parse(json.dumps(schema)) for name, schema in SCHEMAS.items()}
    stream = jvm.org.apache.avro.file.SeekableByteArrayInput(bytearray(data))
    reader = jvm.org.apache.avro.file.DataFileReader(
        stream, jvm.org.apache.avro.generic.GenericDatumReader(parsed[record])
    )
    return json.loads(str(reader.next().toString()))
