"""Debezium's Avro (Kafka Connect's AvroConverter) read as its JSON converter would have written it.

The writer's schema of a value is the schema registry's schema of the id in its Confluent framing
(``schema_registry``), else the ``.avsc`` file ``source.avro_schema`` names. Kafka Connect keeps a column's Connect
type and semantic name in the Avro schema (``connect.type``, ``connect.name``, ``connect.parameters``; Confluent's
``AvroData.fromConnectSchema``), so the Connect schema of the envelope is derived from it once. Each datum is
read with fastavro without its Avro logical types (a Decimal's bytes, a date's days, as they are on the wire)
and handed on as ``{"schema": ..., "payload": ...}``, bytes in base64, as the JSON converter writes them: one
decoder (``changes.events``), one set of rules, for both converters.
"""

from __future__ import annotations

import base64
import io
import json
import math

import pyarrow as pa

from laketide.table.errors import Invalid
from laketide.table.storage.io import FileIO
from laketide.writer.changes.schema_registry import SchemaRegistry, UnknownSchema, framing

# Avro's primitive types as Connect's (AvroData: an int carries connect.type int8 or int16 when it was one)
AVRO_TO_CONNECT = {
    "int": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "fixed": "bytes",
    "enum": "string",
    "null": "null",
    "map": "map",
    "array": "array",
}


def read_schema(path: str, io_options: dict[str, str] | None = None) -> dict:
    """The ``.avsc`` file, parsed and checked: a bad file stops the job at start, naming it."""
    import fastavro
    from fastavro.schema import SchemaParseException

    try:
        schema = json.loads(FileIO.for_uri(path, io_options or {}).read_text(""))
        fastavro.parse_schema(schema)
    except FileNotFoundError:
        raise Invalid(f"source.avro_schema = {path!r}: no such file") from None
    except (ValueError, SchemaParseException) as error:
        raise Invalid(f"source.avro_schema = {path!r} is not an Avro schema: {error}") from None
    return schema


class NotAChangeEvent(Invalid):
    """An Avro schema that is not a Debezium change event's."""


class AvroChanges:
    """Change events of one Avro envelope schema, as the JSON converter's values. Holds only plain data, so
    Spark's tasks get it by pickling."""

    def __init__(self, schema: dict):
        import fastavro

        self._named: dict[str, dict] = {}
        self.connect = self._connect(schema, optional=False)
        if self.connect.get("type") != "struct" or not {"before", "after"} & {
            f["field"] for f in self.connect.get("fields", [])
        }:
            raise NotAChangeEvent(
                "source.avro_schema is not a Debezium change event's schema (a record with before, after, "
                "source and op)"
            )
        self._schema_json = json.dumps(self.connect).encode()
        self.parsed = fastavro.parse_schema(_without_logical_types(schema))

    def row_columns(self) -> list[dict]:
        """The row's columns (``after``'s Connect fields), as ``changes.events.row_schemas`` gives them."""
        images = {f["field"]: f for f in self.connect["fields"]}
        return (images.get("after") or images["before"]).get("fields", [])

    def as_json(self, payload: bytes) -> bytes:
        """One Avro datum (without Confluent's framing) as a JSON converter value; raises ``ValueError``, with
        why, when it is not a datum of the schema."""
        import fastavro

        read = io.BytesIO(payload)
        try:
            datum = fastavro.schemaless_reader(read, self.parsed)
        except Exception as error:  # fastavro raises what the bytes make it raise
            raise ValueError(f"{type(error).__name__}: {error}") from None
        # Avro does not describe itself: a value written under another schema (a column added in the source)
        # may still read as some datum, but then seldom ends where the value does
        left = len(payload) - read.tell()
        if left:
            raise ValueError(f"{left} bytes left after its datum")
        return b'{"schema":' + self._schema_json + b',"payload":' + json.dumps(_jsonable(datum)).encode() + b"}"

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


class AvroValues:
    """Avro values of change events: each under the registry's schema of its id, or the ``.avsc``'s (``fixed``).
    The micro-batch thread resolves a micro-batch's ids (``resolve``) before Spark's tasks get a copy."""

    def __init__(self, fixed: dict | None = None, registry: SchemaRegistry | None = None):
        self.fixed = AvroChanges(fixed) if fixed is not None else None
        self.registry = registry
        self.by_id: dict[int, AvroChanges | str] = {}  # an id's schema, or why it has none

    def resolve(self, ids: set[int]) -> None:
        """The schemas of ``ids``, fetched from the registry once each (none without a registry)."""
        if self.registry is None:
            return
        for schema_id in sorted(ids - set(self.by_id)):
            try:
                self.by_id[schema_id] = AvroChanges(self.registry.schema(schema_id))
            except UnknownSchema as error:
                self.by_id[schema_id] = str(error)
            except NotAChangeEvent:
                self.by_id[schema_id] = (
                    f"schema id {schema_id} of the schema registry is not a Debezium change event's schema"
                )

    def row_schemas(self, ids: set[int | None]) -> list[list[dict]]:
        """The row schemas of values framed with ``ids`` (``None``: not framed)."""
        self.resolve({i for i in ids if i is not None})
        found = [self._changes(i) for i in ids]
        return [changes.row_columns() for changes in found if isinstance(changes, AvroChanges)]

    def as_json(self, values: pa.Array) -> tuple[pa.Array, list[str | None]]:
        """Each value as a JSON converter value; a null stays null (a tombstone); one that cannot be read gets an
        empty object and its reason."""
        out: list[bytes | None] = []
        reasons: list[str | None] = []
        for value in values.to_pylist():
            schema_id, payload = framing(value)
            reason = None
            if payload is not None:
                changes = self._changes(schema_id)
                if isinstance(changes, str):
                    payload, reason = b"{}", changes
                else:
                    try:
                        payload = changes.as_json(payload)
                    except ValueError as error:
                        where = (
                            "source.avro_schema"
                            if changes is self.fixed
                            else f"schema id {schema_id} of the schema registry"
                        )
                        payload, reason = (
                            b"{}",
                            f"the value is not Avro of {where} ({error})"
                            + (
                                "; if the source's columns changed, put the topic's current schema in "
                                "source.avro_schema, or use "
                                "source.schema_registry"
                                if changes is self.fixed
                                else ""
                            ),
                        )
            out.append(payload)
            reasons.append(reason)
        return pa.array(out, pa.binary()), reasons

    def _changes(self, schema_id: int | None) -> AvroChanges | str:
        if self.registry is not None and schema_id is not None:
            return self.by_id.get(schema_id, f"schema id {schema_id} was not looked up")
        if self.fixed is not None:
            return self.fixed
        return (
            "the value is not in Confluent's wire format (a zero byte and a schema id), so the schema registry "
            "cannot say its schema"
        )


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
