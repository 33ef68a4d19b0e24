"""A Delta Lake transaction log (``_delta_log/``) naming a table's parquet files.

The log is written the way the Delta protocol (PROTOCOL.md in delta-io/delta)
describes it: one JSON file of actions per version, ``{version:020}.json``,
written only if absent; a parquet checkpoint of the whole state every
``CHECKPOINT_INTERVAL`` versions with ``_last_checkpoint`` pointing at it.
Paths are relative to the table root, as Apache XTable writes them for Hudi
tables. Schemas are Delta's (Spark's) JSON form of the Arrow schema the
parquet files store; stats come from the parquet footers.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq

from laketide.table.io import FileIO

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = posixpath.join(LOG_DIR, "_last_checkpoint")
CHECKPOINT_INTERVAL = 10
# Delta keeps string min/max stats to a prefix; shorter values are stored whole, longer ones left out
STRING_STATS_LIMIT = 32
_VERSION_FILE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")


def commit_path(version: int) -> str:
    return posixpath.join(LOG_DIR, f"{version:020d}.json")


def checkpoint_path(version: int) -> str:
    return posixpath.join(LOG_DIR, f"{version:020d}.checkpoint.parquet")


# -- schema -------------------------------------------------------------------


def _delta_type(dtype: pa.DataType):
    simple = {
        pa.types.is_boolean: "boolean",
        pa.types.is_int8: "byte",
        pa.types.is_int16: "short",
        pa.types.is_int32: "integer",
        pa.types.is_int64: "long",
        pa.types.is_float32: "float",
        pa.types.is_float64: "double",
        pa.types.is_date32: "date",
        pa.types.is_string: "string",
        pa.types.is_large_string: "string",
        pa.types.is_binary: "binary",
        pa.types.is_large_binary: "binary",
        pa.types.is_fixed_size_binary: "binary",
    }
    for test, name in simple.items():
        if test(dtype):
            return name
    if pa.types.is_timestamp(dtype):
        return "timestamp" if dtype.tz else "timestamp_ntz"
    if pa.types.is_decimal(dtype):
        return f"decimal({dtype.precision},{dtype.scale})"
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return {
            "type": "array",
            "elementType": _delta_type(dtype.value_type),
            "containsNull": dtype.value_field.nullable,
        }
    if pa.types.is_map(dtype):
        return {
            "type": "map",
            "keyType": _delta_type(dtype.key_type),
            "valueType": _delta_type(dtype.item_type),
            "valueContainsNull": dtype.item_field.nullable,
        }
    if pa.types.is_struct(dtype):
        return {"type": "struct", "fields": [_delta_field(dtype.field(i)) for i in range(dtype.num_fields)]}
    raise ValueError(f"no Delta type for {dtype}")


def _delta_field(f: pa.Field) -> dict:
    return {"name": f.name, "type": _delta_type(f.type), "nullable": f.nullable, "metadata": {}}


def delta_schema(schema: pa.Schema) -> dict:
    return {"type": "struct", "fields": [_delta_field(f) for f in schema]}


def _has_ntz(dtype) -> bool:
    if dtype == "timestamp_ntz":
        return True
    if isinstance(dtype, dict):
        return any(
            _has_ntz(v) for v in (dtype.get("elementType"), dtype.get("keyType"), dtype.get("valueType")) if v
        ) or any(_has_ntz(f["type"]) for f in dtype.get("fields", []))
    return False


def protocol_for(schema: dict) -> dict:
    """Reader 1 / writer 2, unless a timestamp without time zone needs the ``timestampNtz`` table feature."""
    if _has_ntz(schema):
        return {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["timestampNtz"],
            "writerFeatures": ["timestampNtz"],
        }
    return {"minReaderVersion": 1, "minWriterVersion": 2}


# -- stats --------------------------------------------------------------------


def _stat_value(value, dtype: pa.DataType, upper: bool):
    """A parquet min or max as Delta's stats JSON holds it; None where it would not be exact."""
    if isinstance(value, bool) or value is None:
        return None
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return value if isinstance(value, str) and len(value) <= STRING_STATS_LIMIT else None
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, int) and (pa.types.is_integer(dtype)):
        return value
    if isinstance(value, datetime):
        # Delta stats hold milliseconds: the min rounds down and the max up, so both still bound the values
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        micros = value.microsecond % 1000
        if micros:
            value = value - timedelta(microseconds=micros) + (timedelta(milliseconds=1) if upper else timedelta(0))
        text = value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"
        return text + ("Z" if dtype.tz else "")
    if isinstance(value, date):
        return value.isoformat()
    return None


def column_statistics(metadata: pq.FileMetaData) -> dict[str, list]:
    """Each column's parquet statistics, one per row group, by its path in the schema."""
    by_name: dict[str, list] = {}
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            by_name.setdefault(column.path_in_schema, []).append(column.statistics)
    return by_name


def file_stats(metadata: pq.FileMetaData, schema: pa.Schema) -> dict:
    """numRecords, and minValues / maxValues / nullCount of the top-level primitive columns, from a parquet footer."""
    by_name = column_statistics(metadata)
    mins, maxes, nulls = {}, {}, {}
    for f in schema:
        if pa.types.is_nested(f.type) or f.name not in by_name:
            continue
        stats = by_name[f.name]
        if all(s is not None and s.has_null_count for s in stats):
            nulls[f.name] = sum(s.null_count for s in stats)
        if not stats or not all(s is not None and s.has_min_max for s in stats):
            continue
        low = _stat_value(min(s.min for s in stats), f.type, upper=False)
        high = _stat_value(max(s.max for s in stats), f.type, upper=True)
        if low is not None and high is not None:
            mins[f.name], maxes[f.name] = low, high
    return {"numRecords": metadata.num_rows, "minValues": mins, "maxValues": maxes, "nullCount": nulls}


def partition_value(metadata: pq.FileMetaData, column: str) -> str | None:
    """A file's value of a partition column, as Delta serializes partition values (null when the value is null)."""
    values = set()
    for stats in column_statistics(metadata).get(column, []):
        if stats is not None and stats.has_min_max:
            values |= {stats.min, stats.max}
    if not values:
        return None
    if len(values) > 1:
        raise ValueError(
            f"a base file holds more than one value of partition column {column!r}: {sorted(map(str, values))}"
        )
    value = values.pop()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        # with a time zone, ISO 8601 in UTC; without, Delta's plain form
        return (
            value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            if value.tzinfo
            else value.strftime("%Y-%m-%d %H:%M:%S.%f")
        )
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


# -- actions ------------------------------------------------------------------


def relative_uri(path: str) -> str:
    """A table-relative file path as the relative URI Delta's ``add.path`` holds."""
    return urllib.parse.quote(path, safe="/=:@!$&'()*+,;-._~")


@dataclass
class LogState:
    """The table as of one version: its live files, metadata and protocol, and the last commitInfo."""

    version: int = -1
    files: dict[str, dict] = field(default_factory=dict)  # add.path -> add action
    removed: dict[str, dict] = field(default_factory=dict)  # tombstones since the last checkpoint
    metadata: dict | None = None
    protocol: dict | None = None
    commit_info: dict | None = None

    def apply(self, version: int, actions: list[dict]) -> None:
        for action in actions:
            if "add" in action:
                self.files[action["add"]["path"]] = action["add"]
                self.removed.pop(action["add"]["path"], None)
            elif "remove" in action:
                self.files.pop(action["remove"]["path"], None)
                self.removed[action["remove"]["path"]] = action["remove"]
            elif "metaData" in action:
                self.metadata = action["metaData"]
            elif "protocol" in action:
                self.protocol = action["protocol"]
            elif "commitInfo" in action:
                self.commit_info = action["commitInfo"]
        self.version = version


def new_metadata(
    name: str, schema: dict, partition_columns: list[str], created_ms: int, table_id: str | None = None
) -> dict:
    return {
        "id": table_id or str(uuid.uuid4()),
        "name": name,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
        "partitionColumns": partition_columns,
        "configuration": {},
        "createdTime": created_ms,
    }


class DeltaLog:
    """Reads and appends the versions of one table's Delta log through ``FileIO``."""

    def __init__(self, io: FileIO):
        self.io = io

    def versions(self) -> list[int]:
        if not self.io.exists(LOG_DIR):
            return []
        found = (_VERSION_FILE.match(e.name) for e in self.io.list_dir(LOG_DIR) if not e.is_dir)
        return sorted(int(m.group(1)) for m in found if m)

    def read_version(self, version: int) -> list[dict]:
        return [json.loads(line) for line in self.io.read_text(commit_path(version)).splitlines() if line.strip()]

    def _last_checkpoint(self) -> int | None:
        if not self.io.is_file(LAST_CHECKPOINT):
            return None
        return int(json.loads(self.io.read_text(LAST_CHECKPOINT))["version"])

    def state(self) -> LogState:
        """The latest state: the last checkpoint, then every version after it."""
        state = LogState()
        start = self._last_checkpoint()
        if start is not None:
            state = self._read_checkpoint(start)
        for version in self.versions():
            if version > state.version:
                state.apply(version, self.read_version(version))
        return state

    def write_version(self, version: int, actions: list[dict]) -> None:
        """Append one version; it fails if the version exists (Delta's mutual exclusion on commit files)."""
        body = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
        self.io.write_atomic(commit_path(version), body.encode(), overwrite=False)

    # -- checkpoints --------------------------------------------------------

    def write_checkpoint(self, state: LogState) -> None:
        rows = [{"protocol": state.protocol}, {"metaData": _checkpoint_metadata(state.metadata)}]
        rows += [{"add": _checkpoint_add(a)} for a in state.files.values()]
        rows += [{"remove": _checkpoint_remove(r)} for r in state.removed.values()]
        table = pa.Table.from_pylist(rows, schema=_checkpoint_schema(state.protocol))
        with self.io.open_output(checkpoint_path(state.version)) as out:
            pq.write_table(table, out)
        self.io.write_atomic(
            LAST_CHECKPOINT, json.dumps({"version": state.version, "size": len(rows)}).encode(), overwrite=True
        )

    def _read_checkpoint(self, version: int) -> LogState:
        with self.io.open_input(checkpoint_path(version)) as f:
            rows = pq.read_table(f).to_pylist()
        state = LogState(version=version)
        for row in rows:
            if row.get("add"):
                add = {k: v for k, v in row["add"].items() if v is not None}
                add["partitionValues"] = dict(add.get("partitionValues") or [])
                state.files[add["path"]] = add
            elif row.get("remove"):
                remove = {k: v for k, v in row["remove"].items() if v is not None}
                remove["partitionValues"] = dict(remove.get("partitionValues") or [])
                state.removed[remove["path"]] = remove
            elif row.get("metaData"):
                meta = dict(row["metaData"])
                meta["format"] = {
                    "provider": meta["format"]["provider"],
                    "options": dict(meta["format"].get("options") or []),
                }
                meta["configuration"] = dict(meta.get("configuration") or [])
                state.metadata = meta
            elif row.get("protocol"):
                state.protocol = {k: v for k, v in row["protocol"].items() if v is not None}
        return state

    def delete_before(self, version: int) -> int:
        """Delete the commit and checkpoint files of versions below ``version`` (a checkpoint's): the log's
        retention."""
        deleted = 0
        for entry in self.io.list_dir(LOG_DIR):
            m = _VERSION_FILE.match(entry.name) or _CHECKPOINT_FILE.match(entry.name)
            if m and int(m.group(1)) < version:
                deleted += self.io.delete(entry.path)
        return deleted


_MAP = pa.map_(pa.string(), pa.string())


def _checkpoint_schema(protocol: dict | None) -> pa.Schema:
    protocol_fields = [pa.field("minReaderVersion", pa.int32()), pa.field("minWriterVersion", pa.int32())]
    if protocol and "readerFeatures" in protocol:
        protocol_fields += [
            pa.field("readerFeatures", pa.list_(pa.string())),
            pa.field("writerFeatures", pa.list_(pa.string())),
        ]
    return pa.schema(
        [
            pa.field("protocol", pa.struct(protocol_fields)),
            pa.field(
                "metaData",
                pa.struct(
                    [
                        pa.field("id", pa.string()),
                        pa.field("name", pa.string()),
                        pa.field("description", pa.string()),
                        pa.field("format", pa.struct([pa.field("provider", pa.string()), pa.field("options", _MAP)])),
                        pa.field("schemaString", pa.string()),
                        pa.field("partitionColumns", pa.list_(pa.string())),
                        pa.field("configuration", _MAP),
                        pa.field("createdTime", pa.int64()),
                    ]
                ),
            ),
            pa.field(
                "add",
                pa.struct(
                    [
                        pa.field("path", pa.string()),
                        pa.field("partitionValues", _MAP),
                        pa.field("size", pa.int64()),
                        pa.field("modificationTime", pa.int64()),
                        pa.field("dataChange", pa.bool_()),
                        pa.field("stats", pa.string()),
                    ]
                ),
            ),
            pa.field(
                "remove",
                pa.struct(
                    [
                        pa.field("path", pa.string()),
                        pa.field("deletionTimestamp", pa.int64()),
                        pa.field("dataChange", pa.bool_()),
                        pa.field("extendedFileMetadata", pa.bool_()),
                        pa.field("partitionValues", _MAP),
                        pa.field("size", pa.int64()),
                    ]
                ),
            ),
        ]
    )


def _pairs(mapping: dict | None) -> list[tuple[str, str | None]]:
    return list((mapping or {}).items())


def _checkpoint_metadata(meta: dict) -> dict:
    return {
        **meta,
        "format": {**meta["format"], "options": _pairs(meta["format"].get("options"))},
        "configuration": _pairs(meta.get("configuration")),
    }


def _checkpoint_add(add: dict) -> dict:
    return {**add, "partitionValues": _pairs(add.get("partitionValues"))}


def _checkpoint_remove(remove: dict) -> dict:
    return {**remove, "partitionValues": _pairs(remove.get("partitionValues"))}
