"""Debezium's Avro (Kafka Connect's AvroConverter) read as its JSON converter would have written it.

The writer's schema is the ``.avsc`` file ``source.avro_schema`` names. Kafka Connect keeps a column's Connect
type and semantic name in the Avro schema (``connect.type``, ``connect.name``, ``connect.parameters``; Confluent's
``AvroData.fromConnectSchema``), so the Connect schema of the envelope is derived from it once. Each datum is
read with fastavro without its Avro logical types (a Decimal's bytes, a date's days, as they are on the wire)
and handed on as ``{"schema": ..., "payload": ...}``, bytes in base64, as the JSON converter writes them: one
decoder (``change_events``), one set of rules, for both converters.
"""

from __future__ import annotations

import base64
import io
import json
import math

import pyarrow as pa
from laketide.table.errors import Invalid
from laketide.table.io import FileIO

# Avro's primitive types as Connect's (AvroData: an int carries connect.type int8 or int16 when it was one)
AVRO_TO_CONNECT = {"int": "int32", "long": "int64", "float": "float", "double": "double", "boolean": "boolean", "string": "string",
                   "bytes": "bytes", "fixed": "bytes", "enum": "string", "null": "null", "map": "map", "array": "array"}


def read_schema(path: str, io_options: dict[str, str] | None = None) -> dict:
    """The ``.avsc`` file, parsed and checked: a bad file stops the job at start, naming it."""
    import fastavro

    try:
        schema = json.loads(FileIO.for_uri(path, io_options or {}).read_text(""))
        fastavro.parse_schema(schema)
    except FileNotFoundError:
        raise Invalid(f"source.avro_schema = {path!r}: no such file") from None
    except (ValueError, fastavro.schema.SchemaParseException) as error:
        raise Invalid(f"source.avro_schema = {path!r} is not an Avro schema: {error}") from None
    return schema


class AvroChanges:
    """Change events of one Avro envelope schema, as the JSON converter's values. Holds only plain data, so
    Spark's tasks get it by pickling."""

    def __init__(self, schema: dict):
        import fastavro

        self._named: dict[str, dict] = {}
        self.connect = self._connect(schema, optional=False)
        if self.connect.get("type") != "struct" or not {"before", "after"} & {f["field"] for f in self.connect.get("fields", [])}:
            raise Invalid("source.avro_schema is not a Debezium change event's schema (a record with before, after, source and op)")
        self._schema_json = json.dumps(self.connect).encode()
        self.parsed = fastavro.parse_schema(_without_logical_types(schema))

    def row_columns(self) -> list[dict]:
        """The row's columns (``after``'s Connect fields), as ``change_events.row_schemas`` gives them."""
        images = {f["field"]: f for f in self.connect["fields"]}
        return (images.get("after") or images["before"]).get("fields", [])

    def as_json(self, payloads: pa.Array) -> tuple[pa.Array, list[str | None]]:
        """Each Avro datum (without Confluent's framing) as a JSON converter value; a null stays null (a
        tombstone); one that is not a datum of the schema gets an empty object and its reason."""
        import fastavro

        out: list[bytes | None] = []
        reasons: list[str | None] = []
        for payload in payloads.to_pylist():
            reason = None
            if payload is None:
                value = None
            else:
                try:
                    datum = fastavro.schemaless_reader(io.BytesIO(payload), self.parsed)
                    value = b'{"schema":' + self._schema_json + b',"payload":' + json.dumps(_jsonable(datum)).encode() + b"}"
                except Exception as error:  # fastavro raises what the bytes make it raise
                    value, reason = b"{}", f"the value is not Avro of source.avro_schema ({type(error).__name__}: {error})"
            out.append(value)
            reasons.append(reason)
        return pa.array(out, pa.binary()), reasons

    def _connect(self, avro, optional: bool) -> dict:
        """The Connect schema (as the JSON converter writes it) of an Avro type."""
        if isinstance(avro, list):
            kinds = [a for a in avro if a != "null"]
            # a union of several types is not what Connect writes for a column; read as text it goes to quarantine
            return self._connect(kinds[0] if len(kinds) == 1 else "string", optional=optional or "null" in avro)
        if isinstance(avro, str):
            if avro in self._named:
                return self._connect(self._named[avro], optional)
            return {"type": AVRO_TO_CONNECT.get(avro, avro), "optional": optional}
        kind = avro.get("type")
        if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind in self._named):
            return self._connect(kind, optional)
        if kind in ("record", "fixed", "enum") and "name" in avro:
            self._remember(avro)
        out: dict = {"type": avro.get("connect.type") or AVRO_TO_CONNECT.get(kind, kind), "optional": optional}
        if kind == "record":
            out["type"] = "struct"
            out["fields"] = [{**self._connect(f["type"], False), "field": f["name"]} for f in avro["fields"]]
        elif kind == "array":
            out["items"] = self._connect(avro["items"], False)
        if "connect.name" in avro:
            out["name"] = avro["connect.name"]
        parameters = dict(avro.get("connect.parameters") or {})
        if avro.get("logicalType") == "decimal":
            # Confluent's AvroData writes scale and precision both as Avro's and as Connect's parameters
            parameters.setdefault("scale", str(avro.get("scale", 0)))
            if avro.get("precision") is not None:
                parameters.setdefault("connect.decimal.precision", str(avro["precision"]))
            out.setdefault("name", "org.apache.kafka.connect.data.Decimal")
        if parameters:
            out["parameters"] = parameters
        return out

    def _remember(self, avro: dict) -> None:
        name, namespace = avro["name"], avro.get("namespace")
        self._named.setdefault(name, avro)
        if namespace and "." not in name:
            self._named.setdefault(f"{namespace}.{name}", avro)


def _without_logical_types(avro):
    """The schema with its logical types left out, so fastavro gives values as they are on the wire."""
    if isinstance(avro, list):
        return [_without_logical_types(a) for a in avro]
    if not isinstance(avro, dict):
        return avro
    out = {k: _without_logical_types(v) for k, v in avro.items() if k != "logicalType"}
    if "fields" in avro:
        out["fields"] = [{**f, "type": _without_logical_types(f["type"])} for f in avro["fields"]]
    return out


def _jsonable(value):
    """A datum as the JSON converter writes it: bytes in base64, NaN and infinities as text (Jackson's default)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")
    return value
