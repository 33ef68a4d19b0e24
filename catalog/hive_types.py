"""A table's columns as a catalog declares them: Hive type names, as Hudi's ``HiveSchemaUtil`` maps the parquet
schema of the table (``hudi-sync/hudi-hive-sync/.../util/HiveSchemaUtil.java``: ``convertField``,
``createHiveStruct``, ``createHiveArray``, ``createHiveMap``, lower-cased by ``convertMapSchemaToHiveFieldSchema``),
and Spark's own JSON form of the schema, which Spark reads a data source table by
(``SparkDataSourceTableUtils.getSparkTableProperties``)."""

from __future__ import annotations

import json

import pyarrow as pa


def hive_type(dtype: pa.DataType, support_timestamp: bool = False) -> str:
    """The Hive type of a column Hudi stores as ``dtype``: the parquet type it is written as, then Hive's name for
    it. A timestamp is a ``bigint`` unless ``support_timestamp`` (Hudi's ``hoodie.datasource.hive_sync.
    support_timestamp``, off by default), as is a time of day (parquet INT64 without a Hive type)."""
    t = dtype
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        # INT_8, INT_16 and INT_32 are parquet INT32s, which Hive reads as int; UINT_32 and INT_64 are INT64s
        return "bigint" if t.bit_width == 64 or (t.bit_width == 32 and pa.types.is_unsigned_integer(t)) else "int"
    if pa.types.is_float32(t) or pa.types.is_float16(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if support_timestamp else "bigint"
    if pa.types.is_time(t):
        return "bigint" if t.bit_width == 64 else "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"array<{hive_type(t.value_type, support_timestamp)}>"
    if pa.types.is_map(t):
        return f"map<{hive_type(t.key_type, support_timestamp)},{hive_type(t.item_type, support_timestamp)}>"
    if pa.types.is_struct(t):
        fields = ",".join(f"{_nested_name(f.name)}:{hive_type(f.type, support_timestamp)}" for f in t)
        # Hive's struct type names cannot hold '-', which createHiveStruct replaces in the whole type
        return f"struct<{fields}>".replace("-", "_")
    raise ValueError(f"no Hive type for {dtype}")


def _nested_name(name: str) -> str:
    """A struct field's name as Hive takes it (``ColumnNameXLator.translateNestedColumn``: '$' is not allowed)."""
    return name.replace("$", "_dollar_")


def spark_type(dtype: pa.DataType) -> object:
    """``dtype`` in Spark's schema JSON (``DataType.json``): a name, or an object for nested and parameterised
    types."""
    t = dtype
    simple = [
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_int8, "byte"),
        (pa.types.is_int16, "short"),
        (pa.types.is_int32, "integer"),
        (pa.types.is_int64, "long"),
        (pa.types.is_float32, "float"),
        (pa.types.is_float64, "double"),
        (pa.types.is_date, "date"),
        (pa.types.is_string, "string"),
        (pa.types.is_large_string, "string"),
        (pa.types.is_binary, "binary"),
        (pa.types.is_large_binary, "binary"),
        (pa.types.is_fixed_size_binary, "binary"),
    ]
    for test, name in simple:
        if test(t):
            return name
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_time(t) or pa.types.is_unsigned_integer(t):
        return "long"
    if pa.types.is_dictionary(t):
        return spark_type(t.value_type)
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return {"type": "array", "elementType": spark_type(t.value_type), "containsNull": True}
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": spark_type(t.key_type),
            "valueType": spark_type(t.item_type),
            "valueContainsNull": True,
        }
    if pa.types.is_struct(t):
        return spark_struct(list(t))
    raise ValueError(f"no Spark type for {dtype}")


def spark_struct(fields: list[pa.Field]) -> dict:
    return {
        "type": "struct",
        "fields": [
            {"name": f.name, "type": spark_type(f.type), "nullable": f.nullable, "metadata": {}} for f in fields
        ],
    }


def spark_schema_json(schema: pa.Schema, partition_fields: list[str]) -> str:
    """The schema as Spark's JSON, the partition columns last, as ``AvroToSparkJson.convertToSparkSchemaJson``
    orders it for a data source table."""
    fields = [f for f in schema if f.name not in partition_fields]
    fields += [schema.field(name) for name in partition_fields if name in schema.names]
    return json.dumps(spark_struct(fields), separators=(",", ":"))
