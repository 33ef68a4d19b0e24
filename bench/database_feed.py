"""A Debezium-shaped database for ``database_bench.py``: tables of 4 to 30 columns (Decimal, Date and
MicroTimestamp among them, some partitioned), their change events as Postgres' connector sends them through the
JSON converter with schemas on (``tests/support/connect_events.py``), produced to one Kafka topic per table, and the
same changes merged into Delta tables by delta-rs, the peer.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from connect_events import Column, PostgresTable, decimal_bytes, micros

BASE = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
REGIONS = ("eu", "us", "apac")
# (suffix, Spark DDL, the column's Connect schema, how a value is sent, Arrow type, a value of (key, version))
KINDS = [
    ("name", "STRING", {"type": "string", "optional": True}, lambda v: v, pa.string(), lambda k, n: f"name {k} v{n}"),
    (
        "amount",
        "DECIMAL(10,2)",
        {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        },
        lambda v: decimal_bytes(v, 2),
        pa.decimal128(10, 2),
        lambda k, n: Decimal(f"{k % 100000}.{(k + n) % 100:02d}"),
    ),
    (
        "day",
        "DATE",
        {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1},
        lambda v: (v - dt.date(1970, 1, 1)).days,
        pa.date32(),
        lambda k, n: dt.date(2000, 1, 1) + dt.timedelta(days=(k + n) % 9000),
    ),
    (
        "at",
        "TIMESTAMP",
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1},
        micros,
        pa.timestamp("us", "UTC"),
        lambda k, n: BASE + dt.timedelta(seconds=k, microseconds=n),
    ),
    ("qty", "INT", {"type": "int32", "optional": True}, lambda v: v, pa.int32(), lambda k, n: (k * 7 + n) % 1000),
    ("ratio", "DOUBLE", {"type": "double", "optional": True}, lambda v: v, pa.float64(), lambda k, n: k / 7 + n),
    ("flag", "BOOLEAN", {"type": "boolean", "optional": True}, lambda v: v, pa.bool_(), lambda k, n: (k + n) % 2 == 0),
]
ID = Column("id", "BIGINT", {"type": "int64", "optional": False})
REGION = Column("region", "STRING", {"type": "string", "optional": False})


@dataclass
class BenchTable:
    """One source table: its columns, whether it is partitioned by ``region``, and its rows (``source.rows``)."""

    name: str
    source: PostgresTable
    partitioned: bool
    makers: dict[str, object] = field(default_factory=dict)  # column -> value of (key, version)
    arrow: pa.Schema = None
    next_key: int = 0  # the key a new row takes

    @property
    def topic(self) -> str:
        return self.source.topic

    def values(self, key: int, version: int) -> dict:
        return {"id": key, **{name: make(key, version) for name, make in self.makers.items()}}


def make_tables(n: int) -> list[BenchTable]:
    """``n`` tables of 4 to 30 columns; every fourth one partitioned by region."""
    tables = []
    for i in range(n):
        width = 4 + (26 * i) // max(n - 1, 1)
        partitioned = i % 4 == 1
        columns, makers, fields = [ID], {}, [pa.field("id", pa.int64(), nullable=False)]
        if partitioned:
            columns.append(REGION)
            makers["region"] = lambda k, n: REGIONS[k % 3]
            fields.append(pa.field("region", pa.string()))
        for j in range(width - len(columns)):
            suffix, ddl, schema, encode, arrow, make = KINDS[j % len(KINDS)]
            columns.append(Column(f"{suffix}_{j}", ddl, schema, encode))
            makers[f"{suffix}_{j}"] = make
            fields.append(pa.field(f"{suffix}_{j}", arrow))
        name = f"t{i:02d}"
        tables.append(
            BenchTable(
                name,
                PostgresTable(columns=columns, table=name, schema="public", lsn=1000 + i * 10**9),
                partitioned,
                makers,
                pa.schema(fields),
            )
        )
    return tables


class Producer:
    """Every event to its table's topic, in the partition of its key, keyed as Debezium keys it; one record per request
    (Tansu advances a partition's high watermark by one per produce request)."""

    def __init__(self, bootstrap: str):
        from confluent_kafka import Producer as KafkaProducer

        self._producer = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 0,
                "batch.num.messages": 1,
                "queue.buffering.max.messages": 200_000,
            }
        )
        self.sent = 0

    def send(self, table: BenchTable, row: dict, event: dict) -> None:
        # compact, as Kafka Connect's JSON converter writes it
        key = json.dumps(table.source.kafka_key(row), separators=(",", ":")).encode()
        while True:
            try:
                self._producer.produce(
                    table.topic,
                    key=key,
                    value=json.dumps(event, separators=(",", ":")).encode(),
                    partition=row["id"] % 3,
                )
                break
            except BufferError:
                self._producer.poll(0.1)
        self.sent += 1
        if self.sent % 10_000 == 0:
            self._producer.poll(0)

    def flush(self) -> None:
        self._producer.flush(300)


def create_topics(bootstrap: str, tables: list[BenchTable]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t.topic, num_partitions=3, replication_factor=1) for t in tables]
    ).values():
        future.result(60)


@dataclass
class Round:
    """One table's changes of one round: rows upserted (their newest image) and keys deleted."""

    upserts: dict[int, dict] = field(default_factory=dict)
    deletes: set[int] = field(default_factory=set)


def snapshot(producer: Producer, table: BenchTable, rows: int) -> Round:
    changes = Round()
    for key in range(rows):
        row = table.values(key, 0)
        producer.send(table, row, table.source.upsert(row, op="r"))
        changes.upserts[key] = row
    table.next_key = rows
    return changes


def mixed(producer: Producer, table: BenchTable, events: int, version: int, rng: random.Random) -> Round:
    """``events`` creates, updates and deletes (1 : 3 : 1) of ``table``."""
    changes = Round()
    for _ in range(events):
        pick = rng.random()
        if pick < 0.2 and table.source.rows:
            key = rng.choice(list(table.source.rows)) if len(table.source.rows) < 1000 else _some_key(table, rng)
            row = dict(table.source.rows[key])
            producer.send(table, row, table.source.delete(key))
            changes.deletes.add(key)
            changes.upserts.pop(key, None)
            continue
        if pick < 0.4 or not table.source.rows:
            key, table.next_key = table.next_key, table.next_key + 1
        else:
            key = _some_key(table, rng)
        row = table.values(key, version)
        producer.send(table, row, table.source.upsert(row))
        changes.upserts[key] = row
        changes.deletes.discard(key)
    return changes


def _some_key(table: BenchTable, rng: random.Random) -> int:
    for _ in range(100):
        key = rng.randint(0, max(table.next_key - 1, 0))
        if key in table.source.rows:
            return key
    return next(iter(table.source.rows))


def model(table: BenchTable) -> pa.Table:
    """What a correct sink holds of ``table``, sorted by key."""
    rows = [table.source.rows[k] for k in sorted(table.source.rows)]
    return pa.Table.from_pylist(rows, schema=table.arrow)


def delta_merge(path: Path, table: BenchTable, changes: Round) -> None:
    """delta-rs: one round's changes of ``table`` merged into its Delta table (created by the first)."""
    from deltalake import DeltaTable, write_deltalake

    upserts = pa.Table.from_pylist(list(changes.upserts.values()), schema=table.arrow)
    if not (path / "_delta_log").exists():
        write_deltalake(str(path), upserts, partition_by=["region"] if table.partitioned else None)
        return
    dt_ = DeltaTable(str(path))
    if changes.deletes:
        dt_.delete(f"id in ({','.join(str(k) for k in sorted(changes.deletes))})")
    if upserts.num_rows:
        (
            dt_.merge(upserts, "t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
