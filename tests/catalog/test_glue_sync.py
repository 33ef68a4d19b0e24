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


def test_a_job_syncing_to_glue_shows_its_credentials_nowhere(s3, tmp_path):
    """``laketide run`` with ``catalog.kind = "glue"`` and a secret key: the entry is made, and the secret is in
    neither the job's log, ``GET /v1/writer`` nor ``/metrics``."""
    import signal

    import httpx
    from chaoslib import Feeder, Job, free_port, job_args, wait_until

    feeder = Feeder(tmp_path, seed=7)
    feeder.land_one()
    port = free_port()
    secret = "glue-secret-81-not-a-word"  # moto takes any key; the fixture's own is too common a word to look for
    reach = {**s3, "aws_secret_access_key": secret}
    catalog = ["catalog.kind=glue", "catalog.database=secrets", "catalog.table=orders"] + [
        f"catalog.options.{k}={reach[k]}"
        for k in ("aws_endpoint_url", "aws_access_key_id", "aws_secret_access_key", "aws_region")
    ]
    job = Job(job_args(tmp_path, api_port=port, trigger="1 second", extra=catalog), tmp_path / "job.log").start()
    api = f"http://127.0.0.1:{port}"

    def synced() -> bool:
        try:
            view = httpx.get(f"{api}/v1/writer", timeout=10).json()
        except httpx.HTTPError:
            return False
        return bool(view.get("last_instant")) and (view.get("catalog") or {}).get("synced") == view["last_instant"]

    try:
        wait_until(synced, 240, "the entry synced", poll=1, job=job)
        seen = httpx.get(f"{api}/v1/writer", timeout=10).text + httpx.get(f"{api}/metrics", timeout=10).text
    finally:
        job.signal(signal.SIGINT)
        job.wait(120)
    assert glue(s3).get_table(DatabaseName="secrets", Name="orders")["Table"]["Name"] == "orders"
    assert secret not in seen and secret not in (tmp_path / "job.log").read_text(errors="replace")
