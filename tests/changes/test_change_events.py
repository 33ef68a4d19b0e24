"""Debezium change events into rows (``changes.events``, ``changes.connect.values``): pure logic on Arrow,
with the event shapes Debezium's documentation and test resources show (``connect_events``)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from connect_events import (
    HEARTBEAT,
    LOGICAL_MESSAGE,
    NAMES,
    POSTGRES_COLUMNS,
    SCHEMA_CHANGE,
    TRANSACTION_BEGIN,
    TRANSACTION_END,
    Column,
    MySqlTable,
    PostgresTable,
    decimal_bytes,
    sample_row,
)

from laketide.writer.changes.connect.column import Decoding
from laketide.writer.changes.events import ChangeSpec, change_rows, parse_messages

ARROW = {
    "BIGINT": pa.int64(),
    "STRING": pa.string(),
    "DECIMAL(10,2)": pa.decimal128(10, 2),
    "DECIMAL(20,4)": pa.decimal128(20, 4),
    "TIMESTAMP": pa.timestamp("us", "UTC"),
    "DATE": pa.date32(),
    "BOOLEAN": pa.bool_(),
    "DOUBLE": pa.float64(),
    "BINARY": pa.binary(),
}
SPEC = ChangeSpec(pa.schema([(c.name, ARROW[c.ddl]) for c in POSTGRES_COLUMNS]), ("id",))


def decode(events: list, spec: ChangeSpec = SPEC, topic: str = "pg.public.orders") -> list[dict]:
    """The rows of ``events`` written compact, as Kafka Connect's JSON converter writes them (a wrapped event's
    schema block parsed once for all); the same events with spaces after the separators, parsed whole, give the
    same rows."""

    def rows(separators: tuple[str, str]) -> list[dict]:
        values = pa.array(
            [
                None if e is None else e if isinstance(e, bytes) else json.dumps(e, separators=separators).encode()
                for e in events
            ],
            pa.binary(),
        )
        return change_rows(parse_messages(values), pa.array([topic] * len(events)), spec).rows.to_pylist()

    compact = rows((",", ":"))
    assert compact == rows((", ", ": ")), "the same events, parsed whole"
    return compact


def same(row: dict, expected: dict) -> None:
    for name in NAMES:
        got, want = row[name], expected[name]
        if isinstance(want, dt.datetime):
            want = want.astimezone(dt.UTC)
            got = got.astimezone(dt.UTC) if got is not None else None
        assert got == want, f"{name}: {got!r} != {want!r}"


@pytest.mark.parametrize("with_schema", [True, False], ids=["schema", "bare"])
def test_every_logical_type_of_the_event_schema_is_decoded(with_schema):
    table = PostgresTable(with_schema=with_schema)
    events = [table.upsert(sample_row(i, 1)) for i in range(12)]
    spec = SPEC if with_schema else ChangeSpec(SPEC.columns, ("id",), Decoding(timestamp_unit="us"))
    rows = decode(events, spec)
    if not with_schema:
        # without a schema, every TIMESTAMP integer is read in the one unit given: updated_ms (ms) read as µs falls
        # in January 1970, and goes to quarantine rather than be stored a thousand times wrong (a mixed feed needs
        # the schema)
        for r in rows:
            assert (
                "column 'updated_ms'" in r["_lt_decode_reason"]
                and "likely sent in another unit" in (r["_lt_decode_reason"])
            )
            r["_lt_decode_reason"] = None
    for row, i in zip(rows, range(12)):
        assert row["_lt_decode_reason"] is None, row["_lt_decode_reason"]
        expected = sample_row(i, 1)
        if not with_schema:
            expected["updated_ms"] = None
            # VariableScaleDecimal is a struct either way
        same(row, expected)
        assert row["_lt_source_table"] == "shop.public.orders" and row["_hoodie_is_deleted"] is False


def test_an_integer_timestamp_without_a_schema_or_a_unit_is_quarantined_naming_the_way_out():
    table = PostgresTable(with_schema=False)
    row = decode([table.upsert(sample_row(1))])[0]
    assert (
        "column 'created_at'" in row["_lt_decode_reason"]
        and "source.debezium.timestamp_unit" in row["_lt_decode_reason"]
    )
    assert row["created_at"] is None


def test_a_delete_under_replica_identity_default_carries_the_key_alone():
    table = PostgresTable()
    events = [table.upsert(sample_row(1)), table.delete(1)]
    rows = decode(events)
    # a required column the old tuple lacks holds its default: the stored row's partition is found by key, not by it
    assert (
        rows[1]["id"] == 1
        and rows[1]["_hoodie_is_deleted"] is True
        and rows[1]["region"] == "eu"
        and rows[1]["name"] is None
    )
    assert rows[1]["_lt_decode_reason"] is None
    assert rows[0]["_event_position"] < rows[1]["_event_position"]


def test_bare_deletes_among_megabytes_of_updates_decode_whatever_block_they_fall_in():
    """Without schemas the row's types are inferred: a delete's ``before`` holds the key and nulls, which the JSON
    reader, inferring each of its blocks on its own, could not reconcile with the blocks that lack one."""
    table = PostgresTable(with_schema=False)
    spec = ChangeSpec(SPEC.columns, ("id",), Decoding(timestamp_unit="us"))
    updates = [table.upsert(sample_row(i, 1)) for i in range(3000)]  # about 3 MB: several of the reader's blocks
    rows = decode([table.delete(7), *updates, table.delete(2999)], spec)
    assert len(rows) == 3002 and all(
        r["_lt_decode_reason"] is None or "updated_ms" in r["_lt_decode_reason"] for r in rows
    )
    assert [(r["id"], r["_hoodie_is_deleted"]) for r in (rows[0], rows[1], rows[-1])] == [
        (7, True),
        (0, False),
        (2999, True),
    ]


def test_values_that_cannot_be_decoded_name_the_column_and_encoding():
    table = PostgresTable()
    good = table.upsert(sample_row(1))
    bad_decimal = json.loads(json.dumps(good))
    bad_decimal["payload"]["after"]["amount"] = "not base64!"
    bad_zone = json.loads(json.dumps(good))
    bad_zone["payload"]["after"]["seen_at"] = "yesterday"
    too_fine = json.loads(json.dumps(good))
    too_fine["payload"]["after"]["price"] = {"scale": 6, "value": decimal_bytes(Decimal("1.123456"), 6)}
    rows = decode([good, bad_decimal, bad_zone, too_fine])
    assert rows[0]["_lt_decode_reason"] is None
    assert (
        "column 'amount'" in rows[1]["_lt_decode_reason"]
        and "org.apache.kafka.connect.data.Decimal" in rows[1]["_lt_decode_reason"]
    )
    assert "column 'seen_at'" in rows[2]["_lt_decode_reason"] and "ZonedTimestamp" in rows[2]["_lt_decode_reason"]
    assert "column 'price'" in rows[3]["_lt_decode_reason"] and "decimal128(20, 4)" in rows[3]["_lt_decode_reason"]


def test_the_connectors_other_messages_are_recognised_not_quarantined():
    table = PostgresTable()
    events = [
        TRANSACTION_BEGIN,
        table.upsert(sample_row(1)),
        TRANSACTION_END,
        HEARTBEAT,
        {"ts_ms": 1},
        LOGICAL_MESSAGE,
        SCHEMA_CHANGE,
        table.truncate(),
        None,
    ]
    rows = decode(events)
    kinds = [r["_lt_event_kind"] for r in rows]
    assert kinds == [
        "transaction",
        None,
        "transaction",
        "heartbeat",
        "heartbeat",
        "message",
        "schema_change",
        "truncate",
        "tombstone",
    ]
    assert all(r["_lt_decode_reason"] is None for r in rows)


def test_a_heartbeat_topic_is_a_heartbeat_whatever_its_value():
    rows = decode([{"ts_ms": 5, "extra": 1}], topic="__debezium-heartbeat.pg")
    assert rows[0]["_lt_event_kind"] == "heartbeat"


def test_bad_messages_among_good_ones_are_found_alone():
    table = PostgresTable()
    events = [table.upsert(sample_row(i)) for i in range(40)]
    events[7] = b"{not json"
    events[23] = b"[1, 2]"
    events[31] = {"op": "x", "after": {"id": 3}}
    events[35] = b"   "
    rows = decode(events)
    reasons = {i: r["_lt_decode_reason"] for i, r in enumerate(rows) if r["_lt_decode_reason"]}
    assert sorted(reasons) == [7, 23, 31, 35]
    assert (
        "not valid JSON" in reasons[7] and "not an object" in reasons[23] and "unknown Debezium op 'x'" in reasons[31]
    )
    assert [r["id"] for i, r in enumerate(rows) if i not in reasons] == [i for i in range(40) if i not in reasons]


def test_pretty_printed_events_as_in_debeziums_test_resources():
    table = PostgresTable()
    event = json.dumps(table.upsert(sample_row(4)), indent=2).encode()
    assert b"\n" in event
    same(decode([event])[0], sample_row(4))


def test_mysql_positions_sort_by_binlog_file_position_and_row():
    def mysql(file: str, pos: int, row: int) -> dict:
        return {
            "op": "c",
            "after": {"id": 1},
            "source": {
                "connector": "mysql",
                "db": "inventory",
                "table": "customers",
                "file": file,
                "pos": pos,
                "row": row,
                "gtid": None,
            },
        }

    rows = decode([mysql("mysql-bin.000009", 900, 0), mysql("mysql-bin.000010", 4, 0), mysql("mysql-bin.000010", 4, 1)])
    positions = [r["_event_position"] for r in rows]
    assert positions == sorted(positions) and len(set(positions)) == 3
    assert rows[0]["_lt_source_table"] == "inventory.customers"


def test_two_schemas_in_one_batch_each_decoded_by_its_own():
    """A column added mid-stream: events before and after carry different schemas."""
    old = PostgresTable(columns=[c for c in POSTGRES_COLUMNS if c.name != "amount"])
    new = PostgresTable()
    events = [old.upsert({k: v for k, v in sample_row(1).items() if k != "amount"}), new.upsert(sample_row(2))]
    rows = decode(events)
    assert rows[0]["amount"] is None and rows[1]["amount"] == sample_row(2)["amount"]
    same(rows[1], sample_row(2))


def _kafka_records(events: list[dict], partitions: list[int] | None = None) -> pa.Table:
    return pa.table(
        {
            "value": pa.array([json.dumps(e).encode() for e in events], pa.binary()),
            "topic": ["mysql.inventory.customers"] * len(events),
            "partition": pa.array(partitions or [0] * len(events), pa.int32()),
            "offset": pa.array(range(len(events)), pa.int64()),
        }
    )


MYSQL_COLUMNS = pa.schema([("id", pa.int64()), ("name", pa.string())])


def test_a_mysql_failover_is_counted_and_ts_ms_ordering_keeps_it_in_order():
    """A failover to a server whose binlog numbers are lower: ordered by position its events are older than
    those before it (counted as behind the log); ordered by ts_ms they keep their order."""
    from laketide.writer.changes.decoder import ChangeDecoder
    from laketide.writer.changes.source_log import FeedLog

    mysql = MySqlTable()
    events = [mysql.upsert({"id": i, "name": f"a{i}"}) for i in range(3)]
    mysql.fail_over()
    events += [mysql.upsert({"id": i, "name": f"b{i}"}) for i in range(2)]
    records, columns = _kafka_records(events), MYSQL_COLUMNS
    by_position = ChangeDecoder(columns, ("id",), ("id",), Decoding())
    rows, tally = by_position.rows(records, columns)
    positions = rows["_event_position"].to_pylist()
    assert positions[3] < positions[2] and tally.log.behind == 2 and tally.ordering == "position"
    ((stream, newest),) = tally.log.newest.items()
    assert stream == "mysql.inventory.customers/0000000000" and newest.server == "2"  # the log goes on from there
    assert "binlog file 1 position 204 on server 2" in tally.log.describe()
    assert "after one at binlog file 10 position 604 on server 1" in tally.log.describe()
    by_time = ChangeDecoder(columns, ("id",), ("id",), Decoding(ordering="ts_ms"))
    rows, tally = by_time.rows(records, columns)
    positions = rows["_event_position"].to_pylist()
    assert positions == sorted(positions) and tally.log.behind == 2  # counted under either ordering
    # a later micro-batch, of this run or another: behind what the table has seen
    seen = FeedLog("position", by_position.rows(records.slice(0, 3), columns)[1].log.newest)
    assert by_position.rows(records.slice(3), columns, log=seen)[1].log.behind == 2
    # under on_log_reset = "ts_ms" the micro-batch is ordered by commit time from there on
    switching = ChangeDecoder(columns, ("id",), ("id",), Decoding(on_log_reset="ts_ms"))
    rows, tally = switching.rows(records.slice(3), columns, log=seen)
    assert tally.ordering == "ts_ms" and all(p.startswith("t") for p in rows["_event_position"].to_pylist())


def test_events_sent_again_and_long_transactions_are_not_a_log_that_went_back():
    """A connector that sends events again after a restart sends their own, earlier times; a transaction that
    began before one ahead of it in the binlog carries the earlier time but the same server and file; events of
    other partitions are other streams. None of them went back."""
    from laketide.writer.changes.decoder import ChangeDecoder

    mysql = MySqlTable()
    events = [mysql.upsert({"id": i, "name": f"a{i}"}) for i in range(4)]
    again = events[1:3]  # sent again, as they were
    late_begun = json.loads(json.dumps(events[3]))
    late_begun["source"]["pos"] -= 100  # earlier in the same file, with a later time
    late_begun["source"]["ts_ms"] += 10_000
    decoder = ChangeDecoder(MYSQL_COLUMNS, ("id",), ("id",), Decoding())
    assert decoder.rows(_kafka_records([*events, *again, late_begun]), MYSQL_COLUMNS)[1].log.behind == 0
    mysql.fail_over()
    other = [mysql.upsert({"id": 9, "name": "b"})]
    # the new server's event in another partition: a stream of its own
    assert decoder.rows(_kafka_records([*events, *other], [0] * 4 + [1]), MYSQL_COLUMNS)[1].log.behind == 0
    assert decoder.rows(_kafka_records([*events, *other]), MYSQL_COLUMNS)[1].log.behind == 1


def test_a_postgres_commit_lsn_that_goes_back_is_counted_and_change_lsns_alone_are_not_checked():
    """Postgres by the commit LSN of ``source.sequence``: a restored replica's events come after newer commits.
    A change's own LSN does not rise with the order of events (a long transaction's changes come after shorter
    ones that committed first), so events without ``sequence`` are not checked."""
    from laketide.writer.changes.decoder import ChangeDecoder

    pg = PostgresTable(with_schema=False, sequence=True)
    events = [pg.upsert(sample_row(i)) for i in range(3)]
    pg.restore(pg.lsn - 16)
    events += [pg.upsert(sample_row(7))]
    columns = pa.schema([("id", pa.int64())])
    decoder = ChangeDecoder(columns, ("id",), ("id",), Decoding())
    tally = decoder.rows(_kafka_records(events), columns)[1]
    assert tally.log.behind == 1 and "commit LSN" in tally.log.describe()
    for event in events:
        event["source"].pop("sequence")
    assert decoder.rows(_kafka_records(events), columns)[1].log.behind == 0


def test_avro_events_decode_as_the_same_events_through_the_json_converter():
    """The Avro converter's values (``avro_schema``: the schema AvroData makes) give the rows the JSON
    converter's give, with every logical type; the columns taken from the events are the same too; a value
    that is not a datum of the schema is quarantined, naming the schema setting."""
    from connect_events import avro_schema, avro_value

    from laketide.writer.changes.connect.avro import AvroValues
    from laketide.writer.changes.decoder import ChangeDecoder

    table = PostgresTable(full=True)
    events = [table.upsert(sample_row(i, 0), op="r") for i in range(6)] + [
        table.upsert(sample_row(i, 1)) for i in range(3)
    ]
    events += [table.delete(4), table.upsert(sample_row(2, 2), unchanged=("name", "blob"))]
    kafka = {
        "topic": pa.array(["pg.public.orders"] * (len(events) + 2)),
        "partition": pa.array([0] * (len(events) + 2), pa.int32()),
        "offset": pa.array(range(len(events) + 2), pa.int64()),
    }
    as_json = pa.table(
        {"value": pa.array([json.dumps(e).encode() for e in events] + [None, b"{}"], pa.binary()), **kafka}
    )
    as_avro = pa.table({"value": pa.array([avro_value(e) for e in events] + [None, b"\xff\xfe"], pa.binary()), **kafka})
    by_json = ChangeDecoder(None, ("id",), ("id",), Decoding())
    by_avro = ChangeDecoder(None, ("id",), ("id",), Decoding(), AvroValues(avro_schema(events[0]["schema"])))
    columns = by_json.columns(by_json.schemas(as_json), None)
    assert by_avro.columns(by_avro.schemas(as_avro), None) == columns
    assert columns.field("amount").type == pa.decimal128(10, 2) and columns.field("created_at").type == pa.timestamp(
        "us", "UTC"
    )
    json_rows, _ = by_json.rows(as_json, columns)
    avro_rows, _ = by_avro.rows(as_avro, columns)
    names = [*NAMES, "_hoodie_is_deleted", "_event_position", "_lt_event_kind", "_lt_source_table"]
    assert avro_rows.select(names).slice(0, len(events) + 1) == json_rows.select(names).slice(0, len(events) + 1)
    for row in avro_rows.to_pylist()[: len(events)]:
        assert row["_lt_decode_reason"] is None
    bad = avro_rows.to_pylist()[-1]
    assert (
        "not Avro of source.avro_schema" in bad["_lt_decode_reason"]
        and json.loads(bad["_corrupt_record"])["value_base64"] == "//4="
    )

    # an event of the table after a column was added, read under the old .avsc: quarantined, not read wrong
    wider = PostgresTable(
        columns=[
            *POSTGRES_COLUMNS[:2],
            Column("middle", "STRING", {"type": "string", "optional": True}),
            *POSTGRES_COLUMNS[2:],
        ]
    )
    later = wider.upsert({**sample_row(7, 1), "middle": "m" * 40})
    late_rows, _ = by_avro.rows(
        pa.table({"value": pa.array([avro_value(later)], pa.binary()), **{k: v.slice(0, 1) for k, v in kafka.items()}}),
        columns,
    )
    assert "put the topic's current schema in source.avro_schema" in late_rows.to_pylist()[0]["_lt_decode_reason"]


def test_avro_values_are_read_under_the_registrys_schema_of_their_id():
    """Two schema ids in one micro-batch (a column added in the source): each value under its own, the columns
    of both; an id the registry does not have is quarantined with why. (The registry's answers are given here:
    its HTTP client is tested end to end.)"""
    from connect_events import avro_schema, avro_value

    from laketide.writer.changes.connect.avro import AvroValues
    from laketide.writer.changes.decoder import ChangeDecoder
    from laketide.writer.changes.schema_registry import SchemaRegistry

    old = PostgresTable(columns=POSTGRES_COLUMNS[:4])
    new = PostgresTable(
        columns=[*POSTGRES_COLUMNS[:4], Column("middle", "STRING", {"type": "string", "optional": True})], lsn=5000
    )
    four = ("id", "name", "region", "amount")
    first = old.upsert({k: sample_row(1)[k] for k in four})
    second = new.upsert({**{k: sample_row(2)[k] for k in four}, "middle": "m"})
    registry = SchemaRegistry("http://registry.invalid")
    registry.schemas = {7: avro_schema(first["schema"]), 8: avro_schema(second["schema"])}
    values = AvroValues(None, registry)
    values.by_id[9] = "schema id 9 is not in the schema registry http://registry.invalid"
    framed = [avro_value(first, schema_id=7), avro_value(second, schema_id=8), b"\x00\x00\x00\x00\x09abc"]
    records = pa.table(
        {
            "value": pa.array(framed, pa.binary()),
            "topic": ["pg.public.orders"] * 3,
            "partition": pa.array([0] * 3, pa.int32()),
            "offset": pa.array(range(3), pa.int64()),
        }
    )
    decoder = ChangeDecoder(None, ("id",), ("id",), Decoding(), values)
    columns = decoder.columns(decoder.schemas(records), None)
    assert columns.names == ["id", "name", "region", "amount", "middle"]
    rows = decoder.rows(records, columns)[0].to_pylist()
    assert rows[0]["middle"] is None and rows[1]["middle"] == "m" and rows[1]["amount"] == sample_row(2)["amount"]
    assert rows[2]["_lt_decode_reason"] == "schema id 9 is not in the schema registry http://registry.invalid"


def test_an_avsc_that_is_not_a_change_event_is_refused():
    from laketide.table.errors import Invalid
    from laketide.writer.changes.connect.avro import AvroChanges

    with pytest.raises(Invalid, match="not a Debezium change event"):
        AvroChanges({"type": "record", "name": "Row", "fields": [{"name": "id", "type": "long"}]})


@pytest.mark.parametrize("handling", ["precise", "string"])
def test_decimal_text_without_a_schema_is_never_read_as_base64_silently(handling):
    """``decimal.handling.mode = string`` sends ``"1234"``, which is base64 of three bytes too. Under ``precise``
    such digits are base64 only when another value of the column in the micro-batch can only be base64;
    under ``string`` they are text unless another value can only be base64. Otherwise: quarantined, naming
    the setting."""
    spec = ChangeSpec(
        pa.schema([("id", pa.int64()), ("amount", pa.decimal128(10, 2))]), ("id",), Decoding(None, handling)
    )

    def event(i: int, amount: str) -> dict:
        return {"op": "c", "after": {"id": i, "amount": amount}, "source": {"connector": "mysql", "ts_ms": 1}}

    as_text = decode([event(1, "12.34"), event(2, "1234"), event(3, "1000")], spec)
    as_base64 = decode([event(1, "BNI="), event(2, "1234")], spec)  # BNI= is 12.34 at scale 2
    digits_alone = decode([event(2, "1234"), event(3, "1000")], spec)
    if handling == "string":
        assert [r["amount"] for r in as_text] == [Decimal("12.34"), Decimal("1234.00"), Decimal("1000.00")]
        assert [r["amount"] for r in digits_alone] == [Decimal("1234.00"), Decimal("1000.00")]
        assert all("decimal_handling = 'precise'" in r["_lt_decode_reason"] for r in as_base64)
    else:
        assert all(r["amount"] is None and "decimal_handling = 'string'" in r["_lt_decode_reason"] for r in as_text)
        assert all(r["amount"] is None and "not proven" in r["_lt_decode_reason"] for r in digits_alone)
        assert [r["amount"] for r in as_base64] == [Decimal("12.34"), Decimal("-26588.24")]
        assert all(r["_lt_decode_reason"] is None for r in as_base64)


def test_integer_times_without_a_schema_need_their_unit_and_implausible_timestamps_are_quarantined():
    columns = pa.schema([("id", pa.int64()), ("at", pa.time64("us")), ("ts", pa.timestamp("us", "UTC"))])

    def event(i: int, at: int, ts: int) -> dict:
        return {"op": "c", "after": {"id": i, "at": at, "ts": ts}, "source": {"connector": "mysql", "ts_ms": 1}}

    events = [event(1, 45_296_000, 1_732_000_000_000), event(2, 45_296_000_000, 1_732_000_000_000_000)]
    no_unit = decode(events, ChangeSpec(columns, ("id",)))
    assert all("column 'at'" in r["_lt_decode_reason"] and "timestamp_unit" in r["_lt_decode_reason"] for r in no_unit)
    in_ms = decode(events, ChangeSpec(columns, ("id",), Decoding(timestamp_unit="ms")))
    assert in_ms[0]["_lt_decode_reason"] is None and in_ms[0]["at"] == dt.time(12, 34, 56)
    assert in_ms[0]["ts"] == dt.datetime(2024, 11, 19, 7, 6, 40, tzinfo=dt.UTC)
    # µs sent where ms are set: a time beyond a day, a timestamp tens of thousands of years ahead
    assert "column 'at'" in in_ms[1]["_lt_decode_reason"] and in_ms[1]["at"] is None and in_ms[1]["ts"] is None
    in_us = decode(events[:1], ChangeSpec(columns, ("id",), Decoding(timestamp_unit="us")))
    assert "column 'ts'" in in_us[0]["_lt_decode_reason"] and "another unit" in in_us[0]["_lt_decode_reason"]


@pytest.mark.parametrize("with_schema", [True, False], ids=["schema", "bare"])
def test_every_column_events_carry_is_written_or_counted(with_schema):
    """A column the events carry that ``source.schema`` lacks is counted, with its schema or without; a column
    ``source.schema`` declares that the event's schema block does not describe is decoded by the declared type.
    (With the schema, the columns carried are those its block describes: Kafka Connect's converter writes the
    payload of exactly those fields.)"""
    table = PostgresTable(with_schema=with_schema)
    events = [table.upsert(sample_row(i, 1)) for i in range(3)]
    for e in events:
        payload = e.get("payload", e)
        payload["after"]["extra"] = "carried"
        payload["after"]["undescribed"] = 7
    columns = [c for c in SPEC.columns if c.name not in ("amount",)]
    spec = ChangeSpec(pa.schema([*columns, pa.field("undescribed", pa.int64())]), ("id",), Decoding("us"))
    values = pa.array([json.dumps(e).encode() for e in events], pa.binary())
    changed = change_rows(parse_messages(values), pa.array(["pg.public.orders"] * 3), spec)
    assert changed.unknown_fields["amount"] == 3
    assert changed.unknown_fields["extra"] == (0 if with_schema else 3)
    assert changed.rows["undescribed"].to_pylist() == [7, 7, 7]


@pytest.mark.parametrize(
    ("target", "scale"),
    [(pa.decimal128(10, 2), 2), (pa.decimal128(4, 2), 2), (pa.decimal128(38, 6), 6), (pa.decimal128(12, 4), 2)],
)
def test_connect_decimals_decode_alike_through_the_target_storage_and_through_python_decimals(target, scale):
    """A Connect Decimal column straight into a decimal of its scale (the unscaled integers as its storage) gives
    the values and reasons the exact path of Python's decimals gives, over the edges: signs, the precision's bound,
    integers past 64 bits, text that is not base64, nulls."""
    from laketide.writer.changes.connect import codecs
    from laketide.writer.changes.connect.column import Decoding
    from laketide.writer.changes.connect.schema import Encoding
    from laketide.writer.changes.connect.values import Column

    numbers = [0, 1, -1, 9999, -9999, 10_000, -10_000, 2**63 - 1, -(2**63), 10**20, -(10**20), 123_456_789]
    texts = [decimal_bytes(Decimal(n).scaleb(-scale), scale) for n in numbers] + ["not base64!", None]
    encoding = Encoding.of(
        {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": str(scale)}}
    )
    column = Column("amount", encoding, target, Decoding())
    fast = column.decode(pa.array(texts, pa.string()))
    exact = column._from_decimals(codecs.base64_decimals(pa.array(texts, pa.string()), scale))
    assert fast.values.to_pylist() == exact.values.to_pylist()
    assert fast.reasons.to_pylist() == exact.reasons.to_pylist()
    assert any(fast.values.to_pylist()) and any(r is not None for r in fast.reasons.to_pylist())
