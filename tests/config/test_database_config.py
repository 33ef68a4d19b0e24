"""One table per source table (``table.path`` with ``{table}``): the settings each source table's Hudi table gets
(``config.tables``), and the refusals at start. The job itself: ``test_database_job.py``."""

from __future__ import annotations

import subprocess
import time

import pytest
from commands import CLI

from laketide.config import ConfigError, load_config
from laketide.config.routes import SourceTable, TableRoutes
from laketide.table.errors import Invalid

KAFKA = [
    "source.format=kafka",
    "source.envelope=debezium",
    "source.kafka.bootstrap_servers=127.0.0.1:9092",
    "source.kafka.topic_pattern=pg\\.public\\..*",
]


def routes(*settings: str) -> TableRoutes:
    return TableRoutes(
        load_config(
            overrides=["table.path=s3://lake/inventory/{schema}/{table}", "table.type=MERGE_ON_READ", *KAFKA, *settings]
        )
    )


def test_each_source_table_gets_its_path_name_and_overrides():
    r = routes(
        'tables.orders.partition_by=["region"]',
        "tables.orders.schema=id BIGINT, region STRING",
        'tables.orders.record_key=["id"]',
    )
    orders = r.config_for(SourceTable("orders", "public", "inventory", "pg.public.orders"))
    assert orders.table.path == "s3://lake/inventory/public/orders" and orders.table.name == "orders"
    assert (
        orders.table.partition_by == ["region"]
        and orders.table.record_key == ["id"]
        and orders.table.type == "MERGE_ON_READ"
    )
    assert orders.source.schema_ddl == "id BIGINT, region STRING" and orders.tables == {}
    # no [tables.<name>]: [table]'s keys, unpartitioned, the record key left to the events' key
    customers = r.config_for(SourceTable("order-lines", "public", topic="pg.public.order-lines"))
    assert customers.table.path == "s3://lake/inventory/public/order-lines" and customers.table.name == "order_lines"
    assert (
        customers.table.partition_by is None
        and customers.table.record_key is None
        and customers.source.schema_ddl is None
    )


def test_a_table_is_named_by_its_topic_when_the_event_does_not_say():
    r = TableRoutes(load_config(overrides=["table.path=/lake/{table}", *KAFKA]))
    assert r.config_for(SourceTable(None, topic="pg.public.customers")).table.path == "/lake/customers"


@pytest.mark.parametrize(
    "source",
    [SourceTable(".."), SourceTable("."), SourceTable("a/b"), SourceTable("../etc"), SourceTable("orders", schema="")],
)
def test_a_source_name_cannot_leave_the_templates_folder(source):
    with pytest.raises(Invalid, match="cannot name a folder"):
        routes().config_for(source)


def test_bad_templates_and_stray_overrides_are_refused_at_load():
    with pytest.raises(ConfigError, match=r"names \{tbl\}; it may hold \{table\}"):
        load_config(overrides=["table.path=/lake/{tbl}"])
    with pytest.raises(ConfigError, match=r"\[tables.orders\] applies to a job whose table.path holds \{table\}"):
        load_config(overrides=["table.path=/lake/orders", "tables.orders.type=MERGE_ON_READ"])
    with pytest.raises(ConfigError, match=r"tables.orders.bogus"):
        load_config(overrides=["table.path=/lake/{table}", "tables.orders.bogus=1"])
    with pytest.raises(Invalid, match="reads Debezium's change events from Kafka"):
        TableRoutes(load_config(overrides=["table.path=/lake/{table}"]))
    with pytest.raises(Invalid, match="reads the JSON converter's events"):
        routes("source.value_format=avro", "source.schema_registry.url=http://127.0.0.1:8081")


def test_a_database_job_of_another_source_is_refused_before_spark_and_writes_nothing(tmp_path):
    started = time.monotonic()
    done = subprocess.run(
        [
            CLI,
            "run",
            "--conf",
            f"table.path={tmp_path}/lake/{{table}}",
            "--conf",
            "source.format=json",
            "--conf",
            f"source.path={tmp_path}/in",
            "--conf",
            "source.schema=id BIGINT",
            "--conf",
            f"stream.checkpoint={tmp_path / 'cp'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "reads Debezium's change events from Kafka" in done.stderr, done.stderr[-2000:]
    assert "Spark" not in done.stderr and time.monotonic() - started < 15
    assert not (tmp_path / "lake").exists() and not (tmp_path / "cp").exists()


def test_one_write_of_one_table_refuses_a_template_path(tmp_path):
    import pyarrow as pa

    import laketide

    with pytest.raises(Invalid, match="one table per source table"):
        laketide.write(f"{tmp_path}/lake/{{table}}", pa.table({"id": [1]}), record_key=["id"])
    assert not (tmp_path / "lake").exists()


def test_labels_quarantine_paths_and_what_tells_tables_apart():
    r = routes("write.quarantine_path=s3://aside")
    orders = SourceTable("orders", "public", "inventory", "pg.public.orders")
    assert r.folder == "s3://lake/inventory/" and r.label(r.config_for(orders).table.path) == "public/orders"
    assert r.config_for(orders).write.quarantine_path == "s3://aside/public/orders"
    assert (
        routes("write.quarantine_path=s3://aside/{table}_bad").config_for(orders).write.quarantine_path
        == "s3://aside/orders_bad"
    )
    # a source table's events from two topics are one table unless the path names the topic
    assert r.key(orders) == r.key(SourceTable("orders", "public", "other", "pg2.public.orders"))
    # each table settles its own sections: one table's recorded lease is not its neighbour's
    first, second = r.config_for(orders), r.config_for(SourceTable("lines", "public"))
    first.coordinator.lease = "storage"
    assert second.coordinator.lease == "local"


def test_each_table_is_registered_under_its_own_name_or_the_catalog_template():
    hive = ["catalog.kind=hive", "catalog.uri=thrift://metastore:9083", "catalog.database=lake"]
    orders = SourceTable("orders", "public", "inventory", "pg.public.orders")
    assert routes(*hive, "table.name=all").config_for(orders).catalog.table == "orders", "not table.name: one for all"
    named = routes(*hive, "catalog.table={db}_{schema}_{table}").config_for(orders).catalog
    assert named.table == "inventory_public_orders" and named.database == "lake"
    with pytest.raises(Invalid, match=r"catalog.table 'orders' has no \{table\}.*registered under one name"):
        routes(*hive, "catalog.table=orders")
    with pytest.raises(Invalid, match=r"names \{db\}, which source table orders's events do not give"):
        routes(*hive, "catalog.table={db}_{table}").config_for(SourceTable("orders", "public", None, "pg.orders"))
    assert routes().config_for(orders).catalog.kind is None, "unset [catalog]: nothing registered"
