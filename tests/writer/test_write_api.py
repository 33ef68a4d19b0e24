"""``laketide.write``: Arrow, Polars and pandas into new and existing tables of both types, under the lease,
read back by hudi-rs against a model; then the streaming job, run as users run it, finds those keys."""

from __future__ import annotations

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from opslib import OpsTable
from readback import hudi_read, rows
from streaming import DATA_COLUMNS, row
from writes import NEW_ORDERS, orders

import laketide
from laketide.coordinator import LeaseHeld, LocalLease
from laketide.table import Table

SMALL = {"write": {"index_shards": 2, "parallelism": 2}}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_write_then_stream_updates_the_same_keys(tmp_path, table_type):
    t = OpsTable(tmp_path, {"table.type": table_type, "compaction.delta_commits": "2"})
    path = str(t.path)
    first = [row(i, 1) for i in range(1, 41)]
    report = laketide.write(path, orders(first), table_type=table_type, settings=SMALL, **NEW_ORDERS)
    t.model.apply(first)
    assert (report.inserts, report.updates) == (40, 0)
    assert Table.open(path).config.table_type == table_type
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == t.model.expected()

    # an existing table, from Polars then pandas: updates, inserts and a delete
    second = [row(i, 2) for i in range(30, 51)] + [row(3, 2, deleted=True)]
    report = laketide.write(path, pl.from_arrow(orders(second)), settings=SMALL)
    t.model.apply(second)
    assert (report.inserts, report.updates, report.deletes) == (10, 11, 1)
    third = [row(i, 3) for i in (1, 2, 60)]
    report = laketide.write(path, pd.DataFrame(third), settings=SMALL)
    t.model.apply(third)
    assert (report.inserts, report.updates) == (1, 2)
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == t.model.expected()

    # the streaming job, on the same table: the keys the API wrote are updates, never duplicates
    streamed = [row(i, 4) for i in range(1, 61, 3)]
    known = sum(line["id"] in t.model.rows for line in streamed)
    t.land([streamed])
    done = t.run()
    assert f"inserts={len(streamed) - known} updates={known} " in done.stderr, done.stderr[-3000:]
    read = hudi_read(path)
    assert read.num_rows == len(t.model.expected()) == len(set(read["id"].to_pylist()))
    assert rows(read, "id", DATA_COLUMNS) == t.model.expected()

    # and laketide.write after the job: the job's keys are found too
    report = laketide.write(path, orders([row(4, 5), row(61, 5)]), settings=SMALL)
    assert (report.inserts, report.updates) == (1, 1)


def test_write_honours_the_lease(tmp_path):
    path = str(tmp_path / "t")
    laketide.write(path, orders([row(1, 1)]), **NEW_ORDERS)
    held = LocalLease.for_table(path, job_id="streaming-job")
    held.acquire()
    try:
        with pytest.raises(LeaseHeld, match="streaming-job") as refused:
            laketide.write(path, orders([row(1, 2)]), settings={"coordinator": {"lease_wait": 0}})
        assert isinstance(refused.value, laketide.LaketideError) and refused.value.kind == laketide.ErrorKind.CONFLICT
    finally:
        held.release()
    assert [r["ts"] for r in hudi_read(path).to_pylist()] == [1], "nothing was written while the lease was held"
    assert laketide.write(path, orders([row(1, 2)])).updates == 1


def test_bad_rows_and_bad_calls(tmp_path):
    path = str(tmp_path / "t")
    with pytest.raises(laketide.Invalid, match="record_key"):
        laketide.write(path, orders([row(1, 1)]))
    with pytest.raises(laketide.Invalid, match="not list"):
        laketide.write(path, [row(1, 1)], **NEW_ORDERS)
    lines = [row(1, 1), {"id": None, "name": "no key", "amount": 1.0, "ts": 1, "region": "us"}]
    report = laketide.write(path, orders(lines), **NEW_ORDERS)
    assert (report.inserts, report.quarantined) == (1, 1)
    quarantined = pa.parquet.read_table(tmp_path / "t_quarantine").to_pylist()
    assert len(quarantined) == 1 and "record key" in quarantined[0]["reason"]
    # an operation in the settings that is not the call's is refused, not overridden
    with pytest.raises(laketide.Invalid, match=r"write\.operation = 'delete_partition'"):
        laketide.write(path, orders([row(1, 2)]), settings={"write": {"operation": "delete_partition"}})


def test_a_store_error_no_step_told_apart_is_still_a_laketide_error(monkeypatch, tmp_path):
    """Whatever object_store raises that no step handles comes out of `laketide.write` as a LaketideError naming the
    table."""
    import pytest
    from obstore.exceptions import GenericError

    from laketide.table.errors import LaketideError
    from laketide.writer.job import write_api

    def failing(*args, **kwargs):
        raise GenericError("Generic S3 error: something the store never said before")

    monkeypatch.setattr(write_api, "_write", failing)
    with pytest.raises(LaketideError, match=r"the object store of s3://lake/t failed: GenericError: Generic S3 error"):
        write_api.write("s3://lake/t", None)
