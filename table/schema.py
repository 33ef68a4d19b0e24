"""Arrow schemas, Hudi's meta columns, and the Avro schema JSON Hudi stores with each commit."""

from __future__ import annotations

import json

import pyarrow as pa

COMMIT_TIME = "_hoodie_commit_time"
COMMIT_SEQNO = "_hoodie_commit_seqno"
RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
FILE_NAME = "_hoodie_file_name"
META_COLUMNS = (COMMIT_TIME, COMMIT_SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME)
IS_DELETED = "_hoodie_is_deleted"

META_SCHEMA = pa.schema([pa.field(c, pa.string()) for c in META_COLUMNS])


def data_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` without Hudi's meta columns and without the delete marker."""
    keep = [f for f in schema if f.name not in META_COLUMNS and f.name != IS_DELETED]
    return pa.schema(keep)


def with_meta_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(list(META_SCHEMA) + list(data_schema(schema)))


def _avro_type(dtype: pa.DataType, name: str, namespace: str):
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "string"
    if pa.types.is_boolean(dtype):
        return "boolean"
    if pa.types.is_int8(dtype) or pa.types.is_int16(dtype) or pa.types.is_int32(dtype) or pa.types.is_uint8(dtype) or pa.types.is_uint16(dtype):
        return "int"
    if pa.types.is_integer(dtype):
        return "long"
    if pa.types.is_float32(dtype):
        return "float"
    if pa.types.is_floating(dtype):
        return "double"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return "bytes"
    if pa.types.is_date(dtype):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(dtype):
        logical = "timestamp-millis" if dtype.unit in ("s", "ms") else "timestamp-micros"
        if dtype.tz is None:
            logical = logical.replace("timestamp", "local-timestamp")
        return {"type": "long", "logicalType": logical}
    if pa.types.is_decimal(dtype):
        size = _decimal_bytes(dtype.precision)
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{namespace}.{name}",
            "size": size,
            "logicalType": "decimal",
            "precision": dtype.precision,
            "scale": dtype.scale,
        }
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        item = dtype.value_field
        return {"type": "array", "items": _nullable(_avro_type(item.type, name, namespace), item.nullable)}
    if pa.types.is_map(dtype):
        item = dtype.item_field
        return {"type": "map", "values": _nullable(_avro_type(item.type, name, namespace), item.nullable)}
    if pa.types.is_struct(dtype):
        return _record(list(dtype), name, namespace)
    raise TypeError(f"column {name!r} has type {dtype}, which has no Avro equivalent in Hudi")


def _decimal_bytes(precision: int) -> int:
    size = 1
    while 10**precision > 2 ** (8 * size - 1):
        size += 1
    return size


def _nullable(avro, nullable: bool):
    return ["null", avro] if nullable else avro


def _record(fields: list[pa.Field], name: str, namespace: str) -> dict:
    inner = f"{namespace}.{name}"
    out = []
    for f in fields:
        entry = {"name": f.name, "type": _nullable(_avro_type(f.type, f.name, inner), f.nullable)}
        if f.nullable:
            entry["default"] = None
        out.append(entry)
    return {"type": "record", "name": name, "namespace": namespace, "fields": out}


def avro_schema(schema: pa.Schema, table_name: str) -> dict:
    """The Avro record schema Hudi keeps for a table, ``<table>_record`` in ``hoodie.<table>``."""
    return _record(list(schema), f"{table_name}_record", f"hoodie.{table_name}")


def avro_schema_json(schema: pa.Schema, table_name: str) -> str:
    return json.dumps(avro_schema(schema, table_name), separators=(",", ":"))
