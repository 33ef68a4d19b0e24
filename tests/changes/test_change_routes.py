"""Which table each record of a job of a whole database goes to, and the record key a new table takes from the
Kafka key (``changes.routes``), on events shaped as Debezium's (``connect_events``)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from connect_events import HEARTBEAT, POSTGRES_COLUMNS, TRANSACTION_BEGIN, Column, PostgresTable, sample_row

from laketide.config.routes import SourceTable
from laketide.table.errors import Invalid
from laketide.writer.changes.routes import named_sources, record_key_of, route


def records(rows: list[tuple[str, dict | bytes | None]]) -> pa.Table:
    values = [json.dumps(v).encode() if isinstance(v, dict) else v for _, v in rows]
    return pa.table(
        {
            "key": pa.nulls(len(rows), pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": [t for t, _ in rows],
            "partition": pa.array([0] * len(rows), pa.int32()),
            "offset": pa.array(range(len(rows)), pa.int64()),
        }
    )


def test_events_go_to_their_source_table_and_the_rest_with_their_topic():
    orders, lines = (
        PostgresTable(columns=POSTGRES_COLUMNS[:3]),
        PostgresTable(columns=POSTGRES_COLUMNS[:3], table="lines", with_schema=False),
    )
    row = {k: v for k, v in sample_row(1).items() if k in ("id", "name", "region")}
    batch = records(
        [
            ("pg.public.orders", orders.upsert(row)),
            ("pg.public.lines", lines.upsert(row)),
            ("pg.transaction", TRANSACTION_BEGIN),
            ("pg.public.orders", None),
            ("pg.public.orders", b"not json"),
            ("pg.public.lines", lines.delete(1)),
            ("__debezium-heartbeat.pg", HEARTBEAT),
            ("pg.public.other", b"{broken"),
        ]
    )
    seen: dict[str, SourceTable] = {}
    routed = route(batch, seen)
    assert {k.table: v.tolist() for k, v in routed.tables.items()} == {"orders": [0, 3, 4], "lines": [1, 5]}
    assert routed.unrouted.tolist() == [2, 6, 7]
    assert seen["pg.public.orders"] == SourceTable("orders", "public", "shop", "pg.public.orders")
    # a later micro-batch's tombstone of a known topic goes to its table
    assert {k.table: v.tolist() for k, v in route(records([("pg.public.lines", None)]), seen).tables.items()} == {
        "lines": [0]
    }
    # what Spark's tasks route by: the names a row change carries, as ``route`` takes them
    db, schema, table = (column.to_pylist() for column in named_sources(batch["value"].combine_chunks()))
    assert table == ["orders", "lines", None, None, None, "lines", None, None]
    assert [(d, s) for d, s, t in zip(db, schema, table) if t] == [("shop", "public")] * 3


def test_a_new_tables_record_key_is_the_kafka_keys_fields_with_or_without_their_schema():
    lines = PostgresTable(
        columns=[
            Column("order_id", "BIGINT", {"type": "int64", "optional": False}),
            Column("line", "INT", {"type": "int32", "optional": False}),
        ],
        table="lines",
        key=("order_id", "line"),
    )
    row = {"order_id": 7, "line": 2}
    with_schema = pa.array([None, json.dumps(lines.kafka_key(row)).encode()], pa.binary())
    assert record_key_of(with_schema, "lines") == ["order_id", "line"]
    assert record_key_of(pa.array([json.dumps({"b": 1, "a": 2}).encode()], pa.binary()), "t") == ["b", "a"]
    with pytest.raises(Invalid, match=r"no Kafka key.*\[tables.t\] record_key"):
        record_key_of(pa.nulls(2, pa.binary()), "t")
    with pytest.raises(Invalid, match="is not JSON"):
        record_key_of(pa.array([b"\x00\x00\x00\x00\x01\x02"], pa.binary()), "t")
