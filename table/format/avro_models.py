"""Apache Hudi's Avro metadata schemas, in one registry.

Each record is transcribed in ``avro_schemas`` from ``hudi-common/src/main/avro/<name>.avsc`` in
Apache Hudi. Records refer to each other by name, as the ``.avsc`` files do; ``schema`` parses one with every
record it needs, and ``schema_json`` gives the self-contained JSON that Hudi
puts in a log block header (each named record defined once, at first use).

Timeline files (plans, clean, rollback, savepoint and restore metadata) are
Avro container files holding one record: ``write_container`` and
``read_container``.
"""

from __future__ import annotations

import io
import json
from functools import cache

import fastavro

from laketide.table.format.avro_schemas import DEFINITIONS, NAMESPACE  # noqa: F401  (NAMESPACE: read by the log block writer)


def _inline(node, defined: set[str]):
    """``node`` with each named record written out where it is first used, and named after that."""
    if isinstance(node, str):
        if node in DEFINITIONS and node not in defined:
            defined.add(node)
            return _inline(DEFINITIONS[node], defined)
        return node
    if isinstance(node, list):
        return [_inline(branch, defined) for branch in node]
    if node.get("type") == "record":
        defined.add(node["name"])
        return {**node, "fields": [{**f, "type": _inline(f["type"], defined)} for f in node["fields"]]}
    if node.get("type") == "array":
        return {**node, "items": _inline(node["items"], defined)}
    if node.get("type") == "map":
        return {**node, "values": _inline(node["values"], defined)}
    return node


@cache
def schema_dict(name: str) -> dict:
    """The self-contained schema of record ``name``, as plain JSON data."""
    return _record(_inline(name, set()), name)


@cache
def schema_json(name: str) -> str:
    return json.dumps(schema_dict(name), separators=(",", ":"))


@cache
def schema(name: str):
    """The parsed (fastavro) schema of record ``name``."""
    return fastavro.parse_schema(schema_dict(name))


def write_container(name: str, record: dict) -> bytes:
    """One record in an Avro container file, as Hudi writes timeline metadata."""
    buf = io.BytesIO()
    fastavro.writer(buf, schema(name), [record])
    return buf.getvalue()


def read_container(data: bytes, name: str | None = None) -> dict:
    """The record of an Avro container file; with ``name``, resolved against that record's schema."""
    reader = fastavro.reader(io.BytesIO(data), reader_schema=schema(name) if name else None)
    return _record(next(iter(reader)), name or "the container's")


def encode(name: str, record: dict) -> bytes:
    """One record in Avro binary without a container (as inside a log data block)."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema(name), record)
    return buf.getvalue()


def decode(data: bytes, writer_schema, reader_schema=None) -> dict:
    return _record(fastavro.schemaless_reader(io.BytesIO(data), writer_schema, reader_schema), "a block's")


def _record(value: object, name: str) -> dict:
    """An Avro value that must be a record (every Hudi metadata schema is one)."""
    if not isinstance(value, dict):
        raise ValueError(f"{name} Avro value is a {type(value).__name__}, not a record")
    return value
