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
    """Binary (Spark reads base64) and nested columns: Spark decodes them."""
    for kind in (pa.binary(), pa.list_(pa.int64()), pa.struct([("x", pa.int64())])):
        schema = pa.schema([("id", pa.int64()), ("at", kind), (SOURCE_FILE, pa.string())])
        assert plain_rows(records([b'{"id": 1}']), schema) is None


# texts of a timestamp, a date and a decimal(10, 2) column, as producers write them and as they should not
TEMPORAL_VALUES = {
    "at": [
        "2024-01-02T03:04:05",
        "2024-01-02 03:04:05.5",
        "2024-01-02T03:04:05.123456",
        "2024-01-02",
        "2024-01-02T03:04:05Z",
        "2024-01-02T03:04:05.123+05:30",
        "2024-01-02T03:04:05-08:00",
        "2024-10-27T02:30:00",  # Berlin's clocks went back: the hour came twice
        "2024-03-31T02:30:00",  # and forward: it never came
        "2024-01-02T03:04:05.123456789Z",
        "2024-1-2 03:04:05",
        "2024-01-02T03:04",
        "2024-02-30T00:00:00",
        "2024-01-02T24:00:00",
        "1700000000",
        1700000000,
        "",
        None,
    ],
    "day": ["2024-01-02", "2024-02-29", "2023-02-29", "2024-1-2", "2024-01-02T00:00:00", 19700, "", None],
    "price": [12.34, 1, "12.34", 12.345, 1e2, 123456789012, -0.5, None],
}


@pytest.mark.parametrize("timezone", ["Europe/Berlin", "UTC", "America/Los_Angeles"])
def test_timestamps_dates_and_decimals_decode_as_spark_decodes_them_or_are_left_to_it(spark, timezone):
    """The oracle is Spark's own ``from_json`` in the session's time zone: every value the driver decodes, alone and
    with the others it decodes, equals Spark's row; the rest are left to Spark (``None``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import DateType, DecimalType, StructField, StructType, TimestampNTZType, TimestampType

    declared = StructType(
        [
            StructField("at", TimestampType()),
            StructField("local", TimestampNTZType()),
            StructField("day", DateType()),
            StructField("price", DecimalType(10, 2)),
        ]
    )
    values = [json.dumps({"at": v, "local": v}) for v in TEMPORAL_VALUES["at"]]
    values += [json.dumps({"day": v}) for v in TEMPORAL_VALUES["day"]]
    values += [json.dumps({"price": v}) for v in TEMPORAL_VALUES["price"]]
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", timezone)
    try:
        decoded = spark.createDataFrame([(v,) for v in values], "value string").select(
            F.from_json("value", declared).alias("row")
        )
        # an instant as microseconds: PySpark collects a timestamp in the Python process's zone
        theirs = [
            {**row.asDict(), "at": row.at}
            for row in decoded.select(
                F.unix_micros("row.at").alias("at"), "row.local", "row.day", "row.price"
            ).collect()
        ]
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    schema = pa.schema([*to_arrow_schema(declared, timezone=timezone), (SOURCE_FILE, pa.string())])
    decodable = []
    for value, spark_row in zip(values, theirs):
        ours = plain_rows(records([value.encode()]), schema)
        if ours is None:
            continue
        decodable.append((value, spark_row))
        assert _listed(ours) == [spark_row], value
    assert len(decodable) >= 12, "the common forms are decoded on the driver"
    together = plain_rows(records([v.encode() for v, _ in decodable]), schema)
    assert together is not None
    assert _listed(together) == [r for _, r in decodable]


def _listed(rows: pa.Table) -> list[dict]:
    """The declared columns' values, an instant as microseconds since the epoch."""
    rows = rows.set_column(0, "at", rows["at"].cast(pa.int64()))
    return rows.select(["at", "local", "day", "price"]).to_pylist()
