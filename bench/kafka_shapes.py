"""The record shapes ``kafka_bench.py`` sweeps: the same rows as Kafka values of about 80 bytes, 300 bytes, 1 KB and
5 KB, and as the parquet landing files they are compared with.

- ``80B``: five flat columns as JSON (the upsert bench's narrow rows);
- ``300B``: fifteen flat columns as JSON, a timestamp (ISO 8601 with its offset) and a date among them;
- ``1KB``: those and a free-text comment of about 700 characters;
- ``5KB``: ``1KB``'s columns as a Debezium Postgres event through Kafka Connect's JSON converter with schemas on
  (``tests/support/connect_events.py``): the envelope, both images' Connect schemas, the source block, and an
  update's old row under REPLICA IDENTITY FULL.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from upsert_bench import _NARROW, _WIDE_EXTRA, NARROW, SHAPES, Shape

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from connect_events import Column, PostgresTable, micros

WIDE = SHAPES["wide"]
TEXT = Shape("text", pa.schema([*_NARROW, *_WIDE_EXTRA, ("comment", pa.string())]), 10)
# a column's Connect schema as Debezium's Postgres connector sends it under its defaults: by its type, and for the
# timestamp and the date by their logical types (time.precision.mode = adaptive: microseconds, days)
_CONNECT_TYPES = {
    pa.int64(): "int64",
    pa.int32(): "int32",
    pa.float64(): "double",
    pa.string(): "string",
    pa.bool_(): "boolean",
}
_LOGICAL = {
    "created": {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1},
    "day": {"type": "int32", "name": "io.debezium.time.Date", "version": 1},
}


def _connect_schema(column: pa.Field) -> dict:
    kind = _LOGICAL.get(column.name) or {"type": _CONNECT_TYPES[column.type]}
    return {**kind, "optional": column.name != "id"}


_ENCODE: dict[str, Callable] = {
    "created": lambda v: micros(v),
    "day": lambda v: (v - dt.date(1970, 1, 1)).days,
}


@dataclass(frozen=True)
class RecordShape:
    """One shape: its rows' columns, how a row becomes a Kafka value, and the job's settings for those values."""

    name: str
    rows: Shape
    debezium: bool = False

    def records(self, batches: list[pa.Table]) -> Iterator[list[tuple[int, bytes, bytes]]]:
        """Each batch's (id, key, value) of every row, in its order; a Debezium source table's rows carry over from
        batch to batch, so that a row seen before is updated (with its old image)."""
        source = _postgres(self.rows) if self.debezium else None
        for batch in batches:
            if source is None:
                yield [(r["id"], str(r["id"]).encode(), _json(r)) for r in batch.to_pylist()]
                continue
            yield [
                (
                    row["id"],
                    json.dumps(source.kafka_key(row), separators=(",", ":")).encode(),
                    json.dumps(source.upsert(row), separators=(",", ":")).encode(),
                )
                for row in batch.to_pylist()
            ]

    def kafka_settings(self) -> list[str]:
        """The job's source settings beyond the topic's: Debezium's envelope, or plain JSON rows of the shape."""
        return ["source.envelope=debezium"] if self.debezium else []


def _postgres(shape: Shape) -> PostgresTable:
    columns = [Column(f.name, "", _connect_schema(f), _ENCODE.get(f.name, lambda v: v)) for f in shape.schema]
    return PostgresTable(columns=columns, table="orders", schema="public", full=True)


def _json(row: dict) -> bytes:
    return json.dumps(row, default=_iso).encode()


def _iso(value):
    """A row's timestamps and dates as producers write JSON: ISO 8601, a timestamp with its offset."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


RECORD_SHAPES = {
    "80B": RecordShape("80B", NARROW),
    "300B": RecordShape("300B", WIDE),
    "1KB": RecordShape("1KB", TEXT),
    "5KB": RecordShape("5KB", TEXT, debezium=True),
}
