"""A table registered in a real Hive Metastore (Hive 2.3's, from the pyspark wheel) as Apache Hudi's Hive sync
registers it, read back through the metastore's own Thrift API: what ``TestHiveSyncTool``
(``hudi-sync/hudi-hive-sync/src/test/java/org/apache/hudi/hive/TestHiveSyncTool.java``) asserts of a synced
table, and the fields ``HMSDDLExecutor.createTable`` and ``SparkDataSourceTableUtils`` set."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from catalog_tables import EXPECTED_COLUMNS, META, delete_partition, rows, write
from commands import laketide
from fixture_tables import unzip_fixture

from laketide.table import Table


def sync(metastore, path, database="lake", *extra):
    code, out, err = laketide("sync", str(path), "--catalog", "hive", "--uri", metastore.uri, "--database", database,
                              "--json", *extra)  # fmt: skip
    assert code == 0, err
    return json.loads(out)


def registered(metastore, database, name):
    with metastore.client() as client:
        table = client.get_table(database, name)
        partitions = client.get_partitions(database, name, -1)
    return table, sorted((tuple(p.values), p.sd.location) for p in partitions)


@pytest.mark.parametrize("hive_style", [False, True], ids=["plain-paths", "hive-style"])
def test_a_copy_on_write_table_is_registered_as_hudis_hive_sync_registers_it(metastore, tmp_path, hive_style):
    path = tmp_path / "orders"
    for n in range(3):
        write(path, rows(range(n, n + 6), n), hive_style=hive_style)
    database = "hive_style" if hive_style else "plain"
    result = sync(metastore, path, database)
    table = Table.open(str(path))
    latest = table.timeline.latest_completed_write()
    assert latest is not None and result["instant"] == latest.timestamp
    hive, partitions = registered(metastore, database, "orders")
    assert hive.tableType == "EXTERNAL_TABLE" and hive.parameters["EXTERNAL"] == "TRUE"
    location = f"file:{table.uri}"
    assert hive.sd.location == location
    assert [(c.name, c.type) for c in hive.sd.cols] == EXPECTED_COLUMNS
    assert [(k.name, k.type) for k in hive.partitionKeys] == [("region", "string"), ("shard", "int")]
    assert hive.sd.inputFormat == "org.apache.hudi.hadoop.HoodieParquetInputFormat"
    assert hive.sd.outputFormat == "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
    assert hive.sd.serdeInfo.serializationLib == "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
    assert hive.sd.serdeInfo.parameters == {
        "path": location,
        "hoodie.query.as.ro.table": "false",
        "serialization.format": "1",
    }
    assert hive.parameters["last_commit_time_sync"] == latest.timestamp
    assert hive.parameters["spark.sql.sources.provider"] == "hudi"
    assert hive.parameters["spark.sql.sources.schema.numPartCols"] == "2"
    assert [hive.parameters[f"spark.sql.sources.schema.partCol.{i}"] for i in range(2)] == ["region", "shard"]
    spark_schema = json.loads(hive.parameters["spark.sql.sources.schema.part.0"])
    assert [f["name"] for f in spark_schema["fields"]][-2:] == ["region", "shard"], "partition columns last"
    live = sorted({s.partition for s in table.file_system_view().latest_slices()})
    assert partitions == sorted(
        (tuple(p.split("=", 1)[-1] for p in partition.split("/")), f"{location}/{partition}") for partition in live
    )
    assert len(partitions) == 4


def test_a_merge_on_read_table_is_two_entries_read_optimized_and_snapshot(metastore, tmp_path):
    path = tmp_path / "orders"
    write(path, rows(range(6), 1), table_type="MERGE_ON_READ")
    write(path, rows(range(3), 2), table_type="MERGE_ON_READ")
    sync(metastore, path, "mor")
    ro, ro_parts = registered(metastore, "mor", "orders_ro")
    rt, rt_parts = registered(metastore, "mor", "orders_rt")
    assert ro.sd.inputFormat == "org.apache.hudi.hadoop.HoodieParquetInputFormat"
    assert rt.sd.inputFormat == "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"
    assert ro.sd.serdeInfo.parameters["hoodie.query.as.ro.table"] == "true"
    assert rt.sd.serdeInfo.parameters["hoodie.query.as.ro.table"] == "false"
    assert ro_parts == rt_parts and len(ro_parts) == 4
    with metastore.client() as client:
        assert "orders" not in client.get_all_tables("mor")


def test_each_sync_brings_the_entry_up_to_date_and_a_synced_one_is_left_alone(metastore, tmp_path):
    path = tmp_path / "orders"
    write(path, rows(range(4), 1, regions=("eu",)))
    first = sync(metastore, path, "again")
    assert first["entries"][0]["created"] and len(first["entries"][0]["added"]) == 2
    assert sync(metastore, path, "again")["entries"][0] == {
        "name": "orders",
        "created": False,
        "altered": False,
        "added": [],
        "dropped": [],
    }, "nothing to do"
    # a new partition and a new column
    wider = rows([10, 12], 2, regions=("apac",)).append_column("note", pa.array(["x", "y"]))
    write(path, wider)
    second = sync(metastore, path, "again")["entries"][0]
    assert second["altered"] and second["added"] == [["apac", "0"], ["apac", "1"]]
    hive, partitions = registered(metastore, "again", "orders")
    assert hive.sd.cols[-1].name == "note" and hive.sd.cols[-1].type == "string"
    # a delete_partition takes its partitions out of the catalog too
    delete_partition(path, rows([10], 3, regions=("apac",)))
    third = sync(metastore, path, "again")["entries"][0]
    assert sorted(map(tuple, third["dropped"])) == [("apac", "1")]
    _, partitions = registered(metastore, "again", "orders")
    assert [values for values, _ in partitions] == [("apac", "0"), ("eu", "0"), ("eu", "1")]


def test_another_table_of_the_same_name_is_never_overwritten(metastore, tmp_path):
    first, second = tmp_path / "a" / "orders", tmp_path / "b" / "orders"
    write(first, rows(range(2), 1))
    write(second, rows(range(2), 1))
    sync(metastore, first, "clash")
    code, _, err = laketide("sync", str(second), "--catalog", "hive", "--uri", metastore.uri, "--database", "clash")
    assert code != 0 and str(first) in err and str(second) in err and "catalog.table" in err
    hive, _ = registered(metastore, "clash", "orders")
    assert hive.sd.location.endswith("a/orders")


def test_a_table_hudis_spark_writer_made_is_registered(metastore, tmp_path):
    path = unzip_fixture("v6_simplekeygen_nonhivestyle", tmp_path)
    table = Table.open(str(path))
    result = sync(metastore, path, "hudi", "--table", "trips")
    hive, partitions = registered(metastore, "hudi", "trips")
    assert result["instant"] == table.timeline.latest_completed_write().timestamp  # type: ignore[union-attr]
    assert [c.name for c in hive.sd.cols][:5] == META
    assert [k.name for k in hive.partitionKeys] == [p.lower() for p in table.config.partition_fields]
    assert {values for values, _ in partitions} == {
        (p,) for p in {s.partition for s in table.file_system_view().latest_slices()}
    }


def test_a_metastore_that_is_not_there_is_an_unavailable_error_naming_it(tmp_path):
    path = tmp_path / "orders"
    write(path, rows(range(2), 1))
    code, _, err = laketide("sync", str(path), "--catalog", "hive", "--uri", "thrift://127.0.0.1:9", "--database", "x")
    assert code == 6 and "thrift://127.0.0.1:9" in err, err


def test_the_delta_mirror_gets_an_entry_delta_readers_recognise(metastore, tmp_path):
    """``--delta-table``: one more entry, of the table's Delta log, as Spark registers a Delta table (provider
    ``delta``, no partition keys: Delta keeps them in its log) with Athena's ``table_type = DELTA``; delta-rs reads
    the rows at the entry's location. A table without a Delta log is refused, saying how to make one."""
    from deltalake import DeltaTable
    from readback import hudi_read

    path = tmp_path / "orders"
    write(path, rows(range(6), 1))
    code, _, err = laketide("sync", str(path), "--catalog", "hive", "--uri", metastore.uri, "--database", "delta",
                            "--delta-table", "orders_delta")  # fmt: skip
    assert code == 2 and "no Delta log" in err and "laketide mirror" in err, err
    code, _, err = laketide("mirror", str(path))
    assert code == 0, err
    result = sync(metastore, path, "delta", "--delta-table", "orders_delta")
    assert [e["name"] for e in result["entries"]] == ["orders", "orders_delta"]
    entry, partitions = registered(metastore, "delta", "orders_delta")
    assert entry.parameters["spark.sql.sources.provider"] == "delta" and entry.parameters["table_type"] == "DELTA"
    assert entry.tableType == "EXTERNAL_TABLE" and entry.partitionKeys == [] and partitions == []
    assert entry.sd.serdeInfo.parameters["path"] == entry.sd.location == f"file:{path}"
    assert entry.sd.inputFormat == "org.apache.hadoop.mapred.SequenceFileInputFormat"
    delta = DeltaTable(entry.sd.location.removeprefix("file:")).to_pyarrow_table()
    columns = ["id", "name", "ts", "region", "shard"]
    assert sorted(delta.select(columns).to_pylist(), key=lambda r: r["id"]) == sorted(
        hudi_read(path).select(columns).to_pylist(), key=lambda r: r["id"]
    )
    write(path, rows(range(6, 9), 2))  # a later commit: both entries move (the writer keeps the mirror current)
    again = sync(metastore, path, "delta", "--delta-table", "orders_delta")
    assert all(not e["created"] for e in again["entries"])
    entry, _ = registered(metastore, "delta", "orders_delta")
    assert entry.parameters["last_commit_time_sync"] == again["instant"]
