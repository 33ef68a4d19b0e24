"""After every change a table goes through (ten writes, an added column, a new partition, a ``delete_partition``,
a restore to a savepoint, a rollback), its entries read back through the catalog's own client equal what
Apache Hudi's sync registers for the same table: a Hive Metastore (Hive 2.3's, read with a Thrift client) and
AWS Glue (moto's server, read with boto3), copy-on-write and merge-on-read, partitioned by two fields (plain and
hive-style paths), by one, and not.

The expectation is written from Hudi's rules, not from laketide's code: ``HiveSyncTool.syncHoodieTable`` (one
entry for copy-on-write; ``<name>_ro`` and ``<name>_rt`` for merge-on-read), ``HMSDDLExecutor.createTable`` (an
EXTERNAL table at the base path, ``ParquetHiveSerDe`` with ``path`` and ``hoodie.query.as.ro.table``, the input
format by query type), ``HiveSchemaUtil.convertParquetSchemaToHiveSchema`` (the columns, meta columns first,
partition fields as keys), the partition extractors (``MultiPartKeysValueExtractor``: a path's segments, the
part after ``=`` on hive-style paths; ``NonPartitionedExtractor``: none) and ``TestHiveSyncTool``'s assertions
(``last_commit_time_sync`` is the newest commit; one partition per partition with files; a dropped partition
leaves the entry)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3
import pyarrow as pa
import pytest
from catalog_tables import META, delete_partition, operate, rows, write
from fixture_tables import SUPPORT

from laketide.catalog import CatalogSync, open_catalog
from laketide.table import Table

HIVE_TYPES = {
    "id": "bigint",
    "name": "string",
    "amount": "decimal(10,2)",
    "ts": "bigint",
    "day": "date",
    "tags": "array<string>",
    "region": "string",
    "shard": "int",
    "note": "string",
}
PARTITIONINGS = {
    "two-fields": (("region", "shard"), False),
    "two-fields-hive-style": (("region", "shard"), True),
    "one-field": (("region",), False),
    "unpartitioned": ((), False),
}
TYPES = {"cow": "COPY_ON_WRITE", "mor": "MERGE_ON_READ"}


def hudi_entries(path) -> dict:
    """What Hudi's sync registers for the table at ``path`` as it stands, by entry name."""
    table = Table.open(str(path))
    latest = table.timeline.latest_completed_write()
    assert latest is not None
    fields = list(table.config.partition_fields)
    columns = [(m, "string") for m in META] + [
        (f.name, HIVE_TYPES[f.name]) for f in table.schema() if f.name not in META and f.name not in fields
    ]
    location = f"file:{table.uri}"
    partitions = set()
    for partition in {s.partition for s in table.file_system_view().latest_slices()}:
        if fields:
            values = tuple(segment.split("=", 1)[-1] for segment in partition.split("/"))
            partitions.add((values, f"{location}/{partition}"))
    kinds = (
        {"": (False, "org.apache.hudi.hadoop.HoodieParquetInputFormat")}
        if table.config.table_type == "COPY_ON_WRITE"
        else {
            "_ro": (True, "org.apache.hudi.hadoop.HoodieParquetInputFormat"),
            "_rt": (False, "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"),
        }
    )
    return {
        f"orders{suffix}": {
            "type": "EXTERNAL_TABLE",
            "location": location,
            "columns": columns,
            "keys": [(f, HIVE_TYPES[f]) for f in fields],
            "input": input_format,
            "output": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
            "serde": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
            "serde_parameters": {"path": location, "hoodie.query.as.ro.table": str(ro).lower()},
            "last_commit_time_sync": latest.timestamp,
            "provider": "hudi",
            "partitions": partitions,
        }
        for suffix, (ro, input_format) in kinds.items()
    }


def hive_entries(metastore, database) -> dict:
    found = {}
    with metastore.client() as client:
        for name in client.get_all_tables(database):
            t = client.get_table(database, name)
            parts = client.get_partitions(database, name, -1)
            found[name] = {
                "type": t.tableType,
                "location": t.sd.location,
                "columns": [(c.name, c.type) for c in t.sd.cols],
                "keys": [(k.name, k.type) for k in t.partitionKeys],
                "input": t.sd.inputFormat,
                "output": t.sd.outputFormat,
                "serde": t.sd.serdeInfo.serializationLib,
                "serde_parameters": {k: v for k, v in t.sd.serdeInfo.parameters.items() if k != "serialization.format"},
                "last_commit_time_sync": t.parameters.get("last_commit_time_sync"),
                "provider": t.parameters.get("spark.sql.sources.provider"),
                "partitions": {(tuple(p.values), p.sd.location) for p in parts},
            }
    return found


def glue_entries(client, database) -> dict:
    found = {}
    for t in client.get_tables(DatabaseName=database)["TableList"]:
        sd = t["StorageDescriptor"]
        pages = client.get_paginator("get_partitions").paginate(DatabaseName=database, TableName=t["Name"])
        found[t["Name"]] = {
            "type": t["TableType"],
            "location": sd["Location"],
            "columns": [(c["Name"], c["Type"]) for c in sd["Columns"]],
            "keys": [(k["Name"], k["Type"]) for k in t.get("PartitionKeys", [])],
            "input": sd["InputFormat"],
            "output": sd["OutputFormat"],
            "serde": sd["SerdeInfo"]["SerializationLibrary"],
            "serde_parameters": {k: v for k, v in sd["SerdeInfo"]["Parameters"].items() if k != "serialization.format"},
            "last_commit_time_sync": t["Parameters"].get("last_commit_time_sync"),
            "provider": t["Parameters"].get("spark.sql.sources.provider"),
            "partitions": {
                (tuple(p["Values"]), p["StorageDescriptor"]["Location"]) for page in pages for p in page["Partitions"]
            },
        }
    return found


def changes(path, table_type: str, partition_by, hive_style: bool):
    """The table's life, a step at a time; each yields what it did."""

    def put(data):
        write(path, data, table_type=table_type, hive_style=hive_style, partition_by=partition_by)

    for n in range(4):
        put(rows(range(n * 3, n * 3 + 6), n))
        yield f"write {n}"
    saved = Table.open(str(path)).timeline.latest_completed_write().timestamp  # type: ignore[union-attr]
    operate(path, lambda ops: ops.create_savepoint(saved))
    for n in range(4, 7):
        put(rows(range(n, n + 4), n).append_column("note", pa.array([f"n{n}"] * 4)))
        yield f"write {n} with an added column"
    put(rows([40, 41], 7, regions=("apac",)).append_column("note", pa.array(["a", "b"])))
    yield "a new partition"
    if partition_by:
        delete_partition(path, rows([40], 8, regions=("apac",)))
        yield "a delete_partition"
    operate(path, lambda ops: ops.restore(saved))
    yield "a restore to the savepoint"
    for n in range(9, 12):
        put(rows(range(n, n + 3), n, regions=("latam", "eu")))
        yield f"write {n} after the restore"
    newest = Table.open(str(path)).timeline.latest_completed_write().timestamp  # type: ignore[union-attr]
    operate(path, lambda ops: ops.rollback(newest))
    yield "a rollback of the newest write"


def landmarks(step: str, entry: dict, partitioned: bool) -> None:
    """What each step must show, so that the comparison is known to cover it."""
    columns = [name for name, _ in entry["columns"]]
    regions = {values[0] for values, _ in entry["partitions"]}
    if step == "write 4 with an added column":
        assert columns[-1] == "note"
    if step == "a new partition" and partitioned:
        assert "apac" in regions
    if step == "a restore to the savepoint":
        assert "note" not in columns and "apac" not in regions, "the restore took the column and partition away"


@pytest.mark.parametrize("partitioning", list(PARTITIONINGS))
@pytest.mark.parametrize("kind", list(TYPES))
def test_hive_entries_equal_hudis_after_every_change(metastore, tmp_path, kind, partitioning):
    partition_by, hive_style = PARTITIONINGS[partitioning]
    database = f"{kind}_{partitioning}".replace("-", "_")
    path = tmp_path / "orders"
    sync = CatalogSync(open_catalog("hive", metastore.uri), database, "orders")
    for step in changes(path, TYPES[kind], partition_by, hive_style):
        sync.sync(Table.open(str(path)))
        found = hive_entries(metastore, database)
        assert found == hudi_entries(path), f"after {step}"
        landmarks(step, next(iter(found.values())), bool(partition_by))


@pytest.mark.parametrize("partitioning", ["two-fields", "unpartitioned"])
@pytest.mark.parametrize("kind", list(TYPES))
def test_glue_entries_equal_hudis_after_every_change(s3, tmp_path, kind, partitioning):
    partition_by, hive_style = PARTITIONINGS[partitioning]
    database = f"{kind}_{partitioning}"
    options = {k: s3[k] for k in ("aws_endpoint_url", "aws_access_key_id", "aws_secret_access_key", "aws_region")}
    client = boto3.client(
        "glue",
        endpoint_url=s3["aws_endpoint_url"],
        aws_access_key_id=s3["aws_access_key_id"],
        aws_secret_access_key=s3["aws_secret_access_key"],
        region_name=s3["aws_region"],
    )
    path = tmp_path / "orders"
    sync = CatalogSync(open_catalog("glue", options=options), database, "orders")
    for step in changes(path, TYPES[kind], partition_by, hive_style):
        sync.sync(Table.open(str(path)))
        assert glue_entries(client, database) == hudi_entries(path), f"after {step}"


def test_spark_resolves_the_entries_as_hudi_tables_through_the_metastore(metastore, tmp_path):
    """Spark SQL, pointed at the metastore (``hive.metastore.uris``), finds each entry as a Hudi data-source table:
    provider ``hudi``, the schema with the partition columns last, the partition columns, the location and the
    partitions (``tests/support/spark_catalog_read.py``)."""
    wanted = {}
    for kind in TYPES:
        path = tmp_path / kind / "orders"
        for n in range(3):
            write(path, rows(range(n, n + 6), n), table_type=TYPES[kind])
        CatalogSync(open_catalog("hive", metastore.uri), "spark_reads", f"orders_{kind}").sync(Table.open(str(path)))
        wanted.update({name.replace("orders", f"orders_{kind}", 1): e for name, e in hudi_entries(path).items()})
    done = subprocess.run(
        [sys.executable, str(SUPPORT / "spark_catalog_read.py"), metastore.uri, str(tmp_path / "wh"), "spark_reads"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(seen) == sorted(wanted) == ["orders_cow", "orders_mor_ro", "orders_mor_rt"]
    for name, entry in wanted.items():
        spark = seen[name]
        assert (spark["provider"], spark["type"], spark["input_format"]) == ("hudi", "EXTERNAL", entry["input"])
        assert [f["name"] for f in spark["schema"]["fields"]] == [c for c, _ in entry["columns"] + entry["keys"]]
        assert spark["partition_columns"] == [k for k, _ in entry["keys"]] and spark["location"] == entry["location"]
        assert {(tuple(spec.values()), where) for spec, where in spark["partitions"]} == entry["partitions"]
