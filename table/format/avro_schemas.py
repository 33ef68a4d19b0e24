"""Apache Hudi's Avro metadata schemas, transcribed from ``hudi-common/src/main/avro/<name>.avsc`` in
Apache Hudi (the file name is given beside each one). Records refer to each other by name, as the
``.avsc`` files do; ``avro_models`` resolves them."""

from __future__ import annotations

NAMESPACE = "org.apache.hudi.avro.model"


def _null(t) -> list:
    return ["null", t]


def _optional(name: str, t, default=None) -> dict:
    return {"name": name, "type": _null(t), "default": default}


def _version(default: int = 1) -> dict:
    return {"name": "version", "type": ["int", "null"], "default": default}


_STRINGS = {"type": "array", "items": "string"}
_STRING_MAP = {"type": "map", "values": "string"}
_LONG_MAP = {"type": "map", "values": "long"}
_DOUBLE_MAP = {"type": "map", "values": "double"}


# The branches of an ordering value, in union order (``HoodieAvroUtils.wrapValueIntoAvro``).
_WRAPPED = [
    ("Boolean", "boolean"),
    ("Int", "int"),
    ("Long", "long"),
    ("Float", "float"),
    ("Double", "double"),
    ("Bytes", "bytes"),
    ("String", "string"),
    ("Date", "int"),
    ("Decimal", {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}),
    ("TimeMicros", {"type": "long", "logicalType": "time-micros"}),
    ("TimestampMicros", "long"),
]


def _record(name: str, fields: list[dict]) -> dict:
    return {"type": "record", "name": name, "namespace": NAMESPACE, "fields": fields}


_DEFINITIONS: list[dict] = [
    # HoodieCleanerPlan.avsc
    _record(
        "HoodieActionInstant",
        [
            {"name": "timestamp", "type": "string"},
            {"name": "action", "type": "string"},
            {"name": "state", "type": "string"},
        ],
    ),
    _record("HoodieCleanFileInfo", [_optional("filePath", "string"), _optional("isBootstrapBaseFile", "boolean")]),
    _record(
        "HoodieCleanerPlan",
        [
            _optional("earliestInstantToRetain", "HoodieActionInstant"),
            {"name": "lastCompletedCommitTimestamp", "type": "string", "default": ""},
            {"name": "policy", "type": "string"},
            _optional("filesToBeDeletedPerPartition", {"type": "map", "values": _STRINGS}),
            _version(),
            _optional(
                "filePathsToBeDeletedPerPartition",
                {"type": "map", "values": {"type": "array", "items": "HoodieCleanFileInfo"}},
            ),
            _optional("partitionsToBeDeleted", _STRINGS),
            _optional("extraMetadata", _STRING_MAP),
        ],
    ),
    # HoodieCleanPartitionMetadata.avsc, HoodieCleanMetadata.avsc
    _record(
        "HoodieCleanPartitionMetadata",
        [
            {"name": "partitionPath", "type": "string"},
            {"name": "policy", "type": "string"},
            {"name": "deletePathPatterns", "type": _STRINGS},
            {"name": "successDeleteFiles", "type": _STRINGS},
            {"name": "failedDeleteFiles", "type": _STRINGS},
            _optional("isPartitionDeleted", "boolean"),
        ],
    ),
    _record(
        "HoodieCleanMetadata",
        [
            {"name": "startCleanTime", "type": "string"},
            {"name": "timeTakenInMillis", "type": "long"},
            {"name": "totalFilesDeleted", "type": "int"},
            {"name": "earliestCommitToRetain", "type": "string"},
            {"name": "lastCompletedCommitTimestamp", "type": "string", "default": ""},
            {"name": "partitionMetadata", "type": {"type": "map", "values": "HoodieCleanPartitionMetadata"}},
            _version(),
            _optional("bootstrapPartitionMetadata", {"type": "map", "values": "HoodieCleanPartitionMetadata"}),
            _optional("extraMetadata", _STRING_MAP),
        ],
    ),
    # HoodieInstantInfo.avsc, HoodieRollbackPlan.avsc, HoodieRollbackMetadata.avsc
    _record("HoodieInstantInfo", [{"name": "commitTime", "type": "string"}, {"name": "action", "type": "string"}]),
    _record(
        "HoodieRollbackRequest",
        [
            {"name": "partitionPath", "type": "string"},
            _optional("fileId", "string"),
            _optional("latestBaseInstant", "string"),
            {"name": "filesToBeDeleted", "type": _STRINGS, "default": []},
            _optional("logBlocksToBeDeleted", _LONG_MAP),
        ],
    ),
    _record(
        "HoodieRollbackPlan",
        [
            _optional("instantToRollback", "HoodieInstantInfo"),
            _optional("RollbackRequests", {"type": "array", "items": "HoodieRollbackRequest"}),
            _version(),
        ],
    ),
    _record(
        "HoodieRollbackPartitionMetadata",
        [
            {"name": "partitionPath", "type": "string"},
            {"name": "successDeleteFiles", "type": _STRINGS},
            {"name": "failedDeleteFiles", "type": _STRINGS},
            _optional("rollbackLogFiles", _LONG_MAP),
            _optional("writtenLogFiles", _LONG_MAP),
        ],
    ),
    _record(
        "HoodieRollbackMetadata",
        [
            {"name": "startRollbackTime", "type": "string"},
            {"name": "timeTakenInMillis", "type": "long"},
            {"name": "totalFilesDeleted", "type": "int"},
            {"name": "commitsRollback", "type": _STRINGS},
            {"name": "partitionMetadata", "type": {"type": "map", "values": "HoodieRollbackPartitionMetadata"}},
            _version(),
            {"name": "instantsRollback", "type": {"type": "array", "items": "HoodieInstantInfo"}, "default": []},
        ],
    ),
    # HoodieDeleteRecordList.avsc, with the value wrappers of Hudi 0.14/0.15 in its orderingVal union
    *[_record(f"{kind}Wrapper", [{"name": "value", "type": t}]) for kind, t in _WRAPPED],
    _record(
        "HoodieDeleteRecord",
        [
            _optional("recordKey", "string"),
            _optional("partitionPath", "string"),
            {"name": "orderingVal", "type": ["null", *[f"{kind}Wrapper" for kind, _ in _WRAPPED]], "default": None},
        ],
    ),
    _record(
        "HoodieDeleteRecordList",
        [{"name": "deleteRecordList", "type": {"type": "array", "items": "HoodieDeleteRecord"}}],
    ),
    # HoodieCommitMetadata.avsc (HoodieWriteStat is defined inside it)
    _record(
        "HoodieWriteStat",
        [
            _optional(name, t)
            for name, t in [
                ("fileId", "string"),
                ("path", "string"),
                ("prevCommit", "string"),
                ("prevFilePathOverwritten", "string"),
                ("numWrites", "long"),
                ("numDeletes", "long"),
                ("numUpdateWrites", "long"),
                ("totalWriteBytes", "long"),
                ("totalWriteErrors", "long"),
                ("partitionPath", "string"),
                ("totalLogRecords", "long"),
                ("totalLogFiles", "long"),
                ("totalUpdatedRecordsCompacted", "long"),
                ("numInserts", "long"),
                ("totalLogBlocks", "long"),
                ("totalCorruptLogBlock", "long"),
                ("totalRollbackBlocks", "long"),
                ("fileSizeInBytes", "long"),
            ]
        ],
    ),
    _record(
        "HoodieCommitMetadata",
        [
            _optional(
                "partitionToWriteStats", {"type": "map", "values": {"type": "array", "items": "HoodieWriteStat"}}
            ),
            _optional("extraMetadata", _STRING_MAP),
            _version(),
            _optional("operationType", "string"),
        ],
    ),
    # HoodieReplaceCommitMetadata.avsc
    _record(
        "HoodieReplaceCommitMetadata",
        [
            _optional(
                "partitionToWriteStats", {"type": "map", "values": {"type": "array", "items": "HoodieWriteStat"}}
            ),
            _optional("extraMetadata", _STRING_MAP),
            _version(),
            _optional("operationType", "string"),
            _optional("partitionToReplaceFileIds", {"type": "map", "values": _STRINGS}),
        ],
    ),
    # HoodieCompactionMetadata.avsc (no defaults there)
    _record(
        "HoodieCompactionWriteStat",
        [
            {"name": "partitionPath", "type": _null("string")},
            {"name": "totalLogRecords", "type": _null("long")},
            {"name": "totalLogFiles", "type": _null("long")},
            {"name": "totalUpdatedRecordsCompacted", "type": _null("long")},
            {"name": "hoodieWriteStat", "type": _null("HoodieWriteStat")},
        ],
    ),
    _record(
        "HoodieCompactionMetadata",
        [
            {
                "name": "partitionToCompactionWriteStats",
                "type": _null({"type": "map", "values": {"type": "array", "items": "HoodieCompactionWriteStat"}}),
            }
        ],
    ),
    # HoodieCompactionOperation.avsc (defines HoodieCompactionPlan)
    _record(
        "HoodieCompactionOperation",
        [
            {"name": "baseInstantTime", "type": _null("string")},
            _optional("deltaFilePaths", _STRINGS),
            _optional("dataFilePath", "string"),
            {"name": "fileId", "type": _null("string")},
            _optional("partitionPath", "string"),
            _optional("metrics", _DOUBLE_MAP),
            _optional("externalDataFilePath", "string"),
        ],
    ),
    _record(
        "HoodieCompactionPlan",
        [
            _optional("operations", {"type": "array", "items": "HoodieCompactionOperation"}),
            _optional("extraMetadata", _STRING_MAP),
            _version(),
        ],
    ),
    # HoodieSliceInfo.avsc, HoodieClusteringGroup.avsc, HoodieClusteringStrategy.avsc,
    # HoodieClusteringPlan.avsc, HoodieRequestedReplaceMetadata.avsc
    _record(
        "HoodieSliceInfo",
        [
            _optional("dataFilePath", "string"),
            _optional("deltaFilePaths", _STRINGS),
            {"name": "fileId", "type": _null("string")},
            _optional("partitionPath", "string"),
            _optional("bootstrapFilePath", "string"),
            _version(),
        ],
    ),
    _record(
        "HoodieClusteringGroup",
        [
            _optional("slices", {"type": "array", "items": "HoodieSliceInfo"}),
            _optional("metrics", _DOUBLE_MAP),
            {"name": "numOutputFileGroups", "type": ["int", "null"], "default": 1},
            _version(),
        ],
    ),
    _record(
        "HoodieClusteringStrategy",
        [_optional("strategyClassName", "string"), _optional("strategyParams", _STRING_MAP), _version()],
    ),
    _record(
        "HoodieClusteringPlan",
        [
            _optional("inputGroups", {"type": "array", "items": "HoodieClusteringGroup"}),
            {"name": "strategy", "type": ["HoodieClusteringStrategy", "null"], "default": None},
            _optional("extraMetadata", _STRING_MAP),
            _version(),
        ],
    ),
    _record(
        "HoodieRequestedReplaceMetadata",
        [
            {"name": "operationType", "type": _null("string"), "default": ""},
            {"name": "clusteringPlan", "type": ["HoodieClusteringPlan", "null"], "default": None},
            _optional("extraMetadata", _STRING_MAP),
            _version(),
        ],
    ),
    # HoodieSavePointMetadata.avsc
    _record(
        "HoodieSavepointPartitionMetadata",
        [{"name": "partitionPath", "type": "string"}, {"name": "savepointDataFile", "type": _STRINGS}],
    ),
    _record(
        "HoodieSavepointMetadata",
        [
            {"name": "savepointedBy", "type": "string"},
            {"name": "savepointedAt", "type": "long"},
            {"name": "comments", "type": "string"},
            {"name": "partitionMetadata", "type": {"type": "map", "values": "HoodieSavepointPartitionMetadata"}},
        ],
    ),
    # HoodieRestorePlan.avsc, HoodieRestoreMetadata.avsc
    _record(
        "HoodieRestorePlan",
        [
            {"name": "instantsToRollback", "type": {"type": "array", "items": "HoodieInstantInfo"}, "default": []},
            _version(2),
            {"name": "savepointToRestoreTimestamp", "type": ["string", "null"], "default": None},
        ],
    ),
    _record(
        "HoodieRestoreMetadata",
        [
            {"name": "startRestoreTime", "type": "string"},
            {"name": "timeTakenInMillis", "type": "long"},
            {"name": "instantsToRollback", "type": _STRINGS},
            {
                "name": "hoodieRestoreMetadata",
                "type": {"type": "map", "values": {"type": "array", "items": _null("HoodieRollbackMetadata")}},
            },
            _version(),
            {"name": "restoreInstantInfo", "type": {"type": "array", "items": "HoodieInstantInfo"}, "default": []},
            _optional("extraMetadata", _STRING_MAP),
        ],
    ),
    # HoodieArchivedMetaEntry.avsc
    _record(
        "HoodieArchivedMetaEntry",
        [
            _optional("hoodieCommitMetadata", "HoodieCommitMetadata"),
            _optional("hoodieCleanMetadata", "HoodieCleanMetadata"),
            _optional("hoodieCompactionMetadata", "HoodieCompactionMetadata"),
            _optional("hoodieRollbackMetadata", "HoodieRollbackMetadata"),
            _optional("hoodieSavePointMetadata", "HoodieSavepointMetadata"),
            _optional("commitTime", "string"),
            _optional("actionType", "string"),
            _version(),
            _optional("hoodieCompactionPlan", "HoodieCompactionPlan"),
            _optional("hoodieCleanerPlan", "HoodieCleanerPlan"),
            _optional("actionState", "string"),
            _optional("hoodieReplaceCommitMetadata", "HoodieReplaceCommitMetadata"),
            _optional("hoodieRequestedReplaceMetadata", "HoodieRequestedReplaceMetadata"),
        ],
    ),
]

DEFINITIONS: dict[str, dict] = {d["name"]: d for d in _DEFINITIONS}
