"""`laketide run` and the CLI on tables on object-store servers started here (moto's S3 server, Azurite, s3rver):
20 micro-batches through a store that throttles and resets, a store that stops answering, kill -9
cycles, a frozen lease holder taken over, and every CLI command."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path

import pytest
from chaoslib import free_port
from readback import rows
from stores import expected_rows, hudi_read_store
from streaming import DATA_COLUMNS, SCHEMA_DDL, Model, land, row
from writes import orders

import laketide
from laketide.table import FileIO, Table


def test_a_frozen_job_on_s3_is_taken_over_and_exits_without_completing_anything(s3, tmp_path):
    """Two `laketide run` jobs on one S3 table under the storage lease: the second waits and fails naming
    the first; once the first is frozen (SIGSTOP) past `lease_ttl`, a second takes over and commits; the
    first, woken, exits with code 5 having completed nothing, and the table equals the model."""
    from chaoslib import Job, job_args, wait_until
    from streaming import Model, land

    uri = "s3://lake/takeover"
    conf = [
        f"table.path={uri}",
        "coordinator.lease=storage",
        "coordinator.lease_ttl=6",
        *(f"storage.options.{k}={v}" for k, v in s3.items()),
    ]
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
        assert second.wait(180) == 4 and "is held by" in second.log_tail() and holder in second.log_tail(), (
            second.log_tail()
        )
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
    assert written and all(path.rsplit("_", 1)[1][:17] in committed for path in written), (
        "no file of an instant that did not complete"
    )


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


def run_twenty_batches(
    tmp_path: Path,
    uri: str,
    options: dict,
    table_type: str,
    metrics: list[str] | None = None,
    settings: tuple[str, ...] = (),
) -> Model:
    """``laketide run`` (available-now, one file per micro-batch, the storage lease, the Delta mirror) over
    ``twenty_batches``; while it runs, ``metrics`` gets each scrape of its ``/metrics``."""
    import httpx
    from chaoslib import Job, job_args

    model, port = Model(event_time=True), free_port()
    for n, lines in enumerate(twenty_batches()):
        land(tmp_path, f"batch-{n:03d}.json", lines, 1_700_000_000 + n)
        model.apply(lines)
    conf = [
        f"table.path={uri}",
        f"table.type={table_type}",
        "coordinator.lease=storage",
        "mirror.delta=true",
        "compaction.delta_commits=4",
        "write.driver_batch_bytes=16000",
        *settings,
    ]
    conf += [f"storage.options.{k}={v}" for k, v in options.items()]
    job = Job(job_args(tmp_path, api_port=port, extra=conf), tmp_path / "job.log").start()
    while metrics is not None and job.running():
        with contextlib.suppress(httpx.HTTPError):
            metrics.append(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
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
    retried = [
        float(line.split()[-1])
        for text in scrapes
        for line in text.splitlines()
        if line.startswith("laketide_storage_retries_total{")
    ]
    assert retried and max(retried) > 0, "retries show in /metrics"
    assert " retries=" in (tmp_path / "job.log").read_text()


def test_twenty_micro_batches_land_on_azure_blob(azurite, tmp_path):
    """The same 20 micro-batches into a merge-on-read table of version 8 (Hudi 1.0's) on Azurite (``az://``),
    compacted as they go."""
    uri = "az://lake/twenty"
    model = run_twenty_batches(tmp_path, uri, azurite, "MERGE_ON_READ", settings=("table.version=8",))
    assert Table.open(uri, FileIO.for_uri(uri, azurite)).config.version == 8
    assert_every_reader_equals(uri, azurite, model, "MERGE_ON_READ")


def test_a_store_that_keeps_failing_stops_the_job_and_the_next_run_recovers(s3, tmp_path):
    """The store answers every request with 503 from the second micro-batch on: past storage.max_retries
    the job exits 6 naming the store and the way out. Once the store answers again, the next run rolls back
    what the failed micro-batch left, writes it again, and the table equals the model."""
    from chaoslib import Job, job_args
    from faultproxy import FaultProxy

    proxy = FaultProxy(s3["aws_endpoint_url"].removeprefix("http://")).start()
    uri, model = "s3://lake/failing", Model(event_time=True)
    for n in range(3):
        lines = [row(i, n + 1) for i in range(n * 5, n * 5 + 15)]
        land(tmp_path, f"batch-{n:03d}.json", lines, 1_700_000_000 + n)
        model.apply(lines)
    try:
        code, tail, conf = _into_an_outage(tmp_path, s3, proxy, uri, "3 seconds", 2)
        assert code == 6, tail
        assert "storage.max_retries" in tail and proxy.endpoint.removeprefix("http://") in tail
    finally:
        proxy.stop()
    final = Job(
        job_args(
            tmp_path,
            extra=[
                *conf[: -len(s3)],
                *(f"storage.options.{k}={v}" for k, v in s3.items()),
                "coordinator.lease_wait=30",
            ],
        ),
        tmp_path / "final.log",
    ).start()
    assert final.wait(300) == 0, final.log_tail()
    table = Table.open(uri, FileIO.for_uri(uri, s3))
    assert rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS) == model.expected()
    assert not table.timeline.pending()


def test_kill_9_cycles_on_s3_leave_the_model_exact_and_no_file_of_a_lost_instant(s3, tmp_path):
    """Five `laketide run` jobs on an S3 table of version 8 (Hudi 1.0's), each killed (SIGKILL, the whole
    process group) at a random moment once it holds the storage lease; the next one waits out the dead
    holder's lease, recovers and goes on. A last run drains the landing directory: the table equals the
    model, nothing is pending, and no data file of an instant that did not complete is left."""
    import random

    from chaoslib import Job, job_args, leftover_data_files, wait_until
    from streaming import Model, land

    uri = "s3://lake/killed"
    conf = [f"table.path={uri}", "table.version=8", "coordinator.lease=storage", "coordinator.lease_ttl=3"]
    conf += ["coordinator.lease_wait=30"]
    conf += [f"storage.options.{k}={v}" for k, v in s3.items()]
    rng, model = random.Random(11), Model()
    for n in range(8):
        lines = [row(i, n + 1) for i in range(n * 4, n * 4 + 12)] + (
            [row(n * 4, n + 1, deleted=True)] if n % 3 == 2 else []
        )
        land(tmp_path, f"batch-{n:03d}.json", lines, 1_700_000_000 + n)
        model.apply(lines)
    for cycle in range(5):
        log = tmp_path / f"job-{cycle}.log"
        job = Job(job_args(tmp_path, trigger="1 second", extra=conf), log).start()
        wait_until(
            lambda job=job, log=log: not job.running() or "lease of " in log.read_text(),
            180,
            "the job to take the lease",
        )
        time.sleep(rng.uniform(0.5, 6))
        assert job.running(), job.log_tail()
        job.kill()
    final = Job(job_args(tmp_path, extra=conf), tmp_path / "final.log").start()
    assert final.wait(300) == 0, final.log_tail()
    table = Table.open(uri, FileIO.for_uri(uri, s3))
    assert rows(hudi_read_store(uri, s3), "id", DATA_COLUMNS) == model.expected()
    assert not table.timeline.pending() and leftover_data_files(table) == []
    assert table.config.version == 8


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
        assert done.returncode == expect, (
            f"laketide {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
        )
        return done.stdout

    batches = [
        [row(i, n + 1) for i in range(n * 5, n * 5 + 20)] + ([row(n * 5, n + 1, deleted=True)] if n == 2 else [])
        for n in range(4)
    ]
    states = []
    settings = {"storage": {"options": s3}, "coordinator": {"lease": "storage"}, "write": {"index_shards": 2}}
    for n, lines in enumerate(batches):
        new = (
            {"record_key": "id", "partition_by": "region", "ordering_field": "ts", "table_type": "MERGE_ON_READ"}
            if n == 0
            else {}
        )
        laketide.write(
            uri,
            orders(lines),
            settings=settings,
            **new,
        )
        states.append(expected_rows(batches[: n + 1]))
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
    assert rows(DeltaTable(uri, storage_options=s3).to_pyarrow_table(), "id", DATA_COLUMNS) == rows(
        table.read_optimized(), "id", DATA_COLUMNS
    )
    cli("metadata", "drop", uri)
    cli("savepoint", "delete", uri, writes[2])

    port = free_port()
    server = subprocess.Popen(
        [CLI, *store, "serve", "--table", uri, "--port", str(port)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                instants = httpx.get(f"http://127.0.0.1:{port}/v1/instants", timeout=5).json()["items"]
                break
            except httpx.HTTPError:
                assert server.poll() is None and time.monotonic() < deadline, (
                    server.stderr.read() if server.poll() is not None else "no answer"
                )
                time.sleep(0.3)
        assert any(i["action"] == "restore" for i in instants)
    finally:
        server.terminate()
        server.wait(30)
    assert read() == states[1] and not table.timeline.pending()
    cli("--storage-option", "nonsense", "timeline", uri, expect=2)


@pytest.mark.parametrize("where", ["s3-storage-inline", "local-zookeeper-async"])
def test_a_holder_paused_in_its_compaction_leaves_no_second_base_file_when_it_wakes(where, request, tmp_path):
    """Merge-on-read, on S3 under the storage lease (inline compaction) and on local disk under ZooKeeper
    (async): the first job pauses (SIGSTOP) while it compacts, just before it closes a base file; a second
    job takes the lease over, finishes that compaction and the stream; the first, woken, finds its lease
    gone and stops. Then, and again after the next commit, hudi-rs reads the model and every base file is
    named by the commit of its instant."""
    import os

    from streaming import COMPACTING_BATCHES, PYTHON, RUNNER, expected_after

    for n, lines in enumerate(COMPACTING_BATCHES):
        land(tmp_path, f"batch-{n:03d}.json", lines, 1_700_000_000 + n)
    if where.startswith("s3"):
        options = request.getfixturevalue("s3")
        uri = "s3://lake/paused-compaction"
        conf = [
            "compaction.mode=inline",
            "coordinator.lease=storage",
            "coordinator.lease_ttl=6",
            *(f"storage.options.{k}={v}" for k, v in options.items()),
        ]
    else:
        options, uri = {}, str(tmp_path / "table")
        conf = [
            "compaction.mode=async",
            "coordinator.lease=zookeeper",
            f"coordinator.zookeeper={request.getfixturevalue('zookeeper')}",
            "coordinator.zookeeper_session_timeout=4",
        ]
    conf = [f"table.path={uri}", "table.type=MERGE_ON_READ", "compaction.delta_commits=2", *conf]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}

    def matches_the_model(batches: list) -> Table:
        table = Table.open(uri, FileIO.for_uri(uri, options))
        assert rows(hudi_read_store(uri, options), "id", DATA_COLUMNS) == expected_after(batches)
        named = {
            s.path for i in table.timeline.completed_writes() for s in table.timeline.commit_metadata(i).write_stats()
        }
        base_files = [
            e.path for e in table.io.walk() if e.path.endswith(".parquet") and not e.path.startswith(".hoodie")
        ]
        assert base_files and set(base_files) <= named, sorted(set(base_files) - named)
        return table

    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(
            [PYTHON, str(RUNNER), str(tmp_path), "freeze:compaction-closing", "-1", *conf],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        from chaoslib import wait_until

        wait_until(lambda: first.poll() is None and _stopped(first.pid), 300, "the first job paused in its compaction")
        time.sleep(8)  # past the lease's ttl, the session's timeout
        second = subprocess.run(
            [PYTHON, str(RUNNER), str(tmp_path), "-", "0", *conf, "coordinator.lease_wait=30"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert second.returncode == 0, second.stderr[-3000:]
        first.send_signal(signal.SIGCONT)
        assert (
            first.wait(120) != 0 and "LeaseLost" in (tmp_path / "first.log").read_text()[-3000:]
        )  # `laketide run` exits 5 on it
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGCONT)
            first.kill()
    # the woken writer deleted the base file it closed after its lease went; what else it left, the next commit's sweep
    # takes
    matches_the_model(COMPACTING_BATCHES)
    land(tmp_path, "batch-999.json", [row(1, 99)], 1_700_000_999)
    later = subprocess.run(
        [PYTHON, str(RUNNER), str(tmp_path), "-", "0", *conf], env=env, capture_output=True, text=True, timeout=600
    )
    assert later.returncode == 0, later.stderr[-3000:]
    assert not matches_the_model([*COMPACTING_BATCHES, [row(1, 99)]]).timeline.pending()


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_a_store_that_stops_answering_while_the_job_waits_ends_the_lease_with_exit_6_naming_it(s3, tmp_path):
    """No micro-batch in flight: the lease's renewal is what meets the outage. Once the holding runs out the job
    stops with exit 6 (unavailable), naming the store and that the lease could not be renewed, not a takeover."""
    from faultproxy import FaultProxy

    proxy = FaultProxy(s3["aws_endpoint_url"].removeprefix("http://")).start()
    land(tmp_path, "batch-000.json", [row(i, 1) for i in range(5)], 1_700_000_000)
    try:
        code, tail, _ = _into_an_outage(tmp_path, s3, proxy, "s3://lake/outage", "2 seconds", 1)
        assert code == 6, tail
        assert "could not be reached to renew the lease" in tail and "s3://lake/outage" in tail
    finally:
        proxy.stop()


def _into_an_outage(tmp_path, s3: dict, proxy, uri: str, trigger: str, max_retries: int) -> tuple[int, str, list[str]]:
    """A job on ``uri`` through ``proxy`` until its first micro-batch, then every request answered 503: its exit
    code, its log's tail and its settings."""
    from chaoslib import Job, job_args, wait_until

    conf = [
        f"table.path={uri}",
        "coordinator.lease=storage",
        "coordinator.lease_ttl=6",
        f"storage.max_retries={max_retries}",
    ]
    conf += [f"storage.options.{k}={v}" for k, v in {**s3, "aws_endpoint_url": proxy.endpoint}.items()]
    log = tmp_path / "outage.log"
    job = Job(job_args(tmp_path, trigger=trigger, extra=conf), log).start()
    wait_until(lambda: "micro-batch 0: instant" in log.read_text() or not job.running(), 180, "the first micro-batch")
    proxy.slow_down = 1.0
    return job.wait(300), job.log_tail(), conf


@pytest.mark.parametrize(
    ("store", "lease"),
    [("s3", "storage"), ("s3", "zookeeper"), ("s3", "local"), ("s3rver", "storage"), ("s3rver", "zookeeper")],
)
def test_a_refused_job_names_a_way_out_that_works_and_leaves_the_bucket_as_it_was(
    request, zookeeper, tmp_path, store, lease
):
    """Two stores whose creates do not honour If-None-Match: moto behind a proxy that drops it and If-Match, and
    s3rver, which ignores both. No lease's commit fence holds there, so the job is refused at start under the
    storage lease and under ZooKeeper alike, naming stores that do; ``lease = 'local'`` on an object store is
    refused before the table is opened. Each in one clear line, the bucket as it was."""
    import boto3
    from faultproxy import FaultProxy

    served = request.getfixturevalue(store)
    client = boto3.client(
        "s3",
        endpoint_url=served["aws_endpoint_url"],
        aws_access_key_id=served["aws_access_key_id"],
        aws_secret_access_key=served["aws_secret_access_key"],
        region_name="us-east-1",
    )

    def objects() -> list[str]:
        return sorted(o["Key"] for o in client.list_objects_v2(Bucket="lake").get("Contents", []))

    land(tmp_path, "0001.json", [row(i, 1) for i in range(5)], time.time() - 60)
    before = objects()
    proxy = None
    if store == "s3":  # moto, behind the proxy
        upstream = served["aws_endpoint_url"].removeprefix("http://")
        proxy = FaultProxy(upstream, drop_headers=("If-None-Match", "If-Match")).start()
    try:
        options = {**served, "aws_endpoint_url": proxy.endpoint} if proxy else served
        done = _run_once(tmp_path, options, lease, zookeeper)
    finally:
        if proxy:
            proxy.stop()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Nothing was written" in done.stderr
    if lease == "local":
        assert "coordinator.lease = 'local' needs a table on the local file system" in done.stderr
    else:
        assert "create-if-absent" in done.stderr and "no laketide table can live on this store" in done.stderr
        assert "'local'" not in done.stderr
    assert objects() == before
    assert not (tmp_path / "checkpoint").exists() or not any((tmp_path / "checkpoint").rglob("*"))


def _run_once(tmp_path: Path, options: dict, lease: str, zookeeper: str) -> subprocess.CompletedProcess:
    from opslib import CLI, ENV

    conf = [
        "table.path=s3://lake/refused",
        "table.name=refused",
        'table.record_key=["id"]',
        "source.format=json",
        f"source.path={tmp_path / 'landing'}",
        f"source.schema={SCHEMA_DDL}",
        f"stream.checkpoint={tmp_path / 'checkpoint'}",
        "stream.trigger=available-now",
        f"coordinator.lease={lease}",
        *([f"coordinator.zookeeper={zookeeper}"] if lease == "zookeeper" else []),
        *(f"storage.options.{k}={v}" for k, v in options.items()),
    ]
    args = [a for c in conf for a in ("--conf", c)]
    return subprocess.run([CLI, "run", *args], capture_output=True, text=True, env=ENV, timeout=300)
