"""What a Delta Lake log says about each file and the table (``delta_log``): the schema in Delta's (Spark's) JSON
form of the Arrow schema the parquet files store, the protocol that schema needs, and each file's statistics and
partition values, read from its parquet footer."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq

# Delta keeps string min/max stats to a prefix; shorter values are stored whole, longer ones left out
STRING_STATS_LIMIT = 32


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
