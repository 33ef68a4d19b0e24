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
# the Connect schema of each wide column, as Debezium's Postgres connector sends it under its defaults
# (time.precision.mode = adaptive: a timestamp as microseconds, MicroTimestamp; a date as days)
CONNECT = {
    "id": {"type": "int64", "optional": False},
    "name": {"type": "string", "optional": True},
    "amount": {"type": "double", "optional": True},
    "ts": {"type": "int64", "optional": True},
    "region": {"type": "string", "optional": True},
    "qty": {"type": "int32", "optional": True},
    "price": {"type": "double", "optional": True},
    "category": {"type": "string", "optional": True},
    "status": {"type": "string", "optional": True},
    "note": {"type": "string", "optional": True},
    "flag": {"type": "boolean", "optional": True},
    "score": {"type": "double", "optional": True},
    "created": {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1},
    "day": {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1},
    "code": {"type": "int32", "optional": True},
    "comment": {"type": "string", "optional": True},
}
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
    columns = [Column(f.name, "", CONNECT[f.name], _ENCODE.get(f.name, lambda v: v)) for f in shape.schema]
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
