"""Tables on an S3-protocol server (moto's server mode) and on Azurite, started here on 127.0.0.1: the
storage seam and its conditional creates, the storage lease, ``laketide.write`` and a job there, Spark's
source, and the request budget of a micro-batch. The jobs under faults are ``test_object_store_jobs.py``."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from readback import rows
from stores import expected_rows, hudi_read_store
from streaming import DATA_COLUMNS, row
from writes import ORDERS_SCHEMA, orders

import laketide
from laketide.table import FileIO, Table
from laketide.table.storage.io import InstantFileExists


def test_the_storage_seam_creates_once_and_reads_what_it_wrote(s3):
    io = FileIO.for_uri("s3://lake/seam", s3)
    assert io.create_exclusive(".hoodie/.laketide/epochs/1", b"")
    assert not io.create_exclusive(".hoodie/.laketide/epochs/1", b"again"), "the second create is refused by the server"
    assert io.create_exclusive(".hoodie/.laketide/epochs/1", b""), "a retried create that finds its own bytes succeeded"
    io.write_atomic(".hoodie/1.commit", b"{}")
    io.write_atomic(".hoodie/1.commit", b"{}")  # the same bytes: an earlier attempt that landed
    with pytest.raises(InstantFileExists):
        io.write_atomic(".hoodie/1.commit", b'{"other": 1}')
    with io.open_output("p/f.parquet") as f:
        pq.write_table(pa.table({"a": [1, 2, 3]}), f)
    with io.open_input("p/f.parquet") as f:
        assert pq.read_table(f)["a"].to_pylist() == [1, 2, 3]
    assert [e.name for e in io.list_dir("") if e.is_dir] == [".hoodie", "p"]
    assert io.exists("p") and not io.exists("q") and io.is_file("p/f.parquet")
    assert io.delete("p/f.parquet") and not io.delete("p/f.parquet")


@pytest.mark.parametrize(
    "table_type, lease", [("COPY_ON_WRITE", "storage"), ("MERGE_ON_READ", "storage"), ("COPY_ON_WRITE", "zookeeper")]
)
def test_laketide_write_to_s3_reads_back_as_the_model(s3, request, table_type, lease):
    uri = f"s3://lake/orders-{table_type.lower()}-{lease}"
    coordinator = (
        {"lease": lease, "zookeeper": request.getfixturevalue("zookeeper")}
        if lease == "zookeeper"
        else {"lease": "storage"}
    )
    settings = {"storage": {"options": s3}, "coordinator": coordinator, "write": {"index_shards": 2}}
    batches = [
        [row(i, 1) for i in range(1, 41)],
        [row(i, 2) for i in range(30, 51)] + [row(3, 2, deleted=True)],
        [row(i, 3) for i in (1, 2, 60)] + [row(31, 1)],  # 31 arrives late: older than the table's row
    ]
    for n, lines in enumerate(batches):
        new_table = (
            {"record_key": "id", "partition_by": "region", "ordering_field": "ts", "table_type": table_type}
            if n == 0
            else {}
        )
        data = orders(lines)
        report = laketide.write(uri, data, settings=settings, **new_table)
    assert report.late == 1
    assert rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS) == expected_rows(batches)
    table = Table.open(uri, FileIO.for_uri(uri, s3))
    assert rows(table.snapshot(), "id", DATA_COLUMNS) == expected_rows(batches)
    assert table.config.table_type == table_type and not table.timeline.pending()


def test_the_storage_lease_waits_names_the_holder_and_is_taken_over_once_expired(s3):
    from laketide.coordinator import LeaseHeld, LeaseLost
    from laketide.coordinator.storage_lease import StorageLease

    io = FileIO.for_uri("s3://lake/leased", s3)
    lost = []
    first = StorageLease(io, job_id="job-a", ttl=3, on_lost=lambda: lost.append(True))
    assert first.acquire().epoch == 1
    second = StorageLease(FileIO.for_uri("s3://lake/leased", s3), job_id="job-b", ttl=3)
    with pytest.raises(LeaseHeld, match="job-a"):
        second.acquire(timeout=4)  # longer than the ttl: the heartbeat keeps the first holding
    assert second.current_holder().job_id == "job-a"

    first._stop.set()  # the first holder freezes: no more heartbeats
    first._heartbeat.join()
    taken = second.acquire(timeout=10)
    assert taken.epoch == 2 and taken.job_id == "job-b"
    with pytest.raises(LeaseLost):
        first.check()
    assert lost == [True]
    second.release()
    third = StorageLease(io, job_id="job-c", ttl=3)
    assert third.acquire(timeout=0).epoch == 3, "a released lease is taken at once"
    third.release()


def test_the_streaming_job_writes_a_merge_on_read_table_on_s3(s3, tmp_path):
    """`laketide run` as users run it, a merge-on-read table on the S3 server under the storage lease, with
    updates, deletes, late events and bad rows; both write paths (the driver's threads, then Spark's tasks).
    Copy-on-write on S3 is the twenty-micro-batch test's."""
    table_type = "MERGE_ON_READ"
    from opslib import OpsTable

    uri = f"s3://lake/job-{table_type.lower()}"
    options = {f"storage.options.{k}": v for k, v in s3.items()}
    settings = {
        "table.path": uri,
        "table.type": table_type,
        "coordinator.lease": "storage",
        "compaction.delta_commits": "2",
        "mirror.delta": "true",
    }
    t = OpsTable(tmp_path, {**settings, **options})
    t.land(
        [[row(i, 1) for i in range(1, 31)], [row(i, 2) for i in range(20, 41)] + [row(3, 2, deleted=True), row(25, 1)]]
    )
    t.run()
    t.land([[row(i, 3) for i in range(1, 50, 4)] + [{"id": None, "ts": 3, "region": "us"}]])
    t.run(**{"write.driver_batch_bytes": "0"})
    assert rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS) == t.model.expected()
    table = Table.open(uri, FileIO.for_uri(uri, s3))
    assert rows(table.snapshot(), "id", DATA_COLUMNS) == t.model.expected()
    assert not table.timeline.pending() and len(table.timeline.completed_writes()) >= 3
    # the Delta mirror, read by delta-rs through the same endpoint: the read-optimized view on merge-on-read
    from deltalake import DeltaTable

    mirrored = rows(DeltaTable(uri, storage_options=s3).to_pyarrow_table(), "id", DATA_COLUMNS)
    assert mirrored == rows(table.read_optimized(), "id", DATA_COLUMNS)
    if table_type == "COPY_ON_WRITE":
        assert mirrored == t.model.expected()


def test_spark_reads_a_table_on_s3_through_the_laketide_source(s3, spark):
    """``spark.read.format("laketide")`` with ``storage.<key>`` options: the driver plans, the tasks read the slices."""
    uri = "s3://lake/read-by-spark"
    lines = [row(i, 1) for i in range(1, 21)] + [row(5, 2, deleted=True)]
    data = orders(lines)
    laketide.write(
        uri,
        data,
        record_key="id",
        partition_by="region",
        ordering_field="ts",
        settings={"storage": {"options": s3}, "coordinator": {"lease": "storage"}},
    )
    from laketide.spark.table_source import LaketideDataSource

    spark.dataSource.register(LaketideDataSource)
    reader = spark.read.format("laketide")
    for key, value in s3.items():
        reader = reader.option(f"storage.{key}", value)
    read = reader.load(uri).select(*DATA_COLUMNS).toArrow()
    assert rows(read, "id", DATA_COLUMNS) == expected_rows([lines])


def test_laketide_write_to_azure_blob_reads_back_as_the_model(azurite):
    """The same on Azure Blob (Azurite), ``az://``, under the storage lease: conditional creates and ETag updates there
    too."""
    io = FileIO.for_uri("az://lake/seam", azurite)
    assert io.create_exclusive("x", b"1") and not io.create_exclusive("x", b"2")
    uri = "az://lake/orders"
    settings = {"storage": {"options": azurite}, "coordinator": {"lease": "storage"}, "write": {"index_shards": 2}}
    batches = [
        [row(i, 1) for i in range(1, 31)],
        [row(i, 2) for i in range(20, 41)] + [row(3, 2, deleted=True), row(25, 1)],
    ]
    for n, lines in enumerate(batches):
        new_table = (
            {"record_key": "id", "partition_by": "region", "ordering_field": "ts", "table_type": "MERGE_ON_READ"}
            if n == 0
            else {}
        )
        laketide.write(
            uri,
            orders(lines),
            settings=settings,
            **new_table,
        )
    assert rows(hudi_read_store(uri, azurite), "id", DATA_COLUMNS) == expected_rows(batches)
    assert rows(Table.open(uri, FileIO.for_uri(uri, azurite)).snapshot(), "id", DATA_COLUMNS) == expected_rows(batches)


def test_the_requests_of_a_micro_batch_do_not_grow_with_the_history(s3):
    """One writer, as the job keeps it, writes 14 micro-batches into an S3 table: each reports its requests
    by kind, and the LIST requests of the last equal those of the fourth, within one, though the table
    holds three times the instants and files."""
    from writes import _loaded, batch_writer

    from laketide.coordinator import Coordinator
    from laketide.coordinator.storage_lease import StorageLease

    uri = "s3://lake/budget"
    io = FileIO.for_uri(uri, s3)
    table = Table.create(uri, "budget", ["id"], ["region"], "ts", io=io)
    lease = StorageLease(io, job_id="budget", ttl=30)
    lease.acquire()
    writer = batch_writer(table, Coordinator(table, lease, "budget"))
    try:
        reports = []
        for n in range(14):
            lines = [{"_hoodie_is_deleted": False, **row(i, n + 1)} for i in range(n * 5, n * 5 + 20)]
            reports.append(writer.run(n, lambda lines=lines: _loaded(writer, lines, ORDERS_SCHEMA)))
    finally:
        writer.close()
        lease.release()
    lists = [r.requests.get("LIST", 0) for r in reports]
    assert all(r.requests.get("PUT", 0) > 0 for r in reports)
    assert abs(lists[-1] - lists[3]) <= 1, lists
    assert "requests=" in reports[-1].line()


def test_a_store_that_ignores_conditional_writes_is_refused_by_the_storage_lease(s3):
    """moto behind a proxy that drops If-None-Match and If-Match: the lease's probe finds both missing and
    refuses, naming stores that have them (no lease's commit fence holds without create-if-absent); the probe
    leaves nothing behind. The same bucket straight from moto passes."""
    from faultproxy import FaultProxy

    from laketide.coordinator.storage_lease import PROBE_DIR, StorageLease
    from laketide.table.errors import Invalid

    proxy = FaultProxy(
        s3["aws_endpoint_url"].removeprefix("http://"), drop_headers=("If-None-Match", "If-Match")
    ).start()
    try:
        io = FileIO.for_uri("s3://lake/unconditional", {**s3, "aws_endpoint_url": proxy.endpoint})
        with pytest.raises(Invalid) as refused:
            StorageLease(io, job_id="job-a", ttl=3).acquire()
        assert (
            "If-None-Match" in str(refused.value)
            and "If-Match" in str(refused.value)
            and "no laketide table can live on this store" in str(refused.value)
        )
        assert io.list_dir(PROBE_DIR) == []
    finally:
        proxy.stop()
    lease = StorageLease(FileIO.for_uri("s3://lake/conditional", s3), job_id="job-b", ttl=3)
    lease.acquire()
    lease.release()


def test_a_store_without_batch_delete_gets_single_deletes(s3):
    from faultproxy import FaultProxy

    proxy = FaultProxy(s3["aws_endpoint_url"].removeprefix("http://"), batch_delete=False).start()
    try:
        io = FileIO.for_uri("s3://lake/no-batch-delete", {**s3, "aws_endpoint_url": proxy.endpoint})
        for i in range(3):
            io.write_bytes(f"d/f{i}", b"x")
        io.delete_dir("d")
        assert io.list_dir("d") == []
        io.write_bytes("e", b"y")
        assert io.delete("e") and not io.is_file("e")
    finally:
        proxy.stop()


def test_a_wrong_bucket_or_storage_option_is_a_laketide_error_naming_the_table(s3):
    """A bucket that is not there: the CLI exits 3 with JSON under --json, `laketide.write` raises a LaketideError
    naming the table's path (not its quarantine's), and a storage option the store does not know exits 2."""
    import json
    import subprocess

    from commands import CLI

    from laketide.table.errors import ErrorKind, LaketideError

    options = [a for k, v in s3.items() for a in ("-s", f"{k}={v}")]
    missing = subprocess.run(
        [CLI, *options, "timeline", "s3://no-such-bucket/orders", "--json"], capture_output=True, text=True, timeout=120
    )
    answer = json.loads(missing.stdout)
    assert (
        missing.returncode == 3 and answer["kind"] == "not_found" and "s3://no-such-bucket/orders" in answer["error"]
    ), missing.stderr[-2000:]
    assert "Traceback" not in missing.stderr
    with pytest.raises(LaketideError) as refused:
        laketide.write(
            "s3://no-such-bucket/orders",
            pa.table({"id": [1], "ts": [1]}),
            record_key="id",
            ordering_field="ts",
            settings={"storage": {"options": s3}, "coordinator": {"lease": "storage"}},
        )
    assert refused.value.kind is ErrorKind.NOT_FOUND and "s3://no-such-bucket/orders " in str(refused.value), str(
        refused.value
    )
    bogus = subprocess.run(
        [CLI, *options, "-s", "aws_no_such_key=1", "timeline", "s3://lake/orders", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bogus.returncode == 2 and "aws_no_such_key" in json.loads(bogus.stdout)["error"], bogus.stderr[-2000:]


KILLED_RESTORE = """
import os, sys
from laketide.coordinator.storage_lease import StorageLease
from laketide.table import FileIO, Table
from laketide.writer.job.operations import OPS_WRITER_ID, Operations

uri, savepoint, options = sys.argv[1], sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:])
table = Table.open(uri, FileIO.for_uri(uri, options))
with Operations.under_lease(table, StorageLease(table.io, job_id=OPS_WRITER_ID, ttl=4)) as operations:
    operations.restore(savepoint, progress=lambda done, total: os._exit(9))  # killed after its first rollback
"""


def test_a_restore_killed_part_way_is_finished_by_the_next_restore_command(s3, tmp_path):
    """`laketide restore` dies after rolling back the first of two writes (its storage lease still held); the same
    command run again waits for that holding to run out, finishes the restore, and the table is the savepoint's."""
    import json
    import subprocess
    import sys

    from commands import CLI

    uri = "s3://lake/killed-restore"
    settings = {"storage": {"options": s3}, "coordinator": {"lease": "storage"}}
    data = lambda v: orders([row(i, v) for i in range(1, 6)])  # noqa: E731
    laketide.write(uri, data(1), settings=settings, record_key="id", partition_by="region", ordering_field="ts")
    options = [a for k, v in s3.items() for a in ("-s", f"{k}={v}")]
    saved = subprocess.run(
        [CLI, *options, "savepoint", "create", uri, "--json"], capture_output=True, text=True, timeout=120
    )
    assert saved.returncode == 0, saved.stderr[-2000:]
    savepoint = json.loads(saved.stdout)["instant"]
    expected = rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS)
    for v in (2, 3):
        laketide.write(uri, data(v), settings=settings)
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_RESTORE, uri, savepoint, *(f"{k}={v}" for k, v in s3.items())],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == 9, killed.stderr[-2000:]
    assert Table.open(uri, FileIO.for_uri(uri, s3)).timeline.pending(["restore"]), "a restore is left part way"
    again = subprocess.run(
        [CLI, *options, "restore", uri, savepoint, "--json"], capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "held by another command" in again.stderr
    table = Table.open(uri, FileIO.for_uri(uri, s3))
    assert not table.timeline.pending() and rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS) == expected
