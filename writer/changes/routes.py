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
from laketide.writer.changes.images import dictionary_codes
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
    topics = records["topic"].combine_chunks().cast(pa.string()).dictionary_encode()
    topic_names = topics.dictionary.to_pylist()
    topic_codes = dictionary_codes(topics)
    codes, keys = _named_tables(messages, topic_names, topic_codes)
    for key in keys:  # in the order each came first: a topic goes with the first table its events named
        if key.topic is not None:
            topics_seen.setdefault(key.topic, key)
    # a message naming no table goes with its topic: to the table its events went to, now or before
    position = {key: c for c, key in enumerate(keys)}
    by_topic = []
    for topic in topic_names:
        key = topics_seen.get(topic)
        if key is not None and key not in position:
            position[key] = len(keys)
            keys.append(key)
        by_topic.append(-1 if key is None else position[key])
    unnamed = (codes < 0) & (topic_codes >= 0)
    codes[unnamed] = np.array(by_topic, np.int64)[topic_codes[unnamed]]
    order = np.argsort(codes, kind="stable")  # each table's records together, in their order
    starts = np.searchsorted(codes[order], np.arange(-1, len(keys) + 1))
    routed = Routed(messages, unrouted=order[starts[0] : starts[1]])
    routed.tables = {
        key: order[starts[c + 1] : starts[c + 2]] for c, key in enumerate(keys) if starts[c + 2] > starts[c + 1]
    }
    return routed


def _named_tables(
    messages: Messages, topic_names: list[str], topic_codes: np.ndarray
) -> tuple[np.ndarray, list[SourceTable]]:
    """Per message, the number of the source table a row change names (its db, schema, table and topic), else -1;
    and those tables, in the order each came first."""
    codes = np.full(len(messages.values), -1, np.int64)
    if not len(codes):
        return codes, []
    event = messages.event()
    source = event["source"]
    rows = np.nonzero(_names_table(event).to_numpy(zero_copy_only=False))[0]
    if not len(rows):
        return codes, []
    at, parts, names = pa.array(rows, pa.int64()), [topic_codes[rows]], []
    for name in ("db", "schema", "table"):
        encoded = source.field(name).take(at).cast(pa.string()).dictionary_encode()
        parts.append(dictionary_codes(encoded))
        names.append(encoded.dictionary.to_pylist())
    distinct, first, inverse = np.unique(np.stack(parts, axis=1), axis=0, return_index=True, return_inverse=True)
    came = np.argsort(first)
    rank = np.empty_like(came)
    rank[came] = np.arange(len(came))
    codes[rows] = rank[inverse.reshape(-1)]
    db, schema, table = names
    keys = [
        SourceTable(
            table[t], schema[s] if s >= 0 else None, db[d] if d >= 0 else None, topic_names[p] if p >= 0 else None
        )
        for p, d, s, t in distinct[came].tolist()
    ]
    return codes, keys


def _names_table(event: dict[str, pa.Array]) -> pa.Array:
    """Per message, whether it is a row change that names its source table."""
    is_row = pc.and_(
        pc.fill_null(pc.is_in(event["op"], pa.array(ROW_OPS)), False), pc.is_valid(event["source"].field("table"))
    )
    return pc.fill_null(is_row, False)


SOURCE_FIELDS = ("db", "schema", "table")


def named_sources(values: pa.Array) -> list[pa.Array]:
    """Per Kafka value, the ``SOURCE_FIELDS`` of the source table its row change names, nulls where it names none:
    what Spark's tasks route a micro-batch by (``spark/database_tasks.py``), as ``route`` does on the driver."""
    event = parse_messages(unframed(values)).event()
    names = _names_table(event)
    none = pa.scalar(None, pa.string())
    return [pc.if_else(names, event["source"].field(name).cast(pa.string()), none) for name in SOURCE_FIELDS]


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
