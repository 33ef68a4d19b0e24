"""What a Kafka Connect schema says of a column: its Connect type and semantic name (Debezium's logical types),
the type a JSON parser reads its value as, and the type a table stores it as."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

CONNECT = "org.apache.kafka.connect.data."
TIME = "io.debezium.time."
DECIMAL = CONNECT + "Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
DAYS = {TIME + "Date", CONNECT + "Date"}
EPOCH_UNITS = {
    TIME + "Timestamp": "ms",
    CONNECT + "Timestamp": "ms",
    TIME + "MicroTimestamp": "us",
    TIME + "NanoTimestamp": "ns",
}
DAY_UNITS = {TIME + "Time": "ms", CONNECT + "Time": "ms", TIME + "MicroTime": "us", TIME + "NanoTime": "ns"}
ISO_TIMESTAMPS = {TIME + "ZonedTimestamp", TIME + "IsoTimestamp"}
ISO_DATES = {TIME + "IsoDate"}
ISO_TIMES = {TIME + "ZonedTime", TIME + "IsoTime"}
INTEGERS = {"int8", "int16", "int32", "int64"}
# the JSON converter names Connect's FLOAT32 and FLOAT64 "float" and "double" (JsonSchema)
FLOATS = {"float", "double", "float32", "float64"}


@dataclass(frozen=True)
class Encoding:
    """One value as a Connect schema describes it: its Connect type, semantic name, a Decimal's scale,
    an array's items and a struct's fields."""

    type: str
    name: str | None = None
    scale: int | None = None
    precision: int | None = None  # a Decimal's connect.decimal.precision, when the connector gives it
    items: Encoding | None = None
    fields: tuple[tuple[str, Encoding], ...] = ()

    @classmethod
    def of(cls, schema: dict) -> Encoding:
        """From one field of a Connect schema as the JSON converter writes it."""
        parameters = schema.get("parameters") or {}
        scale, precision = parameters.get("scale"), parameters.get("connect.decimal.precision")
        items = schema.get("items")
        return cls(
            type=schema.get("type") or "",
            name=schema.get("name"),
            scale=int(scale) if scale is not None else None,
            precision=int(precision) if precision is not None else None,
            items=cls.of(items) if isinstance(items, dict) else None,
            fields=tuple((f["field"], cls.of(f)) for f in schema.get("fields") or ()),
        )


def arrow_type(encoding: Encoding) -> pa.DataType | None:
    """The column type a value of ``encoding`` is stored as when the table takes its columns from the events,
    as Hudi's Spark writer stores Debezium's: temporal names as dates and UTC timestamps, times of day as
    microseconds, a Decimal at its precision and scale; ``None`` for what has no such type (a map)."""
    name, kind = encoding.name or "", encoding.type
    if name in DAYS or name in ISO_DATES:
        return pa.date32()
    if name in EPOCH_UNITS or name in ISO_TIMESTAMPS:
        return pa.timestamp("us", "UTC")
    if name in DAY_UNITS:
        return pa.int64()
    if name == DECIMAL:
        precision = int(encoding.precision or 38)
        return pa.decimal128(max(precision, encoding.scale or 0), encoding.scale or 0)
    if name == VARIABLE_DECIMAL:
        return pa.string()  # its scale differs by row: kept exactly, as text
    simple = {
        "int8": pa.int32(),
        "int16": pa.int32(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float": pa.float32(),
        "float32": pa.float32(),
        "double": pa.float64(),
        "float64": pa.float64(),
        "boolean": pa.bool_(),
        "string": pa.string(),
        "bytes": pa.binary(),
    }
    if kind in simple:
        return simple[kind]
    if kind == "array" and encoding.items is not None:
        item = arrow_type(encoding.items)
        return pa.list_(item) if item is not None else None
    if kind == "struct" and encoding.fields:
        fields = [(field_name, arrow_type(e)) for field_name, e in encoding.fields]
        return pa.struct(fields) if all(t is not None for _, t in fields) else None
    return None


def wire_type(encoding: Encoding) -> pa.DataType | None:
    """The Arrow type a JSON parser reads a value of ``encoding`` as; ``None`` for what has no JSON form here."""
    kind = encoding.type
    if kind in INTEGERS:
        return pa.int64()
    if kind in FLOATS:
        # the JSON converter writes NaN and the infinities as strings: such a column is read as text
        return pa.float64()
    if kind == "boolean":
        return pa.bool_()
    if kind in ("string", "bytes"):
        return pa.string()
    if kind == "array" and encoding.items is not None:
        item = wire_type(encoding.items)
        return pa.list_(item) if item is not None else None
    if kind == "struct":
        fields = [(name, wire_type(e)) for name, e in encoding.fields]
        return pa.struct(fields) if all(t is not None for _, t in fields) else None
    return None
