"""A job of a whole database through `laketide run`: Kafka (Tansu) topics of Debezium's change events, one per
source table, each into its own Hudi table, read back with hudi-rs and compared with the source tables the
events describe."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
from chaoslib import Job, free_port, wait_until
from connect_events import POSTGRES_COLUMNS, TRANSACTION_BEGIN, TRANSACTION_END, Column, PostgresTable, sample_row
from fixture_tables import SUPPORT
from opslib import CLI, ENV
from readback import hudi_read

from laketide.table import Table
from laketide.table.format.commit import BATCH_ID_KEY

TOKEN = "db-token"
ORDERS = [c for c in POSTGRES_COLUMNS if c.name in ("id", "name", "region", "amount", "created_at", "birthday")]
CUSTOMERS = [c for c in POSTGRES_COLUMNS if c.name in ("id", "name", "active", "ratio", "seen_at", "doc")]
LINES = [
    Column("order_id", "BIGINT", {"type": "int64", "optional": False}),
    Column("line", "INT", {"type": "int32", "optional": False}),
    Column("sku", "STRING", {"type": "string", "optional": True}),
    Column("qty", "INT", {"type": "int32", "optional": True}),
]


def database() -> dict[str, PostgresTable]:
    return {
        "orders": PostgresTable(columns=list(ORDERS), table="orders"),
        "customers": PostgresTable(columns=list(CUSTOMERS), table="customers", lsn=50_000),
        "lines": PostgresTable(columns=list(LINES), table="lines", key=("order_id", "line"), lsn=90_000),
    }


def values(source: PostgresTable, i: int, version: int) -> dict:
    if source.table == "lines":
        return {"order_id": i // 3, "line": i % 3, "sku": f"sku-{i}-{version}", "qty": i + version}
    names = {c.name for c in source.columns}
    return {k: v for k, v in {**sample_row(i, version), "middle": f"m{i}.{version}"}.items() if k in names}


def send(kafka, source: PostgresTable, events: list[tuple[dict, dict]]) -> None:
    """(row values, event) pairs, each to the partition of its key, keyed as Debezium keys them."""
    for row, event in events:
        kafka.produce(
            source.topic,
            hash(json.dumps(source.kafka_key(row)["payload"], sort_keys=True)) % 3,
            source.kafka_key(row),
            event,
        )


def upserts(source: PostgresTable, keys, version: int, op: str | None = None) -> list[tuple[dict, dict]]:
    return [(row, source.upsert(row, op=op)) for row in (values(source, i, version) for i in keys)]


def deletes(source: PostgresTable, keys) -> list[tuple[dict, dict]]:
    out = []
    for key in keys:
        row = dict(source.rows[key])
        out.append((row, source.delete(key)))
    return out


@contextlib.contextmanager
def read_only(folder: Path):
    """Nothing can be created in or deleted from ``folder`` meanwhile: for root, whom modes do not stop, it is made
    immutable."""
    root = os.geteuid() == 0
    if root:
        subprocess.run(["chattr", "+i", str(folder)], check=True)
    else:
        folder.chmod(0o555)
    try:
        yield
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)


def conf(root, bootstrap: str, **more: str) -> list[str]:
    settings = {
        "table.path": f"{root}/lake/{{table}}",
        "table.type": "MERGE_ON_READ",
        "tables.orders.partition_by": '["region"]',
        "source.format": "kafka",
        "source.envelope": "debezium",
        "source.kafka.bootstrap_servers": bootstrap,
        "source.kafka.topic_pattern": r"pg\..*",
        "stream.checkpoint": str(root / "checkpoint"),
        "stream.trigger": "1 second",
        "write.index_shards": "1",
        "write.parallelism": "2",
        **more,
    }
    return [a for k, v in settings.items() for a in ("--conf", f"{k}={v}")]


def run(root, bootstrap: str, **more: str) -> subprocess.CompletedProcess:
    """One `laketide run` to its end; what it said is kept in runs.log."""
    done = subprocess.run(
        [CLI, "run", *conf(root, bootstrap, **more)], capture_output=True, text=True, env=ENV, timeout=300
    )
    with open(root / "runs.log", "a") as log:
        log.write(done.stderr)
    return done


def read(root, source: PostgresTable) -> list[dict] | None:
    path = root / "lake" / source.table
    try:
        table = hudi_read(path)
    except Exception:
        return None
    names = [c.name for c in source.columns]
    if any(n not in table.column_names for n in names):
        return None
    return sorted((_normal(r) for r in table.select(names).to_pylist()), key=lambda r: tuple(r[k] for k in source.key))


def model(source: PostgresTable) -> list[dict]:
    names = [c.name for c in source.columns]
    return [_normal({n: source.rows[k].get(n) for n in names}) for k in sorted(source.rows)]


def _normal(row: dict) -> dict:
    return {k: v.astimezone(dt.UTC) if isinstance(v, dt.datetime) else v for k, v in row.items()}


def all_equal(root, tables: dict[str, PostgresTable]) -> bool:
    return all(read(root, source) == model(source) for source in tables.values())


def snapshot_in_a_transaction(kafka, rows: int) -> dict[str, PostgresTable]:
    """The three source tables' topics, each table's first ``rows`` as a snapshot's events (``op = r``) inside one
    transaction, whose markers go to a topic of their own."""
    tables = database()
    for source in tables.values():
        kafka.create_topic(source.topic, 3)
    kafka.create_topic("pg.transaction", 1)
    kafka.produce("pg.transaction", 0, None, TRANSACTION_BEGIN)
    for source in tables.values():
        send(kafka, source, upserts(source, range(rows), 0, op="r"))
    kafka.produce("pg.transaction", 0, None, TRANSACTION_END)
    return tables


def each_equal_with_each_batch_once(root, tables: dict[str, PostgresTable], at_least: int) -> None:
    """Every table equals its model, and its commits name each micro-batch once, in order, ``at_least`` of them."""
    for name, source in tables.items():
        assert read(root, source) == model(source), name
        timeline = Table.open(str(root / "lake" / name)).timeline
        extras = [timeline.commit_metadata(i).extra_metadata for i in timeline.completed_writes()]
        batches = [int(extra[BATCH_ID_KEY]) for extra in extras if BATCH_ID_KEY in extra]  # compactions name none
        assert batches == sorted(set(batches)) and len(batches) >= at_least, (name, batches)


def test_every_topic_becomes_its_own_table_and_new_topics_and_columns_join_while_it_runs(kafka, metastore, tmp_path):
    tables = snapshot_in_a_transaction(kafka, 12)
    port = free_port()
    settings = {"coordinator.api_port": str(port), "coordinator.api_token": TOKEN}
    catalog = {"catalog.kind": "hive", "catalog.uri": metastore.uri, "catalog.database": "shop"}
    job = Job([CLI, "run", *conf(tmp_path, kafka.bootstrap, **settings, **catalog)], tmp_path / "job.log").start()
    try:
        wait_until(lambda: job.running() and all_equal(tmp_path, tables), 240, "three tables equal to their models")
        send(kafka, tables["orders"], upserts(tables["orders"], (1, 2, 30), 1) + deletes(tables["orders"], (4, 5)))
        send(kafka, tables["lines"], deletes(tables["lines"], ((0, 1), (2, 2))) + upserts(tables["lines"], (40, 41), 1))
        # a fourth source table: its topic appears while the job runs
        refunds = tables["refunds"] = PostgresTable(
            columns=[c for c in POSTGRES_COLUMNS if c.name in ("id", "amount")], table="refunds", lsn=200_000
        )
        kafka.create_topic(refunds.topic, 3)
        send(kafka, refunds, upserts(refunds, range(5), 0))
        # a column added to one source table arrives in its table only
        customers = tables["customers"]
        customers.columns.append(Column("middle", "STRING", {"type": "string", "optional": True}))
        customers.rows = {k: {**v, "middle": None} for k, v in customers.rows.items()}
        send(kafka, customers, upserts(customers, (3, 4, 50), 1))
        wait_until(
            lambda: job.running() and all_equal(tmp_path, tables), 240, "four tables, the added column and the changes"
        )
        operators_see_every_table(f"http://127.0.0.1:{port}", tmp_path)
    finally:
        job.signal(2)
        job.wait(120)
    assert "middle" not in hudi_read(tmp_path / "lake" / "orders").column_names
    log = job.log_tail(400_000)
    assert "table orders: micro-batch" in log and "skipped=transaction:2" in log, log[-3000:]
    assert sorted(p.name for p in (tmp_path / "lake").iterdir()) == ["customers", "lines", "orders", "refunds"]
    assert (tmp_path / "lake" / "orders" / "eu").is_dir()  # [tables.orders] partition_by
    properties = (tmp_path / "lake" / "lines" / ".hoodie" / "hoodie.properties").read_text()
    assert "hoodie.table.recordkey.fields=order_id,line" in properties
    every_table_registered(metastore, tmp_path / "lake")


def every_table_registered(metastore, lake: Path) -> None:
    """Each table of the database in the metastore under its own name, both of a merge-on-read table's entries at
    its last commit, the job's end included."""
    with metastore.client() as client:
        names = sorted(client.get_all_tables("shop"))
        assert names == sorted(f"{t}_{q}" for t in ("customers", "lines", "orders", "refunds") for q in ("ro", "rt"))
        for name in names:
            table = Table.open(str(lake / name.rsplit("_", 1)[0]))
            latest = table.timeline.latest_completed_write()
            entry = client.get_table("shop", name)
            assert latest is not None and entry.parameters["last_commit_time_sync"] == latest.timestamp, name
            assert entry.sd.location == f"file:{table.uri}"
        assert sorted(p.values[0] for p in client.get_partitions("shop", "orders_rt", -1)) == sorted(
            {s.partition for s in Table.open(str(lake / "orders")).file_system_view().latest_slices()}
        )


def operators_see_every_table(api: str, root: Path) -> None:
    """The REST API, the dashboard, the metrics and the CLI of a job of four tables."""
    listed = httpx.get(f"{api}/v1/tables", timeout=30).json()
    assert [t["name"] for t in listed] == ["customers", "lines", "orders", "refunds"], listed
    assert all(t["records"] > 0 and t["last_instant"] and t["quarantined"] == 0 for t in listed), listed
    assert {t["name"]: t["source_table"] for t in listed}["lines"] == "lines"
    unnamed = httpx.get(f"{api}/v1/writer", timeout=30)
    assert (
        unnamed.status_code == 400 and "?table=" in unnamed.json()["detail"] and "refunds" in unnamed.json()["detail"]
    )
    assert httpx.get(f"{api}/v1/writer", params={"table": "nope"}, timeout=30).status_code == 404
    writer = httpx.get(f"{api}/v1/writer", params={"table": "orders"}, timeout=30).json()
    assert writer["running"] and writer["recent"] and all(r["table"] == "orders" for r in writer["recent"])
    instants = httpx.get(f"{api}/v1/instants", params={"table": "refunds"}, timeout=30).json()
    assert len(instants["items"]) >= 1
    metrics = httpx.get(f"{api}/metrics", timeout=30).text
    assert all(
        f'laketide_commits_total{{table="{name}"}}' in metrics for name in ("customers", "lines", "orders", "refunds")
    ), metrics[-2000:]
    page = httpx.get(f"{api}/ui", timeout=30)
    assert page.status_code == 200 and 'href="/ui?table=refunds"' in page.text
    orders_page = httpx.get(f"{api}/ui", params={"table": "orders"}, timeout=30)
    assert orders_page.status_code == 200 and "X-Laketide-Table" in orders_page.text and "Timeline" in orders_page.text
    panel = httpx.get(f"{api}/ui/part/job", headers={"X-Laketide-Table": "lines"}, timeout=30)
    assert panel.status_code == 200
    in_a_browser(api)
    # the CLI acts on one table by its path, through the job's API
    saved = subprocess.run(
        [CLI, "savepoint", "create", str(root / "lake" / "lines"), "--token", TOKEN, "--comment", "db"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert saved.returncode == 0, saved.stderr[-2000:]
    points = httpx.get(f"{api}/v1/savepoints", params={"table": "lines"}, timeout=30).json()
    assert [p["comment"] for p in points] == ["db"], points
    assert httpx.get(f"{api}/v1/savepoints", params={"table": "orders"}, timeout=30).json() == []


def in_a_browser(api: str) -> None:
    """The dashboard in chromium: the table list, then one table's page, whose panels keep refreshing as that
    table's (htmx sends the table with every request), and an instant's detail opened by a click."""
    from browser import chromium
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{api}/ui")
        expect(page.locator("#tables table.tables tr")).to_have_count(5)  # a header and four tables
        page.get_by_role("link", name="lines", exact=True).click()
        expect(page.locator("header .table-name")).to_have_text("lines")
        for selector in ("#job dl", "#batches svg", "#timeline table", "#services dl", "#layout dl"):
            expect(page.locator(selector).first).to_be_attached(timeout=30_000)
        with page.expect_response(lambda r: "/ui/part/job" in r.url and r.status == 200, timeout=30_000):
            pass  # the job panel refreshed, as table lines's
        page.locator("#timeline tr.instant").first.click()
        expect(page.locator("#detail h3")).to_contain_text("Instant ")


def test_a_second_job_on_the_same_database_is_refused_naming_its_tables(kafka, tmp_path):
    tables = database()
    for source in tables.values():
        kafka.create_topic(source.topic, 3)
        send(kafka, source, upserts(source, range(3), 0, op="r"))
    first = Job([CLI, "run", *conf(tmp_path, kafka.bootstrap)], tmp_path / "first.log").start()
    try:
        wait_until(lambda: first.running() and all_equal(tmp_path, tables), 240, "the first job's tables")
        second = subprocess.run(
            [
                CLI,
                "run",
                *conf(
                    tmp_path,
                    kafka.bootstrap,
                    **{"stream.checkpoint": str(tmp_path / "cp2"), "database.lease_wait": "0"},
                ),
            ],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=300,
        )
    finally:
        first.signal(2)
        first.wait(120)
    assert second.returncode != 0
    err = second.stderr
    assert "3 table(s) of this database are written by another job" in err, err[-3000:]
    assert all(name in err for name in ("customers (", "lines (", "orders (")), err[-3000:]
    assert "Traceback" not in err.split("error:")[-1], "the error is a sentence, not a traceback"


def test_a_table_that_cannot_be_written_leaves_the_others_written(kafka, tmp_path):
    """The default stops the query after writing the other tables; the quarantine setting sets the failing
    table's records aside and goes on. Either way, once it can be written, nothing was lost or written twice."""
    tables = database()
    for source in tables.values():
        kafka.create_topic(source.topic, 3)
        send(kafka, source, upserts(source, range(6), 0, op="r"))
    available_now = {"stream.trigger": "available-now"}
    done = run(tmp_path, kafka.bootstrap, **available_now)
    assert done.returncode == 0, done.stderr[-3000:]
    assert all_equal(tmp_path, tables)
    lines = tmp_path / "lake" / "lines"
    for source in tables.values():
        send(kafka, source, upserts(source, range(4, 9), 1))
    with read_only(lines / ".hoodie"):
        stopped = run(tmp_path, kafka.bootstrap, **available_now)
    assert stopped.returncode != 0 and "table lines:" in stopped.stderr, stopped.stderr[-3000:]
    assert read(tmp_path, tables["orders"]) == model(tables["orders"]) and read(tmp_path, tables["customers"]) == model(
        tables["customers"]
    )
    assert read(tmp_path, tables["lines"]) != model(tables["lines"])
    # the next start replays the micro-batch: the tables that committed it skip it, lines writes it
    again = run(tmp_path, kafka.bootstrap, **available_now)
    assert again.returncode == 0, again.stderr[-3000:]
    assert all_equal(tmp_path, tables)
    assert "already_committed=2" in again.stderr, again.stderr[-3000:]

    # under database.on_table_failure = "quarantine" the job goes on, the failing table's records set aside
    for source in tables.values():
        send(kafka, source, upserts(source, range(2), 2))
    with read_only(lines / ".hoodie"):
        going_on = run(tmp_path, kafka.bootstrap, **available_now, **{"database.on_table_failure": "quarantine"})
    assert going_on.returncode == 0, going_on.stderr[-3000:]
    assert read(tmp_path, tables["orders"]) == model(tables["orders"])
    aside = [
        r for f in (tmp_path / "lake" / "lines_quarantine").rglob("*.parquet") for r in pq.read_table(f).to_pylist()
    ]
    assert len(aside) == 2 and all(r["reason"].startswith("table lines could not be written") for r in aside), aside
    raws = [
        json.loads(r["raw"]) for r in aside
    ]  # the raw form of every Kafka record in quarantine: where it was, and its value
    assert {json.loads(raw["value"])["payload"]["after"]["qty"] for raw in raws} == {2, 3} and {
        raw["topic"] for raw in raws
    } == {"pg.public.lines"}
    assert all(r["source"].startswith("pg.public.lines/") for r in aside)


def test_kill_9_cycles_leave_every_table_exact_with_no_micro_batch_twice(kafka, tmp_path):
    """Three jobs of the database killed while events of three tables keep arriving: the first right after two of
    the three tables committed its first micro-batch, the others (`laketide run`, SIGKILL to the whole process
    group) at random moments; a last run drains the topics. Every table equals its model, and each table's commits
    name each micro-batch once, in order."""
    tables, rng = database(), random.Random(11)
    for source in tables.values():
        kafka.create_topic(source.topic, 3)
    versions = iter(range(1, 10_000))

    def burst() -> None:
        for source in tables.values():
            keys = rng.sample(range(30), 4)
            gone = [k for k in list(source.rows)[:2] if rng.random() < 0.3]
            send(
                kafka,
                source,
                upserts(source, [k for k in keys if source.key_of(values(source, k, 0)) not in gone], next(versions)),
            )
            send(kafka, source, deletes(source, gone))

    burst()
    settings = {
        "source.kafka.max_offsets_per_trigger": "20",
        "coordinator.lease_wait": "30",
        "database.lease_wait": "30",
    }
    # one job dies between two tables' commits of one micro-batch: the next replays it, and those two skip it
    between = Job(
        [
            sys.executable,
            str(SUPPORT / "run_database_job.py"),
            "2",
            *conf(tmp_path, kafka.bootstrap, **settings)[1::2],
        ],
        tmp_path / "between.log",
    ).start()
    assert between.wait(180) == 137, between.log_tail()
    for cycle in range(2):  # each cycle is a job's start (15 to 30 s): the suite's time is bounded
        log = tmp_path / f"job-{cycle}.log"
        job = Job([CLI, "run", *conf(tmp_path, kafka.bootstrap, **settings)], log).start()
        # events for it to read: a job killed once it had read all there was left nothing to the next
        burst()
        wait_until(lambda job=job, log=log: not job.running() or "micro-batch" in log.read_text(), 180, "a micro-batch")
        for _ in range(rng.randint(1, 4)):
            burst()
            time.sleep(rng.uniform(0.0, 0.8))
        assert job.running(), job.log_tail()
        job.kill()
    assert (
        "micro-batch 0: tables=3 written=1 records=" in (tmp_path / "job-0.log").read_text()
        and "already_committed=2" in (tmp_path / "job-0.log").read_text()
    )
    drained = run(tmp_path, kafka.bootstrap, **{**settings, "stream.trigger": "available-now"})
    assert drained.returncode == 0, drained.stderr[-3000:]
    each_equal_with_each_batch_once(tmp_path, tables, 3)


def test_a_snapshot_too_big_for_the_driver_is_written_by_spark_tasks_exactly_once_per_table(kafka, tmp_path):
    """A snapshot (``op = r`` events) bigger than the driver takes (``write.driver_batch_bytes = 0``) is split by table
    and written by Spark's tasks, a transaction's markers counted as on the driver. A job that dies after two of the
    three tables committed it leaves the next to write the third only; the next changes go through the driver. Every
    table equals its model, each micro-batch in each table's commits once."""
    tables = snapshot_in_a_transaction(kafka, 300)
    on_tasks = {"write.driver_batch_bytes": "0", "stream.trigger": "available-now"}
    dying = Job(
        [sys.executable, str(SUPPORT / "run_database_job.py"), "2", *conf(tmp_path, kafka.bootstrap, **on_tasks)[1::2]],
        tmp_path / "dying.log",
    ).start()
    assert dying.wait(300) == 137, dying.log_tail()
    assert "written by Spark's tasks" in dying.log_tail(400_000)
    again = run(tmp_path, kafka.bootstrap, **on_tasks)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "written by Spark's tasks" in again.stderr and "already_committed=2" in again.stderr, again.stderr[-3000:]
    assert "skipped=transaction:2" in again.stderr, again.stderr[-3000:]
    assert all_equal(tmp_path, tables)
    properties = (tmp_path / "lake" / "lines" / ".hoodie" / "hoodie.properties").read_text()
    assert "hoodie.table.recordkey.fields=order_id,line" in properties  # a new table's key, read on the tasks path
    for source in tables.values():
        send(kafka, source, upserts(source, range(250, 320), 1) + deletes(source, list(source.rows)[:5]))
    driver = run(tmp_path, kafka.bootstrap, **{"stream.trigger": "available-now"})
    assert driver.returncode == 0, driver.stderr[-3000:]
    assert "written by Spark's tasks" not in driver.stderr
    each_equal_with_each_batch_once(tmp_path, tables, 2)
