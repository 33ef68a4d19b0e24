"""Two coordinators on one table against a real ZooKeeper server."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from chaoslib import free_port
from kazoo.client import KazooClient
from readback import hudi_read, rows
from writes import stage, upsert

from laketide.coordinator import Coordinator, LeaseError, LeaseHeld, LeaseLost
from laketide.coordinator.zookeeper_lease import ZooKeeperLease
from laketide.table import Table

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string())])


def lease_for(zookeeper, table, job, lost=None, **kw):
    return ZooKeeperLease.connect_to(
        zookeeper,
        "/laketide-test",
        table.uri,
        job_id=job,
        api_address=f"http://127.0.0.1:1/{job}",
        session_timeout=2.0,
        on_lost=lost,
        **kw,
    )


def expire_session(lease: ZooKeeperLease, hosts: str) -> None:
    """ZooKeeper's own way to expire a session: open it from a second client, then close it."""
    session_id, password = lease._client.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def wait_for(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_second_writer_waits_then_takes_over_with_higher_epoch(zookeeper, tmp_path):
    table = Table.create(str(tmp_path / "t"), "t", ["id"], ["region"], "v")
    lost = []
    first = lease_for(zookeeper, table, "job-a", lost=lambda: lost.append(True))
    assert first.acquire().epoch >= 1
    a = Coordinator(table, first, "writer-a")
    upsert(table, a, 1, [{"id": i, "v": 1, "region": "us"} for i in range(5)], SCHEMA)
    committed = rows(hudi_read(table.uri), "id", ["id", "v", "region"])

    second = lease_for(zookeeper, table, "job-b")
    with pytest.raises(LeaseHeld) as held:
        second.acquire(timeout=0.5)
    assert "job-a" in str(held.value) and "http://127.0.0.1:1/job-a" in str(held.value)
    assert second.current_holder().job_id == "job-a"

    # the first writer gets an instant in flight, with files written
    staged = stage(table, a, 2, [{"id": 9, "v": 2, "region": "eu"}], SCHEMA)
    instant, stats = staged.instant, staged.stats
    assert table.file_system_view().uncommitted_files(instant)

    expire_session(first, zookeeper)
    wait_for(lambda: lost)
    holder = second.acquire(timeout=20)
    assert holder.epoch > first.holder.epoch

    b = Coordinator(Table.open(table.uri), second, "writer-b")
    recovered = b.recover()
    assert [r.instant for r in recovered] == [instant]
    assert not table.file_system_view().uncommitted_files(instant)

    # the old holder cannot commit: it raises, and nothing of it is visible
    with pytest.raises(LeaseLost):
        a.commit(instant, stats)
    assert rows(hudi_read(table.uri), "id", ["id", "v", "region"]) == committed

    b_instant = upsert(table, b, 1, [{"id": 7, "v": 3, "region": "us"}], SCHEMA)
    meta = table.timeline.commit_metadata(table.timeline.completed_writes()[-1])
    assert meta.extra_metadata["laketide.lease.epoch"] == str(holder.epoch)
    assert b_instant == table.timeline.latest_completed_write().timestamp
    assert sorted(r["id"] for r in hudi_read(table.uri).to_pylist()) == [0, 1, 2, 3, 4, 7]
    second.release()
    first.release()


def test_released_lease_is_free_at_once(zookeeper, tmp_path):
    table = Table.create(str(tmp_path / "t"), "t", ["id"], [], None)
    first = lease_for(zookeeper, table, "one")
    epoch = first.acquire().epoch
    first.release()
    second = lease_for(zookeeper, table, "two")
    assert second.acquire(timeout=0).epoch == epoch + 1
    second.check()
    second.release()
    with pytest.raises(LeaseLost):
        second.check()


def test_unreachable_zookeeper_fails_clearly(tmp_path):
    table = Table.create(str(tmp_path / "t"), "t", ["id"], [], None)
    lease = ZooKeeperLease.connect_to(f"127.0.0.1:{free_port()}", "/laketide", table.uri, connect_timeout=1.0)
    with pytest.raises(LeaseError, match=r"cannot reach ZooKeeper .* never falls back"):
        lease.acquire()


def test_a_new_ensemble_continues_past_the_epochs_the_table_has_seen(zookeeper, tmp_path):
    """ZooKeeper's epoch counter starts again on a new ensemble (here: a new root); the table's fence keeps the
    order."""
    table = Table.create(str(tmp_path / "t"), "t", ["id"], ["region"], "v")
    old = lease_for(zookeeper, table, "old-ensemble")
    old.acquire()
    old.advance_epoch(50)
    Coordinator(table, old, "w").recover()
    old.release()

    fresh = ZooKeeperLease.connect_to(
        zookeeper, f"/laketide-new-{tmp_path.name}", table.uri, job_id="new-ensemble", session_timeout=2.0
    )
    assert fresh.acquire().epoch == 1
    coordinator = Coordinator(table, fresh, "w")
    coordinator.recover()
    assert fresh.epoch == 51 and fresh.current_holder().epoch == 51
    instant = upsert(table, coordinator, 1, [{"id": 1, "v": 1, "region": "us"}], SCHEMA)
    assert (
        table.timeline.commit_metadata(table.timeline.completed_writes()[-1]).extra_metadata["laketide.lease.epoch"]
        == "51"
    )
    assert instant is not None
    fresh.release()
    again = ZooKeeperLease.connect_to(zookeeper, f"/laketide-new-{tmp_path.name}", table.uri, session_timeout=2.0)
    assert again.acquire().epoch == 52
    again.release()
