"""``laketide run`` with ``[catalog]``: the table's entries follow its commits, and a metastore that is not there
fails no micro-batch (the job commits every batch and ends well, saying what failed); one that goes away for a
minute under a running job is caught up with once it is back, though no commit follows."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from urllib.parse import unquote

import httpx
from chaoslib import Feeder, Job, completed_count, free_port, job_args, wait_until
from readback import hudi_read, rows
from streaming import BATCHES, DATA_COLUMNS, expected_after, land_all

from laketide.table import Table

ENV = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}


def run(root, *catalog: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        job_args(root, extra=["catalog.kind=hive", "catalog.database=lake", *catalog]),
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )


def test_the_job_registers_its_table_and_its_last_commit_before_it_exits(metastore, tmp_path):
    land_all(tmp_path, BATCHES)
    done = run(tmp_path, f"catalog.uri={metastore.uri}", "mirror.delta=true", "catalog.delta_table=orders_delta")
    assert done.returncode == 0, done.stderr[-3000:]
    table = Table.open(str(tmp_path / "table"))
    _registered(metastore, "orders", table)
    with metastore.client() as client:
        delta = client.get_table("lake", "orders_delta")
    assert delta.parameters["spark.sql.sources.provider"] == "delta" and delta.sd.location == f"file:{table.uri}"
    with metastore.client() as client:
        partitions = client.get_partitions("lake", "orders", -1)
    # the values decoded, the folders as they are (Hudi's sync unescapes URL-encoded partition paths)
    live = {s.partition for s in table.file_system_view().latest_slices()}
    assert sorted(p.values[0] for p in partitions) == sorted(unquote(p) for p in live)
    assert rows(hudi_read(table.uri), "id", DATA_COLUMNS) == expected_after(BATCHES)


def _registered(metastore, name: str, table: Table) -> None:
    """The entry of ``table`` under ``name`` stands at its newest commit, one partition per live partition."""
    latest = table.timeline.latest_completed_write()
    assert latest is not None
    with metastore.client() as client:
        hive = client.get_table("lake", name)
        partitions = client.get_partitions("lake", name, -1)
    assert hive.parameters["last_commit_time_sync"] == latest.timestamp
    live = {s.partition for s in table.file_system_view().latest_slices()}
    assert {p.sd.location for p in partitions} == {f"file:{table.uri}/{p}" for p in live}


def _writer(api: str) -> dict:
    try:
        return httpx.get(f"{api}/v1/writer", timeout=10).json()
    except httpx.HTTPError:
        return {}


def _synced_to_last(view: dict) -> bool:
    catalog = view.get("catalog") or {}
    return bool(view.get("last_instant")) and catalog.get("synced") == view["last_instant"]


def _commits(log) -> int:
    return log.read_text(errors="replace").count(" committed ")


OUTAGE_SECONDS = 60


def test_a_metastore_down_for_a_minute_fails_no_micro_batch_and_the_entries_catch_up(metastore, tmp_path):
    feeder = Feeder(tmp_path, seed=81)  # files landed one at a time, by the test
    feeder.land_one()
    port = free_port()
    catalog = ["catalog.kind=hive", f"catalog.uri={metastore.uri}", "catalog.database=lake", "catalog.table=outage"]
    catalog += ["catalog.retry_seconds=1", "catalog.retry_max_seconds=5"]  # caught up within seconds of the return
    job = Job(job_args(tmp_path, api_port=port, trigger="1 second", extra=catalog), tmp_path / "job.log").start()
    api = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _synced_to_last(_writer(api)), 240, "the first commit registered", poll=1, job=job)
        metastore.stop()
        try:
            down = time.monotonic()
            while time.monotonic() - down < OUTAGE_SECONDS:
                before = completed_count(tmp_path)
                feeder.land_one()
                wait_until(lambda b=before: completed_count(tmp_path) > b, 60, "a commit while down", job=job)
                time.sleep(5)
            view = _writer(api)
            assert view["catalog"]["failing_since"] is not None and view["catalog"]["failures"] >= 1, view["catalog"]
            assert view["health"]["state"] == "behind" and "catalog" in view["health"]["summary"], view["health"]
            metrics = httpx.get(f"{api}/metrics", timeout=10).text
            assert 'laketide_catalog_sync_failures_total{table="orders"}' in metrics
            assert not view["failures"], "nothing failed that the job counts against a micro-batch or a service"
        finally:
            metastore.start()
        # no file lands now: the timed retry, not a commit, brings the entries up
        wait_until(lambda: _synced_to_last(_writer(api)), 90, "the entries caught up", poll=1, job=job)
        assert _writer(api)["catalog"]["failing_since"] is None
        _registered(metastore, "outage", Table.open(str(tmp_path / "table")))
    finally:
        job.signal(signal.SIGINT)
        code = job.wait(120)
    assert code == 0, job.log_tail()
    assert len(feeder.files) >= 4 and completed_count(tmp_path) >= len(feeder.files)
    assert rows(hudi_read(str(tmp_path / "table")), "id", DATA_COLUMNS) == feeder.expected()


def test_a_delta_entry_without_the_mirror_is_refused_at_start_naming_the_keys(tmp_path):
    land_all(tmp_path, BATCHES[:1])
    done = run(tmp_path, "catalog.uri=thrift://127.0.0.1:9", "catalog.delta_table=orders_delta")
    assert done.returncode != 0 and "catalog.delta_table" in done.stderr and "mirror.delta = true" in done.stderr
    assert not (tmp_path / "table").exists(), "a refused job writes nothing"


def test_a_metastore_that_is_down_fails_no_micro_batch(tmp_path):
    land_all(tmp_path, BATCHES)
    done = run(tmp_path, "catalog.uri=thrift://127.0.0.1:9")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "catalog sync failed" in done.stderr and "thrift://127.0.0.1:9" in done.stderr
    table = Table.open(str(tmp_path / "table"))
    assert len(table.timeline.completed_writes()) == len(BATCHES)
    assert rows(hudi_read(table.uri), "id", DATA_COLUMNS) == expected_after(BATCHES)


def test_kill_9_at_any_point_of_the_syncs_then_the_next_start_converges(metastore, tmp_path):
    """A job syncing after every commit is killed (the whole process tree, -9) a moment after its second commit,
    three times: an entry made without its partitions, partitions without the marks, marks not yet moved. The
    next run that ends brings the entries to the table, and the table equals its model."""
    feeder = Feeder(tmp_path, seed=99, interval=(0.2, 0.8))
    catalog = ["catalog.kind=hive", f"catalog.uri={metastore.uri}", "catalog.database=lake", "catalog.table=killed"]
    feeder.start()
    rng = random.Random(99)
    try:
        for cycle in range(3):
            log = tmp_path / f"job-{cycle}.log"
            job = Job(job_args(tmp_path, trigger="1 second", extra=catalog), log).start()
            try:
                wait_until(lambda log=log: _commits(log) >= 2, 240, "two commits", job=job)
                time.sleep(rng.uniform(0.0, 2.0))
            finally:
                job.kill()
    finally:
        feeder.stop()
    done = subprocess.run(job_args(tmp_path, extra=catalog), capture_output=True, text=True, timeout=600, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    _registered(metastore, "killed", Table.open(str(tmp_path / "table")))
    assert rows(hudi_read(str(tmp_path / "table")), "id", DATA_COLUMNS) == feeder.expected()
