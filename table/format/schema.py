"""Table schemas: Hudi's meta columns, the Avro schema Hudi keeps, and how a schema may change.

The Avro schema in each commit (``extraMetadata.schema``) is the table's schema.
It is made the way Apache Hudi's Spark writer makes it
(``org.apache.spark.sql.avro.SchemaConverters`` in hudi-spark-common, then
``AvroConversionUtils``: ``null`` first in every union, with a null default),
and the parquet files store exactly the Arrow types that schema maps back to
(``storage_schema``), so that every reader sees the same types in both places.
"""

from __future__ import annotations

import json
import re

import pyarrow as pa

from laketide.table.errors import LaketideError

COMMIT_TIME = "_hoodie_commit_time"
COMMIT_SEQNO = "_hoodie_commit_seqno"
RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
FILE_NAME = "_hoodie_file_name"
META_COLUMNS = (COMMIT_TIME, COMMIT_SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME)
IS_DELETED = "_hoodie_is_deleted"

META_SCHEMA = pa.schema([pa.field(c, pa.string()) for c in META_COLUMNS])
AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SchemaError(LaketideError, ValueError):
    """A schema laketide cannot store, or a change to the table's schema it cannot make."""


def data_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` without Hudi's meta columns and without the delete marker."""
    keep = [f for f in schema if f.name not in META_COLUMNS and f.name != IS_DELETED]
    return pa.schema(keep)


def with_meta_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(list(META_SCHEMA) + list(data_schema(schema)))


# -- Arrow -> Avro --------------------------------------------------------------


def _avro_type(dtype: pa.DataType, name: str, namespace: str):
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "string"
    if pa.types.is_boolean(dtype):
        return "boolean"
    if pa.types.is_int8(dtype) or pa.types.is_int16(dtype) or pa.types.is_int32(dtype):
        return "int"
    if pa.types.is_int64(dtype):
        return "long"
    if pa.types.is_float32(dtype):
        return "float"
    if pa.types.is_float64(dtype):
        return "double"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return "bytes"
    if pa.types.is_date32(dtype):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(dtype):
        # Spark's TimestampType is an instant (timestamp-micros); TimestampNTZType a wall-clock time.
        return {"type": "long", "logicalType": "timestamp-micros" if dtype.tz is not None else "local-timestamp-micros"}
    if pa.types.is_decimal(dtype):
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{namespace}.{name}",
            "size": _decimal_bytes(dtype.precision),
            "logicalType": "decimal",
            "precision": dtype.precision,
            "scale": dtype.scale,
        }
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        item = dtype.value_field
        # Hudi names a record inside an array after the array's field, in the same namespace.
        return {"type": "array", "items": _nullable(_avro_type(item.type, name, namespace), item.nullable)}
    if pa.types.is_map(dtype):
        if not (pa.types.is_string(dtype.key_type) or pa.types.is_large_string(dtype.key_type)):
            raise SchemaError(f"column {name!r} is a map with {dtype.key_type} keys; Hudi (Avro) maps have string keys")
        item = dtype.item_field
        return {"type": "map", "values": _nullable(_avro_type(item.type, name, namespace), item.nullable)}
    if pa.types.is_struct(dtype):
        return _record(list(dtype), name, namespace)
    raise SchemaError(f"column {name!r} has type {dtype}, which Hudi cannot store")


def _decimal_bytes(precision: int) -> int:
    """Spark's ``Decimal.minBytesForPrecision``."""
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
        if f.name in META_COLUMNS:
            entry["doc"] = ""
        if f.nullable:
            entry["default"] = None
        out.append(entry)
    return {"type": "record", "name": name, "namespace": namespace, "fields": out}


def avro_schema(schema: pa.Schema, table_name: str) -> dict:
    """The Avro record schema Hudi keeps for a table, ``<table>_record`` in ``hoodie.<table>``."""
    return _record(list(schema), f"{table_name}_record", f"hoodie.{table_name}")


def avro_schema_json(schema: pa.Schema, table_name: str) -> str:
    return json.dumps(avro_schema(schema, table_name), separators=(",", ":"))


# -- Avro -> Arrow --------------------------------------------------------------

_LOGICAL_LONG = {
    "timestamp-millis": pa.timestamp("ms", "UTC"),
    "timestamp-micros": pa.timestamp("us", "UTC"),
    "local-timestamp-millis": pa.timestamp("ms"),
    "local-timestamp-micros": pa.timestamp("us"),
}
_PRIMITIVE = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def _arrow_field(name: str, avro) -> pa.Field:
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise SchemaError(f"field {name!r}: Avro union {avro} has no Arrow equivalent")
        return _arrow_field(name, branches[0]).with_nullable(len(branches) < len(avro))
    return pa.field(name, _arrow_type(name, avro), nullable=False)


def _arrow_type(name: str, avro) -> pa.DataType:
    if isinstance(avro, str):
        if avro not in _PRIMITIVE:
            raise SchemaError(f"field {name!r}: Avro type {avro!r} is not supported")
        return _PRIMITIVE[avro]
    kind, logical = avro["type"], avro.get("logicalType")
    if isinstance(kind, (list, dict)):
        return _arrow_field(name, kind).type
    if logical == "decimal" and kind in ("fixed", "bytes"):
        precision, scale = int(avro["precision"]), int(avro.get("scale", 0))
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    if logical == "date" and kind == "int":
        return pa.date32()
    if kind == "long" and logical in _LOGICAL_LONG:
        return _LOGICAL_LONG[logical]
    if kind in ("enum", "string"):
        return pa.string()
    if kind == "fixed":
        return pa.binary(int(avro["size"]))
    if kind == "array":
        return pa.list_(_arrow_field("element", avro["items"]))
    if kind == "map":
        value = _arrow_field("value", avro["values"])
        return pa.map_(pa.string(), value)
    if kind == "record":
        return pa.struct([_arrow_field(f["name"], f["type"]) for f in avro["fields"]])
    return _arrow_type(name, kind)


def schema_from_avro(avro: str | dict) -> pa.Schema:
    """The Arrow schema of an Avro record schema (JSON text or parsed)."""
    record = json.loads(avro) if isinstance(avro, str) else avro
    return pa.schema([_arrow_field(f["name"], f["type"]) for f in record["fields"]])


def storage_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow types laketide writes for ``schema``: the ones its Avro schema maps back to.

    Tiny and small ints are stored as ints, every timestamp in microseconds
    (instants in UTC), as Hudi's Spark writer stores them.
    """
    return schema_from_avro(avro_schema(schema, "t"))


def check_avro_names(schema: pa.Schema) -> None:
    """Refuse names Avro does not allow, at any depth (Hudi's commit schema could not be parsed)."""

    def visit(fields, prefix: str) -> None:
        for f in fields:
            path = f"{prefix}{f.name}"
            if not AVRO_NAME.match(f.name):
                raise SchemaError(
                    f"column {path!r} is not a valid Avro name ([A-Za-z_][A-Za-z0-9_]*), which Hudi's schema needs; "
                    "rename it in the source (for example with an alias in source.schema)"
                )
            for child in _children(f.type):
                visit([child], f"{path}.")

    visit(list(schema), "")


def _children(dtype: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(dtype):
        return list(dtype)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return list(_children(dtype.value_type))
    if pa.types.is_map(dtype):
        return list(_children(dtype.item_type))
    return []


# -- schema evolution -------------------------------------------------------------


# Pairs whose wider type holds every value of the narrower one exactly.
_WIDENINGS = {
    frozenset({pa.int32(), pa.int64()}): pa.int64(),
    frozenset({pa.int32(), pa.float64()}): pa.float64(),
    frozenset({pa.float32(), pa.float64()}): pa.float64(),
}


def _widen_number(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both ``a`` and ``b`` widen to without loss, if there is one."""
    if pa.types.is_decimal(a) and pa.types.is_decimal(b):
        scale = max(a.scale, b.scale)
        digits = max(a.precision - a.scale, b.precision - b.scale)
        return pa.decimal128(digits + scale, scale) if digits + scale <= 38 else None
    return _WIDENINGS.get(frozenset({a, b}))


def _merge_field(path: str, current: pa.Field, incoming: pa.Field) -> pa.Field:
    return pa.field(current.name, _merge_type(path, current.type, incoming.type), current.nullable or incoming.nullable)


def _merge_type(path: str, current: pa.DataType, incoming: pa.DataType) -> pa.DataType:
    if current.equals(incoming):
        return current
    if pa.types.is_struct(current) and pa.types.is_struct(incoming):
        return pa.struct(_merge_fields(path + ".", list(current), list(incoming)))
    if pa.types.is_list(current) and pa.types.is_list(incoming):
        return pa.list_(_merge_field(path + ".element", current.value_field, incoming.value_field))
    if pa.types.is_map(current) and pa.types.is_map(incoming):
        return pa.map_(current.key_type, _merge_field(path + ".value", current.item_field, incoming.item_field))
    wider = _widen_number(current, incoming)
    if wider is None:
        raise SchemaError(
            f"column {path!r} is {current} in the table and {incoming} in the source; that change is not a widening "
            "laketide can make (int to bigint, int or float to double, decimal precision up). Nothing was written."
        )
    return wider


def _merge_fields(prefix: str, current: list[pa.Field], incoming: list[pa.Field]) -> list[pa.Field]:
    by_name = {f.name: f for f in incoming}
    merged = [
        _merge_field(prefix + f.name, f, by_name[f.name]) if f.name in by_name else f.with_nullable(True)
        for f in current
    ]
    known = {f.name for f in current}
    return merged + [f.with_nullable(True) for f in incoming if f.name not in known]


def evolve(current: pa.Schema | None, incoming: pa.Schema) -> pa.Schema:
    """The table schema after writing rows of ``incoming`` into a table of ``current``.

    New columns are added (nullable), missing ones kept, and a column whose
    type widened takes the wider type; nullability only ever loosens. Any
    other change raises ``SchemaError`` naming the column and both types.
    """
    incoming = storage_schema(data_schema(incoming))
    if current is None or len(current) == 0:
        return incoming
    return pa.schema(_merge_fields("", list(storage_schema(data_schema(current))), list(incoming)))
