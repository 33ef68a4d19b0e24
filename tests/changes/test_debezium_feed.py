"""`laketide run` fed by Kafka (Tansu) with Debezium's own event shapes (``connect_events``), each table read
back with hudi-rs and compared with the source table the events describe, after every run.

Postgres under REPLICA IDENTITY DEFAULT (a delete's ``before`` holds the key alone, an update has no
``before``), into a table partitioned on a column that is not the key; rows that move partition; every
logical type under Debezium's defaults; and the connector's other messages (transaction metadata,
heartbeats, schema changes, logical decoding messages) on matched topics. The same events as the Avro
converter writes them (REPLICA IDENTITY FULL, columns from the .avsc), and MySQL's without their schema,
through a failover, from landing files of JSON lines.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from decimal import Decimal

import pyarrow.parquet as pq
import pytest
from chaoslib import Job, wait_until
from connect_events import (
    DDL,
    HEARTBEAT,
    LOGICAL_MESSAGE,
    NAMES,
    POSTGRES_COLUMNS,
    SCHEMA_CHANGE,
    TOAST,
    TRANSACTION_BEGIN,
    TRANSACTION_END,
    Column,
    MySqlTable,
    PostgresTable,
    avro_schema,
    avro_value,
    decimal_bytes,
    sample_row,
)
from opslib import CLI, ENV
from readback import hudi_read, rows

TOPIC, TRANSACTIONS, HEARTBEATS, SCHEMA_TOPIC = "pg.public.orders", "pg.transaction", "__debezium-heartbeat.pg", "pg"
TOASTED = ("name", "doc", "blob")  # text and bytes columns Postgres may store out of line


def conf(root, bootstrap: str, **more: str) -> list[str]:
    settings = {
        "table.path": str(root / "table"),
        "table.name": "orders",
        "table.record_key": '["id"]',
        "table.partition_by": '["region"]',
        "source.format": "kafka",
        "source.kafka.bootstrap_servers": bootstrap,
        "source.kafka.topics": json.dumps([TOPIC, TRANSACTIONS, HEARTBEATS, SCHEMA_TOPIC]),
        "source.schema": DDL,
        "source.envelope": "debezium",
        "stream.checkpoint": str(root / "checkpoint"),
        "stream.trigger": "available-now",
        "write.index_shards": "2",
        "write.parallelism": "2",
        **more,
    }
    # an empty source.schema leaves it out: the columns come from the events
    left_out = {"source.schema"} if settings["source.schema"] == "" else set()
    if settings["source.format"] != "kafka":
        left_out |= {k for k in settings if k.startswith("source.kafka.")}
    return [a for k, v in settings.items() if k not in left_out for a in ("--conf", f"{k}={v}")]


def run(root, bootstrap: str, expect: int = 0, **more: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [CLI, "run", *conf(root, bootstrap, **more)], capture_output=True, text=True, env=ENV, timeout=600
    )
    with open(root / "runs.log", "a") as log:
        log.write(done.stderr)
    assert done.returncode == expect, (
        f"laketide run exited {done.returncode} (all of it in {root / 'runs.log'}):\n{done.stderr[-3000:]}"
    )
    return done


def send(kafka, events: list[dict], avro: bool = False, schema_id: int = 41) -> None:
    """Each change event to the partition of its key, as Debezium's producer does; as the Avro converter's
    value (Confluent's framing, ``schema_id``) with ``avro``."""
    for e in events:
        payload = e.get("payload", e)
        image = payload["before"] if payload["op"] == "d" else payload["after"]
        kafka.produce(TOPIC, image["id"] % 3, {"id": image["id"]}, avro_value(e, schema_id=schema_id) if avro else e)


def table_rows(root) -> list[dict]:
    read = rows(hudi_read(root / "table"), "id", NAMES)
    for r in read:
        for name, value in r.items():
            if isinstance(value, dt.datetime):
                r[name] = value.astimezone(dt.UTC)
    return read


def expected(source: PostgresTable) -> list[dict]:
    out = source.expected(NAMES)
    for r in out:
        for name, value in r.items():
            if isinstance(value, dt.datetime):
                r[name] = value.astimezone(dt.UTC)
    return out


def quarantined(root) -> list[dict]:
    return (
        [r for f in (root / "table_quarantine").rglob("*.parquet") for r in pq.read_table(f).to_pylist()]
        if (root / "table_quarantine").exists()
        else []
    )


@pytest.mark.parametrize(
    "table_type,driver_batch_bytes", [("COPY_ON_WRITE", "64m"), ("MERGE_ON_READ", "0")], ids=["cow-driver", "mor-tasks"]
)
def test_postgres_events_keep_one_row_per_key_with_every_type_decoded(kafka, tmp_path, table_type, driver_batch_bytes):
    """Copy-on-write written by the driver's threads, merge-on-read by Spark's tasks (``write.driver_batch_bytes =
    0``)."""
    for topic, partitions in ((TOPIC, 3), (TRANSACTIONS, 1), (HEARTBEATS, 1), (SCHEMA_TOPIC, 1)):
        kafka.create_topic(topic, partitions)
    source = PostgresTable()
    snapshot = [source.upsert(sample_row(i, 0), op="r") for i in range(30)]
    # streaming begins while the snapshot is read: a TOASTed value unchanged keeps the one just inserted
    snapshot += [source.upsert(sample_row(i, 1)) for i in (40, 41)] + [
        source.upsert(sample_row(i, 2), unchanged=TOASTED) for i in (40, 41)
    ]
    send(kafka, snapshot)
    kafka.produce(HEARTBEATS, 0, {"serverName": "pg"}, HEARTBEAT)
    on = {"write.driver_batch_bytes": driver_batch_bytes}
    first = run(tmp_path, kafka.bootstrap, **{"table.type": table_type}, **on)
    assert table_rows(tmp_path) == expected(source)

    kafka.produce(TRANSACTIONS, 0, {"id": "571:53195829"}, TRANSACTION_BEGIN)
    changes = [source.upsert(sample_row(i, 1)) for i in range(0, 30, 3)]  # updates in place
    moved = [i for i in range(1, 30, 3)]
    changes += [source.upsert(sample_row(i, 2, region="moved")) for i in moved]  # to another partition
    changes += [source.delete(i) for i in range(2, 30, 6)]  # the key alone in before
    changes += [source.upsert(sample_row(i, 3)) for i in range(30, 36)]  # new keys
    changes += [source.upsert(sample_row(4, 5, region="eu"))]  # moves and moves back in one micro-batch
    # unchanged TOASTed columns: from the stored row, or from an earlier event of the micro-batch
    changes += [source.upsert(sample_row(i, 6), unchanged=TOASTED) for i in (5, 7, 9, 40)]
    changes += [source.upsert(sample_row(50, 1)), source.upsert(sample_row(50, 2), unchanged=TOASTED)]
    changes += [source.upsert(sample_row(11, 7)), source.upsert(sample_row(11, 8), unchanged=("doc",))]
    send(kafka, changes)
    kafka.produce(TRANSACTIONS, 0, {"id": "571:53195832"}, TRANSACTION_END)
    kafka.produce(HEARTBEATS, 0, {"serverName": "pg"}, HEARTBEAT)
    kafka.produce(SCHEMA_TOPIC, 0, {"databaseName": "inventory"}, SCHEMA_CHANGE)
    kafka.produce(TOPIC, 0, {"id": 0}, LOGICAL_MESSAGE)
    second = run(tmp_path, kafka.bootstrap, **on)
    assert table_rows(tmp_path) == expected(source)
    assert quarantined(tmp_path) == []
    assert not any(TOAST in str(v) for r in table_rows(tmp_path) for v in r.values())
    read = hudi_read(tmp_path / "table").to_pylist()
    assert {r["id"]: r["_hoodie_partition_path"] for r in read if r["id"] in moved} == {
        i: source.rows[i]["region"] for i in moved if i in source.rows
    }
    assert (" on tasks " in second.stderr) == (driver_batch_bytes == "0")
    assert "skipped=heartbeat:1" in first.stderr
    assert (
        "heartbeat:1" in second.stderr
        and "transaction:2" in second.stderr
        and "schema_change:1" in second.stderr
        and "message:1" in second.stderr
    )

    # a third run deletes what moved, by key alone, from its new partition; a TOASTed value unchanged again
    # keeps the value of a row that a log holds (merge-on-read) or a base file (copy-on-write)
    send(
        kafka,
        [source.delete(i) for i in moved if i in source.rows]
        + [source.upsert(sample_row(i, 9), unchanged=TOASTED) for i in (5, 11, 50)],
    )
    run(tmp_path, kafka.bootstrap, **on)
    assert table_rows(tmp_path) == expected(source)


def test_avro_events_with_replica_identity_full_take_their_columns_from_the_avsc(kafka, tmp_path):
    """The Avro converter's values (Confluent's framing) under the .avsc AvroData makes of the connector's schema,
    no source.schema: every logical type, full ``before`` images, moves, deletes and TOAST placeholders, on
    merge-on-read written by Spark's tasks (the decoder travels to them)."""
    kafka.create_topic(TOPIC, 3)
    source = PostgresTable(full=True)
    snapshot = [source.upsert(sample_row(i, 0), op="r") for i in range(24)]
    (tmp_path / "orders.avsc").write_text(json.dumps(avro_schema(snapshot[0]["schema"])))
    send(kafka, snapshot, avro=True)
    on = {
        "source.schema": "",
        "source.value_format": "avro",
        "source.avro_schema": str(tmp_path / "orders.avsc"),
        "table.type": "MERGE_ON_READ",
        "write.driver_batch_bytes": "0",
    }
    run(tmp_path, kafka.bootstrap, **on)
    assert table_rows(tmp_path) == as_text_price(expected(source))
    changes = [source.upsert(sample_row(i, 1)) for i in range(0, 24, 4)]
    changes += [source.upsert(sample_row(i, 2, region="moved")) for i in range(1, 24, 4)]
    changes += [source.delete(i) for i in range(2, 24, 4)]
    changes += [source.upsert(sample_row(i, 3), unchanged=TOASTED) for i in (3, 7, 1)]
    send(kafka, changes, avro=True)
    kafka.produce(TOPIC, 2, {"id": 999}, b"\x00\x00\x00\x00\x29\xff")  # framed, but not a datum of the .avsc
    run(tmp_path, kafka.bootstrap, **on)
    assert table_rows(tmp_path) == as_text_price(expected(source))
    bad = quarantined(tmp_path)
    assert len(bad) == 1 and "not Avro of source.avro_schema" in bad[0]["reason"]


def as_text_price(rows: list[dict]) -> list[dict]:
    """Columns taken from the events store a VariableScaleDecimal as its exact text (its scale varies by row)."""
    return [{**r, "price": None if r["price"] is None else str(r["price"])} for r in rows]


@pytest.fixture
def registry():
    from schema_registry import SchemaRegistryServer

    server = SchemaRegistryServer().start()
    try:
        yield server
    finally:
        server.stop()


def test_avro_values_under_the_schema_registry_take_an_added_column_as_it_comes(kafka, registry, tmp_path):
    """Each value read under the registry's schema of the id in its framing: events before and after a column
    was added, in one micro-batch, give the table both; each id is asked for once per job; an id the registry
    lacks is quarantined. Copy-on-write without partitions, written by Spark's tasks (the ids are looked up
    before they start)."""
    kafka.create_topic(TOPIC, 3)
    four = [c for c in POSTGRES_COLUMNS if c.name in ("id", "name", "region", "amount", "created_at")]
    middle = Column("middle_name", "STRING", {"type": "string", "optional": True})
    old, new = PostgresTable(columns=four), PostgresTable(columns=[*four, middle])
    names = [c.name for c in four]

    def row(i: int, version: int) -> dict:
        return {k: sample_row(i, version)[k] for k in names}

    snapshot = [old.upsert(row(i, 0), op="r") for i in range(10)]
    old_id = registry.register(f"{TOPIC}-value", avro_schema(snapshot[0]["schema"]))
    send(kafka, snapshot, avro=True, schema_id=old_id)
    new.rows, new.lsn = {k: {**v, "middle_name": None} for k, v in old.rows.items()}, old.lsn
    added = [new.upsert({**row(i, 1), "middle_name": f"m{i}"}) for i in (2, 3, 20)]
    new_id = registry.register(f"{TOPIC}-value", avro_schema(added[0]["schema"]))
    send(kafka, added, avro=True, schema_id=new_id)
    kafka.produce(TOPIC, 0, {"id": 1}, b"\x00\x00\x00\x03\xe7\x00\x02")  # framed with an id the registry lacks
    on = {
        "source.schema": "",
        "source.value_format": "avro",
        "source.schema_registry.url": registry.url,
        "write.driver_batch_bytes": "0",
        "table.partition_by": "[]",
    }  # and a table without partitions
    run(tmp_path, kafka.bootstrap, **on)
    wanted = [*names, "middle_name"]
    assert _read_or_none(tmp_path, wanted) == _model(new.rows, wanted)
    bad = quarantined(tmp_path)
    assert len(bad) == 1 and bad[0]["reason"] == f"schema id 999 is not in the schema registry {registry.url}"
    assert sorted(registry.lookups) == sorted({old_id, new_id, 999})
    send(
        kafka,
        [new.upsert({**row(i, 2), "middle_name": f"n{i}"}) for i in (4, 5)] + [new.delete(6)],
        avro=True,
        schema_id=new_id,
    )
    run(tmp_path, kafka.bootstrap, **on)
    assert _read_or_none(tmp_path, wanted) == _model(new.rows, wanted)


MYSQL_DDL = "id BIGINT, name STRING, region STRING, amount DECIMAL(10,2), born DATE, updated_at TIMESTAMP"
MYSQL_NAMES = ["id", "name", "region", "amount", "born", "updated_at"]


def _mysql_row(i: int, version: int, region: str | None = None) -> dict:
    return {
        "id": i,
        "name": f"c{i}.{version}",
        "region": region or ("eu", "us")[i % 2],
        "amount": sample_row(i, version)["amount"],
        "born": dt.date(1980 + i % 30, 1 + i % 12, 1 + i % 27),
        "updated_at": dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
        + dt.timedelta(milliseconds=i * 37 + version * 1001),
    }


def _mysql_sent(values: dict) -> dict:
    """As the MySQL connector sends a row without its schema under Debezium's defaults (decimal precise,
    DATE as days, DATETIME(3) as ms)."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return {
        **values,
        "amount": decimal_bytes(values["amount"], 2),
        "born": (values["born"] - dt.date(1970, 1, 1)).days,
        "updated_at": (values["updated_at"] - epoch) // dt.timedelta(milliseconds=1),
    }


def _mysql_settings(landing, **more: str) -> dict[str, str]:
    """A job of MySQL's events without their schema from landing files of JSON lines."""
    settings = {"source.format": "json", "source.path": str(landing), "source.schema": MYSQL_DDL}
    return {**settings, "source.debezium.timestamp_unit": "ms", **more}


def _mysql_read(root) -> list[dict]:
    return _normal(rows(hudi_read(root / "table"), "id", MYSQL_NAMES))


def test_mysql_events_without_their_schema_from_landing_files_through_a_failover(tmp_path):
    """Landing files of JSON lines (as Kafka Connect's file and S3 sinks write them), MySQL's events with
    schemas off under a declared source.schema; full before images, moves between partitions; a failover to a
    server whose binlog numbers start lower, kept in order by ``ordering = "ts_ms"`` and counted; a line that
    is not JSON goes to quarantine with its file, a blank one is no event."""
    landing = tmp_path / "landing"
    landing.mkdir()
    mysql, model = MySqlTable(), {}

    def upsert(values: dict) -> dict:
        model[values["id"]] = values
        return mysql.upsert(_mysql_sent(values))

    def delete(key: int) -> dict:
        model.pop(key)
        return mysql.delete(key)

    def land(name: str, events: list, extra: str = "") -> None:
        (landing / name).write_text("".join(json.dumps(e) + "\n" for e in events) + extra)

    def read() -> list[dict]:
        return _mysql_read(tmp_path)

    settings = _mysql_settings(landing, **{"source.debezium.ordering": "ts_ms", "table.type": "COPY_ON_WRITE"})
    land("0001.json", [upsert(_mysql_row(i, 0)) for i in range(16)], extra="\n{not json\n")
    run(tmp_path, "unused:1", **settings)
    assert read() == _model(model, MYSQL_NAMES)
    bad = quarantined(tmp_path)
    assert len(bad) == 1 and bad[0]["raw"] == "{not json"
    events = [upsert(_mysql_row(i, 1)) for i in range(0, 16, 3)] + [
        upsert(_mysql_row(i, 2, region="moved")) for i in (1, 4)
    ]
    events += [delete(i) for i in (2, 5)]
    mysql.fail_over()
    events += [upsert(_mysql_row(i, 3)) for i in (0, 1, 20)] + [delete(7)]
    land("0002.json", events)
    done = run(tmp_path, "unused:1", **settings)
    assert read() == _model(model, MYSQL_NAMES)
    assert "log_behind=4" in done.stderr
    # back to ordering by position would sort every new event before the stored rows: refused before writing
    land("0003.json", [upsert(_mysql_row(3, 4))])
    refused = run(tmp_path, "unused:1", expect=2, **{**settings, "source.debezium.ordering": "position"})
    assert "Keep source.debezium.ordering = 'ts_ms' for this table" in refused.stderr


def test_a_mysql_failover_seen_across_a_restart_stops_before_writing_or_goes_over_to_commit_times(tmp_path):
    """A snapshot at binlog file 3, the job stopped; the new primary's events at file 1 (later times) come to the
    next run. By default it stops before writing, naming both points; ``on_log_reset = "ts_ms"`` applies them and
    keeps the table on commit times; the run after goes on by commit time with nothing behind."""
    landing = tmp_path / "landing"
    landing.mkdir()
    mysql, model = MySqlTable(file=3), {}

    def land(name: str, rows: list[dict], op: str | None = None) -> None:
        events = []
        for values in rows:
            model[values["id"]] = values
            events.append(mysql.upsert(_mysql_sent(values), op=op))
        (landing / name).write_text("".join(json.dumps(e) + "\n" for e in events))

    def read() -> list[dict]:
        return _mysql_read(tmp_path)

    settings = _mysql_settings(landing, **{"table.type": "MERGE_ON_READ"})
    land("0001.json", [_mysql_row(i, 0) for i in range(20)], op="r")
    run(tmp_path, "unused:1", **settings)
    assert read() == _model(model, MYSQL_NAMES)
    before = sorted(p.name for p in (tmp_path / "table" / ".hoodie").iterdir())
    stored = dict(model)
    mysql.fail_over()
    land("0002.json", [_mysql_row(i, 1) for i in range(10)])
    refused = run(tmp_path, "unused:1", expect=2, **settings)
    assert "10 change events" in refused.stderr and "binlog file 1 position 204 on server 2" in refused.stderr
    assert "binlog file 3 position" in refused.stderr and "on_log_reset = 'ts_ms'" in refused.stderr
    assert sorted(p.name for p in (tmp_path / "table" / ".hoodie").iterdir()) == before
    assert read() == _model(stored, MYSQL_NAMES)

    applied = run(tmp_path, "unused:1", **settings, **{"source.debezium.on_log_reset": "ts_ms"})
    assert read() == _model(model, MYSQL_NAMES)
    assert "log_behind=10" in applied.stderr and " late=0 " in applied.stderr
    land("0003.json", [_mysql_row(i, 2) for i in range(5, 15)])
    after = run(tmp_path, "unused:1", **settings, **{"source.debezium.on_log_reset": "ts_ms"})
    assert read() == _model(model, MYSQL_NAMES) and "log_behind=" not in after.stderr
    # the table went over to commit times: ordering by position again is refused, naming the setting
    land("0004.json", [_mysql_row(3, 3)])
    refused = run(tmp_path, "unused:1", expect=2, **settings)
    assert "on_log_reset = 'ts_ms'" in refused.stderr


def test_a_postgres_restore_seen_across_a_restart_is_counted_and_applied_as_chosen(kafka, tmp_path):
    """Postgres restored behind what was sent: its commit LSNs go back, its times go on. Across a restart the job
    stops before writing; under ``on_log_reset = "position"`` the events are written by position and counted,
    each older than its stored row dropped as late, as that setting says."""
    kafka.create_topic(TOPIC, 3)
    source = PostgresTable(sequence=True)
    send(kafka, [source.upsert(sample_row(i, 0)) for i in range(12)])
    run(tmp_path, kafka.bootstrap)
    assert table_rows(tmp_path) == expected(source)
    kept = expected(source)
    source.restore(source.lsn - 200)  # behind every stored row
    send(kafka, [source.upsert(sample_row(i, 1)) for i in range(3)])
    refused = run(tmp_path, kafka.bootstrap, expect=2)
    assert "commit LSN" in refused.stderr and "Nothing of this micro-batch was written" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert table_rows(tmp_path) == kept
    done = run(tmp_path, kafka.bootstrap, **{"source.debezium.on_log_reset": "position"})
    assert "log_behind=3" in done.stderr and "late=3" in done.stderr
    assert table_rows(tmp_path) == kept


@pytest.mark.parametrize("handling", ["precise", "string"])
def test_decimal_text_and_undeclared_columns_without_a_schema_are_stored_right_or_accounted_for(tmp_path, handling):
    """MySQL's events without their schema, from a connector with ``decimal.handling.mode = string``, carrying a
    column ``source.schema`` lacks. Under ``precise`` (laketide's default) digits like ``"1234"`` are not read as
    base64: every such event goes to quarantine naming the setting; under ``string`` each is stored as sent. The
    column the table does not hold is counted in the log line and warned of."""
    landing = tmp_path / "landing"
    landing.mkdir()
    mysql, amounts = MySqlTable(), {1: "12.34", 2: "1234", 3: "1000", 4: "0.5"}
    events = []
    for i, amount in amounts.items():
        events.append(mysql.upsert({**_mysql_sent(_mysql_row(i, 0)), "amount": amount, "note": f"n{i}"}))
    (landing / "0001.json").write_text("".join(json.dumps(e) + "\n" for e in events))
    settings = _mysql_settings(landing, **{"source.debezium.decimal_handling": handling})
    done = run(tmp_path, "unused:1", **settings)
    assert "unknown_fields=note:4" in done.stderr and "carry column 'note'" in done.stderr
    bad = quarantined(tmp_path)
    if handling == "string":
        stored = {r["id"]: r["amount"] for r in _mysql_read(tmp_path)}
        assert stored == {i: Decimal(a).quantize(Decimal("0.01")) for i, a in amounts.items()} and bad == []
    else:
        assert len(bad) == 4 and all("decimal_handling" in r["reason"] for r in bad)


def test_events_of_two_source_tables_stop_the_job_before_writing(kafka, tmp_path):
    kafka.create_topic(TOPIC, 3)
    orders, customers = PostgresTable(), PostgresTable(table="customers")
    send(kafka, [orders.upsert(sample_row(1)), customers.upsert(sample_row(2))])
    done = run(tmp_path, kafka.bootstrap, expect=2)
    assert "shop.public.customers, shop.public.orders" in done.stderr and "its own job" in done.stderr
    # the job's one line, without the tracebacks of py4j and Spark's streaming engine around it
    assert "Traceback" not in done.stderr and "ForeachBatchUserFuncException" not in done.stderr
    assert not (tmp_path / "table" / ".hoodie").exists() or not list((tmp_path / "table" / ".hoodie").glob("*.commit"))


def test_a_truncate_empties_the_table_where_it_stands_in_the_feed(kafka, tmp_path):
    """Rows before the truncate are gone, stored or in the same micro-batch; those after it stay. With
    ``source.debezium.truncate = "skip"`` it is counted and the rows stay."""
    kafka.create_topic(TOPIC, 3)
    source = PostgresTable()
    send(kafka, [source.upsert(sample_row(i, 0), op="r") for i in range(12)])
    run(tmp_path, kafka.bootstrap, **{"table.type": "MERGE_ON_READ"})
    events = [source.upsert(sample_row(i, 1)) for i in range(3)] + [source.upsert(sample_row(20, 1))]
    truncate = source.truncate()
    kafka.produce(TOPIC, 1, None, truncate)  # a truncate has no key: any partition
    send(kafka, events)
    after = [source.upsert(sample_row(i, 2)) for i in (1, 30, 31)]
    send(kafka, after)
    done = run(tmp_path, kafka.bootstrap)
    assert table_rows(tmp_path) == expected(source) and len(expected(source)) == 3
    assert "replaced=" in done.stderr
    from laketide.table import Table

    timeline = Table.open(str(tmp_path / "table")).timeline
    assert timeline.completed_writes()[-1].action == "replacecommit"

    kept = PostgresTable()
    send(kafka, [kept.upsert(sample_row(i, 3)) for i in (40, 41)])
    kafka.produce(TOPIC, 0, None, kept.truncate())
    skipped = run(tmp_path, kafka.bootstrap, **{"source.debezium.truncate": "skip"})
    assert "truncate:1" in skipped.stderr
    assert [r["id"] for r in table_rows(tmp_path)] == [1, 30, 31, 40, 41]


def test_columns_come_from_the_events_and_an_added_one_joins_without_a_restart(kafka, tmp_path):
    """No source.schema: the table takes the events' columns; a column added in the source database (its events
    carry it from then on) is added to the running job's table, and rows written before read null."""
    kafka.create_topic(TOPIC, 3)
    base = [c for c in POSTGRES_COLUMNS if c.name in ("id", "name", "region", "amount", "created_at", "birthday")]
    middle = Column("middle_name", "STRING", {"type": "string", "optional": True})
    before, after = PostgresTable(columns=base), PostgresTable(columns=[*base, middle])
    names = [c.name for c in base]

    def row(i: int, version: int, with_middle: bool = False) -> dict:
        values = {k: v for k, v in sample_row(i, version).items() if k in names}
        return {**values, "middle_name": f"m{i}.{version}"} if with_middle else values

    send(kafka, [before.upsert(row(i, 0), op="r") for i in range(10)])
    settings = {"source.schema": "", "stream.trigger": "1 second", "table.type": "MERGE_ON_READ"}
    job = Job([CLI, "run", *conf(tmp_path, kafka.bootstrap, **settings)], tmp_path / "job.log").start()
    try:
        wait_until(
            lambda: job.running() and _read_or_none(tmp_path, names) == _model(before.rows, names),
            240,
            "the first rows",
        )
        after.rows, after.lsn = {k: {**v, "middle_name": None} for k, v in before.rows.items()}, before.lsn
        send(kafka, [after.upsert(row(i, 1, with_middle=True)) for i in (2, 3, 20)])
        wanted = [*names, "middle_name"]
        wait_until(
            lambda: job.running() and _read_or_none(tmp_path, wanted) == _model(after.rows, wanted),
            240,
            "the added column",
        )
    finally:
        job.kill()
    assert "middle_name" not in (
        job.log_tail(200_000).split("unknown_fields=")[1] if "unknown_fields=" in job.log_tail(200_000) else ""
    )


def test_a_column_that_narrows_stops_the_job_naming_it(kafka, tmp_path):
    kafka.create_topic(TOPIC, 3)
    columns = [c for c in POSTGRES_COLUMNS if c.name in ("id", "name", "region", "amount")]
    source = PostgresTable(columns=columns)
    send(
        kafka,
        [
            source.upsert({k: v for k, v in sample_row(i, 0).items() if k in ("id", "name", "region", "amount")})
            for i in range(3)
        ],
    )
    run(tmp_path, kafka.bootstrap, **{"source.schema": ""})
    narrowed = [
        c if c.name != "amount" else Column("amount", "INT", {"type": "int32", "optional": True}) for c in columns
    ]
    changed = PostgresTable(columns=narrowed, lsn=5000)
    send(kafka, [changed.upsert({"id": 1, "name": "x", "region": "eu", "amount": 5})])
    done = run(tmp_path, kafka.bootstrap, expect=2, **{"source.schema": ""})
    assert "'amount'" in done.stderr and "decimal128(10, 2) in the table and int32" in done.stderr


def test_columns_the_declared_schema_lacks_are_counted_and_warned_about(kafka, tmp_path):
    kafka.create_topic(TOPIC, 3)
    source = PostgresTable()
    send(kafka, [source.upsert(sample_row(i, 0)) for i in range(4)])
    declared = ", ".join(f"{c.name} {c.ddl}" for c in POSTGRES_COLUMNS if c.name not in ("uid", "ratio"))
    done = run(tmp_path, kafka.bootstrap, **{"source.schema": declared})
    assert "unknown_fields=ratio:4,uid:4" in done.stderr
    assert done.stderr.count("change events carry column 'uid'") == 1


def _read_or_none(root, names: list[str]) -> list[dict] | None:
    try:
        read = hudi_read(root / "table")
    except Exception:
        return None
    if read.num_rows == 0 or any(n not in read.column_names for n in names):
        return None
    return _normal(rows(read, "id", names))


def _model(table_rows: dict[int, dict], names: list[str]) -> list[dict]:
    return _normal([{n: table_rows[k].get(n) for n in names} for k in sorted(table_rows)])


def _normal(read: list[dict]) -> list[dict]:
    for r in read:
        for name, value in r.items():
            if isinstance(value, dt.datetime):
                r[name] = value.astimezone(dt.UTC)
    return read
