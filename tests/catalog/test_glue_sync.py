"""A table registered in AWS Glue (moto's server, started here on 127.0.0.1) with the entries Hudi's Glue sync
(``hudi-aws/.../AWSGlueCatalogSyncClient.java``) writes, read back with boto3: the columns, keys, formats and
parameters a Hive Metastore gets, partitions following a ``delete_partition``."""

from __future__ import annotations

import json

import boto3
from catalog_tables import EXPECTED_COLUMNS, delete_partition, rows, write
from commands import laketide

from laketide.table import Table


def glue(s3):
    return boto3.client(
        "glue",
        endpoint_url=s3["aws_endpoint_url"],
        aws_access_key_id=s3["aws_access_key_id"],
        aws_secret_access_key=s3["aws_secret_access_key"],
        region_name=s3["aws_region"],
    )


def sync(s3, path, database):
    options = [a for k in ("aws_endpoint_url", "aws_access_key_id", "aws_secret_access_key", "aws_region")
               for a in ("--catalog-option", f"{k}={s3[k]}")]  # fmt: skip
    code, out, err = laketide("sync", str(path), "--catalog", "glue", "--database", database, "--json", *options)
    assert code == 0, err
    assert s3["aws_secret_access_key"] not in out + err
    return json.loads(out)


def test_glue_gets_the_entries_a_metastore_gets_and_its_partitions_follow_the_table(s3, tmp_path):
    path = tmp_path / "orders"
    write(path, rows(range(8), 1))
    result = sync(s3, path, "lake")
    table = Table.open(str(path))
    assert result["instant"] == table.timeline.latest_completed_write().timestamp  # type: ignore[union-attr]
    entry = glue(s3).get_table(DatabaseName="lake", Name="orders")["Table"]
    sd = entry["StorageDescriptor"]
    assert entry["TableType"] == "EXTERNAL_TABLE" and entry["Parameters"]["EXTERNAL"] == "TRUE"
    assert [(c["Name"], c["Type"]) for c in sd["Columns"]] == EXPECTED_COLUMNS
    assert [(k["Name"], k["Type"]) for k in entry["PartitionKeys"]] == [("region", "string"), ("shard", "int")]
    assert sd["InputFormat"] == "org.apache.hudi.hadoop.HoodieParquetInputFormat"
    assert sd["SerdeInfo"]["SerializationLibrary"] == "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
    assert sd["SerdeInfo"]["Parameters"]["hoodie.query.as.ro.table"] == "false"
    assert entry["Parameters"]["last_commit_time_sync"] == result["instant"]
    assert entry["Parameters"]["spark.sql.sources.provider"] == "hudi"
    partitions = glue(s3).get_partitions(DatabaseName="lake", TableName="orders")["Partitions"]
    assert sorted(tuple(p["Values"]) for p in partitions) == [("eu", "0"), ("eu", "1"), ("us", "0"), ("us", "1")]
    delete_partition(path, rows([0], 2))
    assert sync(s3, path, "lake")["entries"][0]["dropped"] == [["eu", "0"]]
    partitions = glue(s3).get_partitions(DatabaseName="lake", TableName="orders")["Partitions"]
    assert sorted(tuple(p["Values"]) for p in partitions) == [("eu", "1"), ("us", "0"), ("us", "1")]


def test_a_merge_on_read_table_is_two_glue_entries(s3, tmp_path):
    path = tmp_path / "orders"
    write(path, rows(range(4), 1), table_type="MERGE_ON_READ")
    sync(s3, path, "mor")
    names = sorted(t["Name"] for t in glue(s3).get_tables(DatabaseName="mor")["TableList"])
    assert names == ["orders_ro", "orders_rt"]
