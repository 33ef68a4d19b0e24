"""What the job cannot write right is refused at start, naming the reason, with nothing written."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from commands import CLI
from readback import tree_digest
from streaming import land, row

from laketide.config import load_config
from laketide.spark.job import run
from laketide.writer.preflight import JobRefused


@pytest.mark.parametrize(
    "fixture, changed, key, partition, ordering, reason",
    [
        (
            # Hudi's table without meta columns, made merge-on-read
            "v6_simplekeygen_hivestyle_no_metafields",
            {"hoodie.table.type": "MERGE_ON_READ"},
            "id",
            "byteField",
            "longField",
            "hoodie.populate.meta.fields = false on a merge-on-read table",
        ),
    ],
)
def test_laketide_run_refuses_tables_it_does_not_write(
    fixture_copy, tmp_path, fixture, changed, key, partition, ordering, reason
):
    table = fixture_copy(fixture)
    properties = table / ".hoodie" / "hoodie.properties"
    lines = properties.read_text().splitlines()
    properties.write_text(
        "\n".join(f"{k}={changed[k]}" if (k := line.split("=", 1)[0]) in changed else line for line in lines)
    )
    before = tree_digest(table)
    config = tmp_path / "job.toml"
    config.write_text(
        f'[table]\npath = "{table}"\nrecord_key = ["{key}"]\n'
        f'[source]\nformat = "json"\npath = "{tmp_path / "landing"}"\nschema = "{key} STRING, {partition} '
        f'STRING, {ordering} BIGINT"\n'
        f'[stream]\ncheckpoint = "{tmp_path / "checkpoint"}"\ntrigger = "available-now"\n'
    )
    started = time.monotonic()
    result = subprocess.run([CLI, "run", "--config", str(config)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert reason in result.stderr
    # refused before Spark starts: its reason alone, no JVM and none of Spark's errors
    assert "Spark" not in result.stderr and "Executor" not in result.stderr and time.monotonic() - started < 15, (
        result.stderr[-2000:]
    )
    assert tree_digest(table) == before, "the table is byte for byte unchanged"
    assert not (tmp_path / "checkpoint").exists()


def _config(root: Path, ddl: str, **table):
    settings = {"record_key": '["id"]', "partition_by": '["region"]', "ordering_field": "ts", **table}
    return load_config(
        overrides=[f"table.path={root / 'table'}"]
        + [f"table.{k}={v}" for k, v in settings.items() if v is not None]
        + [
            "source.format=json",
            f"source.path={root / 'landing'}",
            f"source.schema={ddl}",
            f"stream.checkpoint={root / 'checkpoint'}",
            "stream.trigger=available-now",
        ]
    )


GOOD = "id BIGINT, region STRING, ts BIGINT, name STRING"


@pytest.mark.parametrize(
    "ddl, table, named",
    [
        ("id BIGINT, region STRING, ts ARRAY<INT>", {}, ["table.ordering_field", "'ts'", "array"]),
        ("id BIGINT, region STRING, ts BIGINT, `my col` STRING", {}, ["source.schema", "'my col'", "Avro"]),
        ("id BIGINT, region STRING, ts BIGINT, s STRUCT<`a-b`: INT>", {}, ["source.schema", "'s.a-b'"]),
        ("id BIGINT, region STRING", {}, ["table.ordering_field", "'ts'", "not a column"]),
        ("region STRING, ts BIGINT", {}, ["table.record_key", "'id'", "not a column"]),
        ("id STRUCT<a: INT>, region STRING, ts BIGINT", {}, ["table.record_key", "'id'", "struct"]),
        ("id BINARY, region STRING, ts BIGINT", {}, ["table.record_key", "binary"]),
        ("id BIGINT, ts BIGINT", {}, ["table.partition_by", "'region'"]),
        ("id BIGINT, region STRING, ts BIGINT, m MAP<INT, STRING>", {}, ["source.schema", "'m'", "string keys"]),
        ("id BIGINT, region STRING, ts BIGINT, _hoodie_is_deleted STRING", {}, ["_hoodie_is_deleted", "BOOLEAN"]),
        (
            GOOD,
            {"ordering_field": None, "merge_mode": "EVENT_TIME_ORDERING"},
            ["EVENT_TIME_ORDERING", "table.ordering_field"],
        ),
    ],
)
def test_a_bad_configuration_fails_at_start_and_creates_nothing(spark, tmp_path, ddl, table, named):
    with pytest.raises(JobRefused) as refused:
        run(_config(tmp_path, ddl, **table))
    for text in named:
        assert text in str(refused.value)
    assert not (tmp_path / "table").exists() and not (tmp_path / "checkpoint").exists()


def test_the_fixed_configuration_then_runs(spark, tmp_path):
    with pytest.raises(JobRefused):
        run(_config(tmp_path, "id BIGINT, region STRING, name STRING"))
    land(tmp_path, "0.json", [row(1, 1)], 1_700_000_000)
    (report,) = run(_config(tmp_path, GOOD)).status.recent
    assert report.inserts == 1


@pytest.fixture(scope="module")
def existing(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("existing")
    land(root, "0.json", [row(1, 1), row(2, 1)], 1_700_000_000)
    run(_config(root, GOOD))
    return root


@pytest.mark.parametrize(
    "table, named",
    [
        (
            {"hive_style_partitioning": "true"},
            ["table.hive_style_partitioning = True", "hoodie.datasource.write.hive_style_partitioning = False"],
        ),
        ({"ordering_field": "name"}, ["table.ordering_field = 'name'", "hoodie.table.precombine.field = 'ts'"]),
        ({"record_key": '["name"]'}, ["table.record_key = ['name']", "hoodie.table.recordkey.fields = ['id']"]),
        ({"partition_by": '["name"]'}, ["table.partition_by = ['name']", "hoodie.table.partition.fields = ['region']"]),
        (
            {"merge_mode": "COMMIT_TIME_ORDERING"},
            ["table.merge_mode = 'COMMIT_TIME_ORDERING'", "hoodie.record.merge.mode = 'EVENT_TIME_ORDERING'"],
        ),
        (
            {"urlencode_partitions": "false"},
            ["table.urlencode_partitions = False", "hoodie.datasource.write.partitionpath.urlencode = True"],
        ),
    ],
)
def test_settings_the_table_fixes_win(existing, table, named):
    before = tree_digest(existing)
    land(existing, "1.json", [row(3, 1)], 1_700_000_001)
    before = tree_digest(existing / "table")
    with pytest.raises(JobRefused) as refused:
        run(_config(existing, GOOD, **table))
    for text in named:
        assert text in str(refused.value)
    assert tree_digest(existing / "table") == before


def test_settings_left_out_take_the_tables(existing):
    """A job on an existing table needs only its path and its source: the table's hoodie.properties gives the rest."""
    land(existing, "2.json", [row(4, 2)], 1_700_000_002)
    config = _config(existing, GOOD, record_key=None, partition_by=None, ordering_field=None)
    assert config.table.record_key is None and config.table.partition_by is None and config.table.ordering_field is None
    writer = run(config)
    assert (
        writer.spec.record_key == ("id",)
        and writer.spec.partition_by == ("region",)
        and writer.spec.ordering_field == "ts"
    )


def test_a_new_table_without_its_record_key_is_refused_naming_it(spark, tmp_path):
    with pytest.raises(JobRefused, match=r"no table at .* table.record_key is not set"):
        run(_config(tmp_path, GOOD, record_key=None))
    assert not (tmp_path / "table").exists()


def test_a_job_or_command_that_names_another_lease_than_the_tables_is_refused(existing):
    """The table's first writer recorded its lease (the local one); a job naming ZooKeeper is refused before Spark
    starts, and so is a CLI command given --zookeeper; a job that names no lease takes the recorded one."""
    from laketide.coordinator.lease_choice import LEASE_CHOICE, LeaseChoice, LeaseMismatch
    from laketide.table import FileIO

    io = FileIO.for_uri(str(existing / "table"))
    assert LeaseChoice.read(io) == LeaseChoice("local")
    before = tree_digest(existing / "table")
    config = load_config(
        overrides=[
            f"table.path={existing / 'table'}",
            "source.format=json",
            f"source.path={existing / 'landing'}",
            f"source.schema={GOOD}",
            f"stream.checkpoint={existing / 'checkpoint'}",
            "stream.trigger=available-now",
            "coordinator.lease=zookeeper",
            "coordinator.zookeeper=127.0.0.1:1",
        ]
    )
    with pytest.raises(LeaseMismatch, match=r"take the local lease .* coordinator.lease = 'local'") as refused:
        run(config)
    assert LEASE_CHOICE in str(refused.value) and "delete" in str(refused.value)
    command = subprocess.run(
        [CLI, "clean", str(existing / "table"), "--zookeeper", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert command.returncode == 2 and "take the local lease" in command.stderr, command.stderr[-2000:]
    assert tree_digest(existing / "table") == before


def test_a_job_whose_api_port_is_in_use_stops_before_spark_naming_it(tmp_path):
    """`laketide run` with coordinator.api_port taken by another process: exit 4 (conflict) in seconds, the port
    and the way out named, nothing of Spark's."""
    from laketide.api.server import bind

    taken = bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        started = time.monotonic()
        result = subprocess.run(
            [
                CLI,
                "run",
                "--conf",
                f"table.path={tmp_path / 'table'}",
                "--conf",
                f"stream.checkpoint={tmp_path / 'cp'}",
                "--conf",
                f"coordinator.api_port={port}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        taken.close()
    assert result.returncode == 4 and f"port {port} on 127.0.0.1 is in use" in result.stderr, result.stderr[-2000:]
    assert "Spark" not in result.stderr and "Traceback" not in result.stderr and time.monotonic() - started < 15
    assert not (tmp_path / "table").exists()
