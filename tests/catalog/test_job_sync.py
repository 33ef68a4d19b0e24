"""``laketide run`` with ``[catalog]``: the table's entries follow its commits, and a metastore that is not there
fails no micro-batch (the job commits every batch and ends well, saying what failed)."""

from __future__ import annotations

import os
import subprocess
from urllib.parse import unquote

from chaoslib import job_args
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
    done = run(tmp_path, f"catalog.uri={metastore.uri}")
    assert done.returncode == 0, done.stderr[-3000:]
    table = Table.open(str(tmp_path / "table"))
    latest = table.timeline.latest_completed_write()
    assert latest is not None
    with metastore.client() as client:
        hive = client.get_table("lake", "orders")
        partitions = client.get_partitions("lake", "orders", -1)
    assert hive.parameters["last_commit_time_sync"] == latest.timestamp
    # the values decoded, the folders as they are (Hudi's sync unescapes URL-encoded partition paths)
    live = {s.partition for s in table.file_system_view().latest_slices()}
    assert sorted(p.values[0] for p in partitions) == sorted(unquote(p) for p in live)
    assert {p.sd.location for p in partitions} == {f"file:{table.uri}/{p}" for p in live}
    assert rows(hudi_read(table.uri), "id", DATA_COLUMNS) == expected_after(BATCHES)


def test_a_metastore_that_is_down_fails_no_micro_batch(tmp_path):
    land_all(tmp_path, BATCHES)
    done = run(tmp_path, "catalog.uri=thrift://127.0.0.1:9")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "catalog sync failed" in done.stderr and "thrift://127.0.0.1:9" in done.stderr
    table = Table.open(str(tmp_path / "table"))
    assert len(table.timeline.completed_writes()) == len(BATCHES)
    assert rows(hudi_read(table.uri), "id", DATA_COLUMNS) == expected_after(BATCHES)
