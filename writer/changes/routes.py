"""Which table each Kafka record of a job of a whole database goes to, and the key a new table takes.

A change event names its source table (``source.db``, ``source.schema``, ``source.table``); an event that
names none (a row change an SMT stripped, a value that is not JSON, a heartbeat, a transaction marker) goes
with its topic: to the table the topic's other events went to, in this micro-batch or an earlier one of the
job. A record of a topic no table is known for is the job's, not a table's (``Routed.unrouted``): a message
that is not a row change is counted there and skipped; anything else is quarantined beside the tables.

Debezium keys each record by the source table's primary key, so a new table's record key is the key's fields
(``record_key_of``), as the JSON converter writes it, with its schema or without.

Spark-free; the values are parsed once (``changes.events.parse_messages``), and each table's decoder takes its part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.config.routes import SourceTable
from laketide.table.errors import Invalid
from laketide.writer.changes.events import Messages, parse_messages
from laketide.writer.changes.schema_registry import unframed

ROW_OPS = ("c", "r", "u", "d", "t")


@dataclass
class Routed:
    """A micro-batch's records by table (``tables``: the records' positions, in order), and the positions of
    those that go to no table (``unrouted``)."""

    messages: Messages  # every record's value, parsed once: the tables' decoders take their part of it
    tables: dict[SourceTable, np.ndarray] = field(default_factory=dict)
    unrouted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def route(records: pa.Table, topics_seen: dict[str, SourceTable]) -> Routed:
    """Where each of ``records`` (Kafka records: ``value``, ``topic``, ...) goes. ``topics_seen``: the table each
    topic's events went to so far; updated with what this micro-batch teaches."""
    messages = parse_messages(unframed(records["value"].combine_chunks()))
    topics = records["topic"].combine_chunks().cast(pa.string())
    named = _named_tables(messages)
    keys: list[SourceTable | None] = [None] * records.num_rows
    topic_list = topics.to_pylist()
    for i, source in enumerate(named):
        if source is not None:
            key = keys[i] = SourceTable(source[2], source[1], source[0], topic_list[i])
            topics_seen.setdefault(topic_list[i], key)
    routed = Routed(messages)
    by_key: dict[SourceTable, list[int]] = {}
    unrouted = []
    for i, key in enumerate(keys):
        key = key or topics_seen.get(topic_list[i])  # a message naming no table goes with its topic
        if key is None:
            unrouted.append(i)
        else:
            by_key.setdefault(key, []).append(i)
    routed.tables = {key: np.array(at, np.int64) for key, at in by_key.items()}
    routed.unrouted = np.array(unrouted, np.int64)
    return routed


def _named_tables(messages: Messages) -> list[tuple[str | None, str | None, str] | None]:
    """Per message, the (db, schema, table) of a row change that names its source table, else ``None``."""
    out: list[tuple[str | None, str | None, str] | None] = [None] * len(messages.values)
    if not len(out):
        return out
    event = messages.event()
    source = event["source"]
    is_row = pc.and_(pc.fill_null(pc.is_in(event["op"], pa.array(ROW_OPS)), False), pc.is_valid(source.field("table")))
    rows = np.nonzero(pc.fill_null(is_row, False).to_numpy(zero_copy_only=False))[0]
    db, schema, table = (
        source.field(name).take(pa.array(rows, pa.int64())).to_pylist() for name in ("db", "schema", "table")
    )
    for j, i in enumerate(rows.tolist()):
        out[i] = (db[j], schema[j], table[j])
    return out


def record_key_of(keys: pa.Array, table: str) -> list[str]:
    """The record key of a new table: the fields of its records' Kafka key (Debezium's key is the source table's
    primary key), as the JSON converter writes it (``{"schema": ..., "payload": {...}}``, or the bare object)."""
    way_out = f"set [tables.{table}] record_key to the columns that identify a row"
    for key in keys.drop_null().to_pylist():
        text = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
        try:
            parsed = json.loads(text)
        except ValueError:
            raise Invalid(
                f"the Kafka key of source table {table}'s events is not JSON (it is read to find the table's "
                f"primary key): {way_out}"
            ) from None
        if isinstance(parsed, dict) and isinstance(parsed.get("payload"), dict) and "schema" in parsed:
            fields = [f["field"] for f in (parsed["schema"] or {}).get("fields", []) if "field" in f] or list(
                parsed["payload"]
            )
        elif isinstance(parsed, dict):
            fields = list(parsed)
        else:
            fields = []
        if fields:
            return fields
        raise Invalid(f"the Kafka key of source table {table}'s events, {text[:200]!r}, names no column: {way_out}")
    raise Invalid(
        f"source table {table}'s events have no Kafka key: the table has no primary key (or the connector sends "
        f"none). {way_out}"
    )
