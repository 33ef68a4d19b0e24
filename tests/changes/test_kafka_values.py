"""Plain JSON values of Kafka records decoded on the driver (``writer.kafka_values``): the rows Spark's ``from_json``
would give, or ``None`` so that Spark decodes them."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from laketide.index.columns import CORRUPT, DECODE_REASON, SOURCE_FILE, SOURCE_OFFSET
from laketide.writer.changes.kafka_values import plain_rows

ROWS = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("ok", pa.bool_()),
        ("qty", pa.int32()),
        (DECODE_REASON, pa.string()),
        (CORRUPT, pa.string()),
        (SOURCE_FILE, pa.string()),
        (SOURCE_OFFSET, pa.int64()),
    ]
)


def records(values: list[bytes | None], topic: str = "orders", partition: int = 1) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "key": pa.nulls(n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": [topic] * n,
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(range(40, 40 + n), pa.int64()),
        }
    )


def test_values_become_the_declared_rows_with_where_each_came_from():
    values = [
        json.dumps({"id": 1, "name": "a", "amount": 2, "ok": True, "qty": 3, "extra": {"x": [1]}}).encode(),
        None,  # a tombstone: no row
        b"\x00\x00\x00\x00\x07" + json.dumps({"id": 2}).encode(),  # Confluent's framing, taken off
        b'{"id": 3,\n "name": "b"}',
    ]  # a newline between tokens
    rows = plain_rows(records(values), ROWS)
    assert rows.schema == ROWS
    assert rows.to_pylist() == [
        {
            "id": 1,
            "name": "a",
            "amount": 2.0,
            "ok": True,
            "qty": 3,
            DECODE_REASON: None,
            CORRUPT: None,
            SOURCE_FILE: "orders/0000000001",
            SOURCE_OFFSET: 40,
        },
        {
            "id": 2,
            "name": None,
            "amount": None,
            "ok": None,
            "qty": None,
            DECODE_REASON: None,
            CORRUPT: None,
            SOURCE_FILE: "orders/0000000001",
            SOURCE_OFFSET: 42,
        },
        {
            "id": 3,
            "name": "b",
            "amount": None,
            "ok": None,
            "qty": None,
            DECODE_REASON: None,
            CORRUPT: None,
            SOURCE_FILE: "orders/0000000001",
            SOURCE_OFFSET: 43,
        },
    ]


@pytest.mark.parametrize(
    "bad",
    [
        b'{"id": "1"}',  # Spark's from_json: a corrupt record
        b'{"id": 1, "name": 5}',  # Spark's from_json: the number's text
        b'{"id": 1.5}',
        b'{"qty": 3000000000}',
        b"null",
        b"[1]",
        b"",
        b"   ",
        b"\xff\xfe",
        b'{"id": 1}{"id": 2}',
        b"{not json",
    ],
)
def test_anything_spark_might_read_otherwise_is_left_to_spark(bad):
    good = json.dumps({"id": 1}).encode()
    assert plain_rows(records([good, bad, good]), ROWS) is None


def test_columns_of_other_types_are_left_to_spark():
    """A timestamp without a zone is in Spark's session time zone, a date has Spark's formats: Spark decodes them."""
    for kind in (pa.timestamp("us", "UTC"), pa.date32(), pa.decimal128(10, 2), pa.binary(), pa.list_(pa.int64())):
        schema = pa.schema([("id", pa.int64()), ("at", kind), (SOURCE_FILE, pa.string())])
        assert plain_rows(records([b'{"id": 1}']), schema) is None
