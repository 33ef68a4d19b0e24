"""One table per source table (``table.path`` with ``{table}``): the settings each source table's Hudi table gets
(``config_tables``), and, until the job runs such a configuration, its refusal at start."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from laketide.config import ConfigError, load_config
from laketide.config_tables import SourceTable, TableRoutes
from laketide.table.errors import Invalid

CLI = str(Path(sys.executable).with_name("laketide"))
KAFKA = ["source.format=kafka", "source.envelope=debezium", "source.kafka.bootstrap_servers=127.0.0.1:9092", "source.kafka.topic_pattern=pg\\.public\\..*"]


def routes(*settings: str) -> TableRoutes:
    return TableRoutes(load_config(overrides=["table.path=s3://lake/inventory/{schema}/{table}", "table.type=MERGE_ON_READ", *KAFKA, *settings]))


def test_each_source_table_gets_its_path_name_and_overrides():
    r = routes('tables.orders.partition_by=["region"]', "tables.orders.schema=id BIGINT, region STRING", 'tables.orders.record_key=["id"]')
    orders = r.config_for(SourceTable("orders", "public", "inventory", "pg.public.orders"))
    assert orders.table.path == "s3://lake/inventory/public/orders" and orders.table.name == "orders"
    assert orders.table.partition_by == ["region"] and orders.table.record_key == ["id"] and orders.table.type == "MERGE_ON_READ"
    assert orders.source.schema_ddl == "id BIGINT, region STRING" and orders.tables == {}
    # no [tables.<name>]: [table]'s keys, unpartitioned, the record key left to the events' key
    customers = r.config_for(SourceTable("order-lines", "public", topic="pg.public.order-lines"))
    assert customers.table.path == "s3://lake/inventory/public/order-lines" and customers.table.name == "order_lines"
    assert customers.table.partition_by is None and customers.table.record_key is None and customers.source.schema_ddl is None


def test_a_table_is_named_by_its_topic_when_the_event_does_not_say():
    r = TableRoutes(load_config(overrides=["table.path=/lake/{table}", *KAFKA]))
    assert r.config_for(SourceTable(None, topic="pg.public.customers")).table.path == "/lake/customers"


@pytest.mark.parametrize("source", [SourceTable(".."), SourceTable("."), SourceTable("a/b"), SourceTable("../etc"), SourceTable("orders", schema="")])
def test_a_source_name_cannot_leave_the_templates_folder(source):
    with pytest.raises(Invalid, match="cannot name a folder"):
        routes().config_for(source)


def test_bad_templates_and_stray_overrides_are_refused_at_load():
    with pytest.raises(ConfigError, match=r"names \{tbl\}; a path may hold \{table\}"):
        load_config(overrides=["table.path=/lake/{tbl}"])
    with pytest.raises(ConfigError, match=r"\[tables.orders\] applies to a job whose table.path holds \{table\}"):
        load_config(overrides=["table.path=/lake/orders", "tables.orders.type=MERGE_ON_READ"])
    with pytest.raises(ConfigError, match="tables.orders.bogus"):
        load_config(overrides=["table.path=/lake/{table}", "tables.orders.bogus=1"])
    with pytest.raises(Invalid, match="reads Debezium's change events from Kafka"):
        TableRoutes(load_config(overrides=["table.path=/lake/{table}"]))


def test_laketide_run_refuses_a_database_job_before_spark_and_writes_nothing(tmp_path):
    started = time.monotonic()
    done = subprocess.run([CLI, "run", "--conf", f"table.path={tmp_path}/lake/{{table}}", *(a for s in KAFKA for a in ("--conf", s)),
                           "--conf", f"stream.checkpoint={tmp_path / 'cp'}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "one table per source table" in done.stderr and "run one job per table" in done.stderr, done.stderr[-2000:]
    assert "Spark" not in done.stderr and time.monotonic() - started < 15
    assert not (tmp_path / "lake").exists() and not (tmp_path / "cp").exists()
