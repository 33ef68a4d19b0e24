"""Tables on an S3-protocol server (moto's server mode, started here on 127.0.0.1): the storage seam,
its conditional creates, and tables written there read back by hudi-rs and laketide's reader."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import laketide
from laketide.table import FileIO, Table
from laketide.table.io import InstantFileExists

from chaoslib import free_port
from conftest import rows
from streaming import DATA_COLUMNS, Model, land, row

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64()), ("ts", pa.int64()), ("region", pa.string()), ("_hoodie_is_deleted", pa.bool_())])


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on a free loopback port, with one bucket; the options every reader and writer takes."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    credentials = {"aws_access_key_id": "laketide", "aws_secret_access_key": "laketide", "region_name": "us-east-1"}
    boto3.client("s3", endpoint_url=endpoint, **credentials).create_bucket(Bucket="lake")
    yield {
        "aws_endpoint_url": endpoint, "aws_access_key_id": "laketide", "aws_secret_access_key": "laketide",
        "aws_region": "us-east-1", "allow_http": "true",
    }
    server.stop()


AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="  # Azurite's well-known account key
AZURITE = Path(__file__).resolve().parents[1] / ".tools" / "node_modules" / ".bin" / "azurite-blob"


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    """Azurite's Blob service (from npm, installed by ``make test``) on a free loopback port, with one container."""
    from azure.storage.blob import BlobServiceClient

    if not AZURITE.exists():
        pytest.fail(f"{AZURITE} is missing: run deploy/install-test-servers.sh (make test does)")
    port = free_port()
    data = tmp_path_factory.mktemp("azurite")
    server = subprocess.Popen(
        [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data), "--skipApiVersionCheck", "--silent"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}/devstoreaccount1"
    try:
        wait_for_port(port)
        connection = f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
        BlobServiceClient.from_connection_string(connection).create_container("lake")
        yield {"azure_storage_account_name": "devstoreaccount1", "azure_storage_account_key": AZURITE_KEY, "azure_endpoint": endpoint, "allow_http": "true"}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f}s")


def hudi_read_store(uri: str, options: dict) -> pa.Table:
    from hudi import HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(uri).with_storage_options(options).build()
    return pa.Table.from_batches(table.read())


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


def _expected(batches: list[list[dict]]) -> list[dict]:
    """Event-time ordering across writes: the highest ordering value wins (a tie: the later row), so a
    late row changes nothing; a delete that wins drops the key."""
    newest: dict[int, dict] = {}
    for lines in batches:
        for line in lines:
            current = newest.get(line["id"])
            if current is None or line["ts"] >= current["ts"]:
                newest[line["id"]] = line
    return [{c: line.get(c) for c in DATA_COLUMNS} for _, line in sorted(newest.items()) if not line.get("_hoodie_is_deleted")]


@pytest.mark.parametrize("table_type, lease", [("COPY_ON_WRITE", "storage"), ("MERGE_ON_READ", "storage"), ("COPY_ON_WRITE", "zookeeper")])
def test_laketide_write_to_s3_reads_back_as_the_model(s3, request, table_type, lease):
    uri = f"s3://lake/orders-{table_type.lower()}-{lease}"
    coordinator = {"lease": lease, "zookeeper": request.getfixturevalue("zookeeper")} if lease == "zookeeper" else {"lease": "storage"}
    settings = {"storage": {"options": s3}, "coordinator": coordinator, "write": {"index_shards": 2}}
    batches = [
        [row(i, 1) for i in range(1, 41)],
        [row(i, 2) for i in range(30, 51)] + [row(3, 2, deleted=True)],
        [row(i, 3) for i in (1, 2, 60)] + [row(31, 1)],  # 31 arrives late: older than the table's row
    ]
    for n, lines in enumerate(batches):
        new_table = {"record_key": "id", "partition_by": "region", "ordering_field": "ts", "table_type": table_type} if n == 0 else {}
        data = pa.Table.from_pylist([{"_hoodie_is_deleted": False, **line} for line in lines], SCHEMA)
        report = laketide.write(uri, data, settings=settings, **new_table)
    assert report.late == 1
    assert rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS) == _expected(batches)
    table = Table.open(uri, FileIO.for_uri(uri, s3))
    assert rows(table.snapshot(), "id", DATA_COLUMNS) == _expected(batches)
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
    settings = {"table.path": uri, "table.type": table_type, "coordinator.lease": "storage", "compaction.delta_commits": "2", "mirror.delta": "true"}
    t = OpsTable(tmp_path, {**settings, **options})
    t.land([[row(i, 1) for i in range(1, 31)], [row(i, 2) for i in range(20, 41)] + [row(3, 2, deleted=True), row(25, 1)]])
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
    data = pa.Table.from_pylist([{"_hoodie_is_deleted": False, **line} for line in lines], SCHEMA)
    laketide.write(uri, data, record_key="id", partition_by="region", ordering_field="ts", settings={"storage": {"options": s3}, "coordinator": {"lease": "storage"}})
    from laketide.spark.table_source import LaketideDataSource

    spark.dataSource.register(LaketideDataSource)
    reader = spark.read.format("laketide")
    for key, value in s3.items():
        reader = reader.option(f"storage.{key}", value)
    read = reader.load(uri).select(*DATA_COLUMNS).toArrow()
    assert rows(read, "id", DATA_COLUMNS) == _expected([lines])


def test_laketide_write_to_azure_blob_reads_back_as_the_model(azurite):
    """The same on Azure Blob (Azurite), ``az://``, under the storage lease: conditional creates and ETag updates there too."""
    io = FileIO.for_uri("az://lake/seam", azurite)
    assert io.create_exclusive("x", b"1") and not io.create_exclusive("x", b"2")
    uri = "az://lake/orders"
    settings = {"storage": {"options": azurite}, "coordinator": {"lease": "storage"}, "write": {"index_shards": 2}}
    batches = [[row(i, 1) for i in range(1, 31)], [row(i, 2) for i in range(20, 41)] + [row(3, 2, deleted=True), row(25, 1)]]
    for n, lines in enumerate(batches):
        new_table = {"record_key": "id", "partition_by": "region", "ordering_field": "ts", "table_type": "MERGE_ON_READ"} if n == 0 else {}
        laketide.write(uri, pa.Table.from_pylist([{"_hoodie_is_deleted": False, **line} for line in lines], SCHEMA), settings=settings, **new_table)
    assert rows(hudi_read_store(uri, azurite), "id", DATA_COLUMNS) == _expected(batches)
    assert rows(Table.open(uri, FileIO.for_uri(uri, azurite)).snapshot(), "id", DATA_COLUMNS) == _expected(batches)


def test_the_requests_of_a_micro_batch_do_not_grow_with_the_history(s3):
    """One writer, as the job keeps it, writes 14 micro-batches into an S3 table: each reports its requests
    by kind, and the LIST requests of the last equal those of the fourth, within one, though the table
    holds three times the instants and files."""
    from laketide.coordinator import Coordinator
    from laketide.coordinator.storage_lease import StorageLease

    from writes import _loaded, batch_writer

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
            reports.append(writer.run(n, lambda lines=lines: _loaded(writer, lines, SCHEMA)))
    finally:
        writer.close()
        lease.release()
    lists = [r.requests.get("LIST", 0) for r in reports]
    assert all(r.requests.get("PUT", 0) > 0 for r in reports)
    assert abs(lists[-1] - lists[3]) <= 1, lists
    assert "requests=" in reports[-1].line()


def test_a_frozen_job_on_s3_is_taken_over_and_exits_without_completing_anything(s3, tmp_path):
    """Two `laketide run` jobs on one S3 table under the storage lease: the second waits and fails naming
    the first; once the first is frozen (SIGSTOP) past `lease_ttl`, a second takes over and commits; the
    first, woken, exits with code 5 having completed nothing, and the table equals the model."""
    from chaoslib import Job, job_args, wait_until
    from streaming import Model, land

    uri = "s3://lake/takeover"
    conf = [f"table.path={uri}", "coordinator.lease=storage", "coordinator.lease_ttl=6", *(f"storage.options.{k}={v}" for k, v in s3.items())]
    model = Model()
    first_lines = [row(i, 1) for i in range(1, 21)]
    land(tmp_path, "batch-000.json", first_lines, 1_700_000_000)
    model.apply(first_lines)
    first = Job(job_args(tmp_path, trigger="1 second", extra=conf), tmp_path / "first.log").start()
    holder = f"pid {first.proc.pid}"
    table = lambda: Table.open(uri, FileIO.for_uri(uri, s3))  # noqa: E731
    try:
        wait_until(lambda: _commits(table) >= 1, 180, "the first job's first commit")
        second = Job(job_args(tmp_path, extra=[*conf, "coordinator.lease_wait=2"]), tmp_path / "second.log").start()
        assert second.wait(180) == 4 and "is held by" in second.log_tail() and holder in second.log_tail(), second.log_tail()
        first.signal(signal.SIGSTOP)
        time.sleep(8)  # past lease_ttl
        more = [row(i, 2) for i in range(10, 31)]
        land(tmp_path, "batch-001.json", more, 1_700_000_001)
        model.apply(more)
        third = Job(job_args(tmp_path, extra=[*conf, "coordinator.lease_wait=30"]), tmp_path / "third.log").start()
        assert third.wait(300) == 0, third.log_tail()
        first.signal(signal.SIGCONT)
        assert first.wait(120) == 5, first.log_tail()
    finally:
        if first.running():
            first.signal(signal.SIGCONT)
            first.kill()
    current = table()
    assert not current.timeline.pending()
    assert rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS) == model.expected()
    committed = {i.timestamp for i in current.timeline.completed_writes()}
    written = [e.path for e in current.io.walk() if e.path.endswith(".parquet") and not e.path.startswith(".hoodie")]
    assert written and all(path.rsplit("_", 1)[1][:17] in committed for path in written), "no file of an instant that did not complete"


def _commits(table) -> int:
    try:
        return len(table().timeline.completed_writes())
    except Exception:
        return 0


def twenty_batches() -> list[list[dict]]:
    """20 landing files: inserts and updates, a delete every fourth, a late event (an older ordering value
    than the table holds) every fifth, and every seventh large enough for Spark's tasks to write it."""
    batches = []
    for n in range(20):
        lines = [row(i, n + 2) for i in range(n * 6, n * 6 + 18)]
        if n % 4 == 3:
            lines.append(row(n * 6 - 10, n + 2, deleted=True))
        if n % 5 == 4:
            lines.append(row(n * 6 - 3, 1))  # written at n + 1 already; ts 1 is older
        if n % 7 == 6:
            lines += [row(i, n + 2) for i in range(1000, 1400)]
        batches.append(lines)
    return batches


def run_twenty_batches(tmp_path: Path, uri: str, options: dict, table_type: str, metrics: list[str] | None = None) -> Model:
    """``laketide run`` (available-now, one file per micro-batch, the storage lease, the Delta mirror) over
    ``twenty_batches``; while it runs, ``metrics`` gets each scrape of its ``/metrics``."""
    import httpx

    from chaoslib import Job, job_args

    model, port = Model(event_time=True), free_port()
    for n, lines in enumerate(twenty_batches()):
        land(tmp_path, f"batch-{n:03d}.json", lines, 1_700_000_000 + n)
        model.apply(lines)
    conf = [f"table.path={uri}", f"table.type={table_type}", "coordinator.lease=storage", "mirror.delta=true", "compaction.delta_commits=4", "write.driver_batch_bytes=16000"]
    conf += [f"storage.options.{k}={v}" for k, v in options.items()]
    job = Job(job_args(tmp_path, api_port=port, extra=conf), tmp_path / "job.log").start()
    while metrics is not None and job.running():
        try:
            metrics.append(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    assert job.wait(600) == 0, job.log_tail()
    log = (tmp_path / "job.log").read_text()
    assert log.count(" on driver (") >= 15 and log.count(" on tasks (") >= 2, "both write paths"
    return model


def assert_every_reader_equals(uri: str, options: dict, model: Model, table_type: str) -> None:
    """hudi-rs and laketide's reader equal the model; delta-rs reads the mirror as the table's read-optimized view."""
    from deltalake import DeltaTable

    assert rows(hudi_read_store(uri, options), "id", DATA_COLUMNS) == model.expected()
    table = Table.open(uri, FileIO.for_uri(uri, options))
    assert rows(table.snapshot(), "id", DATA_COLUMNS) == model.expected()
    assert not table.timeline.pending() and len(table.timeline.completed_writes()) >= 20
    mirrored = rows(DeltaTable(uri, storage_options=options).to_pyarrow_table(), "id", DATA_COLUMNS)
    assert mirrored == rows(table.read_optimized(), "id", DATA_COLUMNS)
    if table_type == "COPY_ON_WRITE":
        assert mirrored == model.expected()


def test_twenty_micro_batches_land_through_a_store_that_throttles_and_resets(s3, tmp_path):
    """Through a proxy that answers 10% of requests with 503 SlowDown, resets 2% of connections and delays
    some, `laketide run` writes 20 micro-batches (updates, deletes, late events, both write paths) into an
    S3 table under the storage lease: it completes, every reader equals the model, and its ``/metrics``
    and log lines count the retries."""
    from faultproxy import FaultProxy

    proxy = FaultProxy(s3["aws_endpoint_url"].removeprefix("http://"), slow_down=0.10, reset=0.02, delay=0.02).start()
    uri, scrapes = "s3://lake/flaky", []
    try:
        model = run_twenty_batches(tmp_path, uri, {**s3, "aws_endpoint_url": proxy.endpoint}, "COPY_ON_WRITE", scrapes)
    finally:
        proxy.stop()
    assert proxy.counts["slow_down"] > 50 and proxy.counts["reset"] > 5, proxy.counts
    assert_every_reader_equals(uri, s3, model, "COPY_ON_WRITE")
    retried = [float(line.split()[-1]) for text in scrapes for line in text.splitlines() if line.startswith("laketide_storage_retries_total ")]
    assert retried and max(retried) > 0, "retries show in /metrics"
    assert " retries=" in (tmp_path / "job.log").read_text()


def test_twenty_micro_batches_land_on_azure_blob(azurite, tmp_path):
    """The same 20 micro-batches into a merge-on-read table on Azurite (``az://``), compacted as they go."""
    uri = "az://lake/twenty"
    model = run_twenty_batches(tmp_path, uri, azurite, "MERGE_ON_READ")
    assert_every_reader_equals(uri, azurite, model, "MERGE_ON_READ")


def test_a_store_that_keeps_failing_stops_the_job_and_the_next_run_recovers(s3, tmp_path):
    """The store answers every request with 503 from the second micro-batch on: past storage.max_retries
    the job exits 6 naming the store and the way out. Once the store answers again, the next run rolls back
    what the failed micro-batch left, writes it again, and the table equals the model."""
    from faultproxy import FaultProxy

    from chaoslib import Job, job_args, wait_until

    proxy = FaultProxy(s3["aws_endpoint_url"].removeprefix("http://")).start()
    uri, model = "s3://lake/failing", Model(event_time=True)
    for n in range(3):
        lines = [row(i, n + 1) for i in range(n * 5, n * 5 + 15)]
        land(tmp_path, f"batch-{n:03d}.json", lines, 1_700_000_000 + n)
        model.apply(lines)
    conf = [f"table.path={uri}", "coordinator.lease=storage", "coordinator.lease_ttl=6", "storage.max_retries=2"]
    conf += [f"storage.options.{k}={v}" for k, v in {**s3, "aws_endpoint_url": proxy.endpoint}.items()]
    log = tmp_path / "failing.log"
    try:
        job = Job(job_args(tmp_path, trigger="3 seconds", extra=conf), log).start()
        wait_until(lambda: "micro-batch 0: instant" in log.read_text() or not job.running(), 180, "the first micro-batch")
        proxy.slow_down = 1.0
        assert job.wait(300) == 6, job.log_tail()
        assert "storage.max_retries" in job.log_tail() and proxy.endpoint.removeprefix("http://") in job.log_tail()
    finally:
        proxy.stop()
    final = Job(job_args(tmp_path, extra=[*conf[:-len(s3)], *(f"storage.options.{k}={v}" for k, v in s3.items()), "coordinator.lease_wait=30"]), tmp_path / "final.log").start()
    assert final.wait(300) == 0, final.log_tail()
    table = Table.open(uri, FileIO.for_uri(uri, s3))
    assert rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS) == model.expected()
    assert not table.timeline.pending()


def test_kill_9_cycles_on_s3_leave_the_model_exact_and_no_file_of_a_lost_instant(s3, tmp_path):
    """Five `laketide run` jobs on an S3 table, each killed (SIGKILL, the whole process group) at a random
    moment once it holds the storage lease; the next one waits out the dead holder's lease, recovers and
    goes on. A last run drains the landing directory: the table equals the model, nothing is pending,
    and no data file of an instant that did not complete is left."""
    import random

    from chaoslib import Job, job_args, leftover_data_files, wait_until
    from streaming import Model, land

    uri = "s3://lake/killed"
    conf = [f"table.path={uri}", "coordinator.lease=storage", "coordinator.lease_ttl=3", "coordinator.lease_wait=30"]
    conf += [f"storage.options.{k}={v}" for k, v in s3.items()]
    rng, model = random.Random(11), Model()
    for n in range(8):
        lines = [row(i, n + 1) for i in range(n * 4, n * 4 + 12)] + ([row(n * 4, n + 1, deleted=True)] if n % 3 == 2 else [])
        land(tmp_path, f"batch-{n:03d}.json", lines, 1_700_000_000 + n)
        model.apply(lines)
    for cycle in range(5):
        log = tmp_path / f"job-{cycle}.log"
        job = Job(job_args(tmp_path, trigger="1 second", extra=conf), log).start()
        wait_until(lambda: not job.running() or "lease of " in log.read_text(), 180, "the job to take the lease")
        time.sleep(rng.uniform(0.5, 6))
        assert job.running(), job.log_tail()
        job.kill()
    final = Job(job_args(tmp_path, extra=conf), tmp_path / "final.log").start()
    assert final.wait(300) == 0, final.log_tail()
    table = Table.open(uri, FileIO.for_uri(uri, s3))
    assert rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS) == model.expected()
    assert not table.timeline.pending() and leftover_data_files(table) == []


def test_every_cli_command_works_on_an_s3_table(s3, tmp_path):
    """The CLI on a merge-on-read table on the S3 server, its store given with ``--storage-option``:
    timeline, show, file-groups, partitions, lease, savepoint, rollback, restore, compact, clean, mirror,
    metadata drop and serve. After each change hudi-rs equals the model; the mirror equals the table's
    read-optimized view."""
    import json

    import httpx
    from deltalake import DeltaTable

    from opslib import CLI, ENV

    uri = "s3://lake/ops"
    store = [a for k, v in s3.items() for a in ("--storage-option", f"{k}={v}")]

    def cli(*args: str, expect: int = 0) -> str:
        done = subprocess.run([CLI, *store, *args], capture_output=True, text=True, env=ENV, timeout=300)
        assert done.returncode == expect, f"laketide {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
        return done.stdout

    batches = [[row(i, n + 1) for i in range(n * 5, n * 5 + 20)] + ([row(n * 5, n + 1, deleted=True)] if n == 2 else []) for n in range(4)]
    states = []
    settings = {"storage": {"options": s3}, "coordinator": {"lease": "storage"}, "write": {"index_shards": 2}}
    for n, lines in enumerate(batches):
        new = {"record_key": "id", "partition_by": "region", "ordering_field": "ts", "table_type": "MERGE_ON_READ"} if n == 0 else {}
        laketide.write(uri, pa.Table.from_pylist([{"_hoodie_is_deleted": False, **line} for line in lines], SCHEMA), settings=settings, **new)
        states.append(_expected(batches[: n + 1]))
    read = lambda: rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS)  # noqa: E731
    writes = [i["instant"] for i in json.loads(cli("timeline", uri, "--json")) if i["state"] == "COMPLETED"]
    assert len(writes) == 4 and read() == states[-1]
    assert json.loads(cli("show", uri, writes[0], "--json"))["instant"] == writes[0]
    assert json.loads(cli("file-groups", uri, "--json")) and json.loads(cli("partitions", uri, "--json"))
    assert "nobody holds the lease" in cli("lease", uri)

    cli("savepoint", "create", uri, writes[2])  # writes are newest first: the second write
    cli("rollback", uri, writes[0])
    assert read() == states[2]
    cli("restore", uri, writes[2])
    assert read() == states[1]
    cli("compact", uri, "--delta-commits", "1")
    cli("clean", uri, "--retain-commits", "1")
    assert read() == states[1]
    cli("mirror", uri)
    table = Table.open(uri, FileIO.for_uri(uri, s3))
    assert rows(DeltaTable(uri, storage_options=s3).to_pyarrow_table(), "id", DATA_COLUMNS) == rows(table.read_optimized(), "id", DATA_COLUMNS)
    cli("metadata", "drop", uri)
    cli("savepoint", "delete", uri, writes[2])

    port = free_port()
    server = subprocess.Popen([CLI, *store, "serve", "--table", uri, "--port", str(port)], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                instants = httpx.get(f"http://127.0.0.1:{port}/v1/instants", timeout=5).json()["items"]
                break
            except httpx.HTTPError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read() if server.poll() is not None else "no answer"
                time.sleep(0.3)
        assert any(i["action"] == "restore" for i in instants)
    finally:
        server.terminate()
        server.wait(30)
    assert read() == states[1] and not table.timeline.pending()
    cli("--storage-option", "nonsense", "timeline", uri, expect=2)
