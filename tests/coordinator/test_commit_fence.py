"""The commit protocol against a stale writer that passed its last lease check and then paused.

The stale writer's lease is a stand-in whose ``check()`` always passes: that
is the situation of a writer frozen right after its check. What must stop it
is the fence on storage, not the lease.
"""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest
from readback import hudi_read, rows
from writes import stage, upsert

from laketide.coordinator import Coordinator, LeaseLost
from laketide.coordinator.fence import CommitFence
from laketide.coordinator.lease import Lease, LeaseHolder
from laketide.table import Table
from laketide.table.format.commit import SCHEMA_KEY, CommitMetadata
from laketide.table.format.files import BaseFile
from laketide.table.format.instant import State
from laketide.table.format.markers import CREATE, TEMP_DIR, WriteMarkers, marked_instants
from laketide.table.format.schema import avro_schema_json, data_schema

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string())])


class PassedCheckLease(Lease):
    """A lease whose holder already passed its check: ``check()`` has nothing left to say."""

    def __init__(self, epoch: int):
        self.holder = LeaseHolder(epoch=epoch, job_id=f"epoch-{epoch}")

    def acquire(self, timeout: float = 0.0) -> LeaseHolder:
        return self.holder

    def release(self) -> None:
        pass

    def check(self) -> None:
        pass

    def announce(self, api_address: str) -> None:
        pass

    def current_holder(self) -> LeaseHolder | None:
        return self.holder

    def advance_epoch(self, floor: int) -> None:
        self.holder = self.holder.model_copy(update={"epoch": max(floor, self.holder.epoch)})


def records(ids, v):
    return [{"id": i, "v": v, "region": "us" if i % 2 else "eu"} for i in ids]


def state(path) -> list[dict]:
    return rows(hudi_read(path), "id", ["id", "v", "region"])


def begin_and_write(table, coordinator, batch_id, recs):
    """A micro-batch written, its files marked, not committed."""
    staged = stage(table, coordinator, batch_id, recs, SCHEMA)
    return staged.instant, staged.stats


def commit(table, coordinator, instant, stats):
    return coordinator.commit(instant, stats, {SCHEMA_KEY: avro_schema_json(data_schema(SCHEMA), table.name)})


@pytest.fixture
def table(tmp_path):
    t = Table.create(str(tmp_path / "t"), "t", ["id"], ["region"], "v")
    upsert(t, Coordinator(t, PassedCheckLease(1), "w1"), 0, records(range(4), 0), SCHEMA)
    return t


def data_files_of(table, instant):
    return [
        e.path for e in table.io.walk() if not e.is_dir and e.name.endswith(".parquet") and f"_{instant}." in e.name
    ]


def test_a_paused_writer_cannot_complete_an_instant_the_new_holder_rolled_back(table):
    stale = Coordinator(table, PassedCheckLease(1), "w1")
    instant, stats = begin_and_write(table, stale, 1, records(range(2, 8), 1))
    before = state(table.uri)

    successor = Coordinator(Table.open(table.uri), PassedCheckLease(2), "w1")
    assert [r.instant for r in successor.recover()] == [instant]

    with pytest.raises(LeaseLost, match=r"claimed by a newer lease holder|epoch 2"):
        commit(table, stale, instant, stats)
    timeline = Table.open(table.uri).timeline
    assert not [i for i in timeline if i.timestamp == instant]
    assert state(table.uri) == before
    assert data_files_of(table, instant) == []


def test_the_outcome_claim_alone_stops_the_stale_writer(table):
    """Even where the epoch fence is not reached (both race on one instant), exactly one create wins."""
    stale = Coordinator(table, PassedCheckLease(1), "w1")
    instant, _stats = begin_and_write(table, stale, 1, records(range(2, 8), 1))
    fence = CommitFence(table.io)
    assert fence.claim_rollback(instant, 2) is None
    body = CommitMetadata().to_json_bytes()
    with pytest.raises(LeaseLost, match="claimed by a newer lease holder"):
        fence.decide_commit(instant, 1, body)


def test_a_decided_commit_is_completed_by_the_new_holder(table):
    """The writer won the race and stopped before writing the commit: recovery completes it, nothing is lost."""
    stale = Coordinator(table, PassedCheckLease(1), "w1")
    instant, stats = begin_and_write(table, stale, 1, records(range(2, 8), 1))
    metadata = CommitMetadata(partition_to_write_stats={s.partition_path: [s] for s in stats}, operation_type="UPSERT")
    CommitFence(table.io).decide_commit(instant, 1, metadata.to_json_bytes())

    successor = Coordinator(Table.open(table.uri), PassedCheckLease(2), "w1")
    assert successor.recover() == []
    timeline = Table.open(table.uri).timeline
    assert timeline.is_completed_write(instant)
    assert {r["id"]: r["v"] for r in state(table.uri)} == {0: 0, 1: 0, **{i: 1 for i in range(2, 8)}}
    assert CommitFence(table.io).decided() == []
    assert instant not in marked_instants(table.io)


def test_an_instant_begun_after_the_takeover_cannot_complete_and_is_rolled_back(table):
    successor = Coordinator(Table.open(table.uri), PassedCheckLease(2), "w1")
    successor.recover()
    stale = Coordinator(table, PassedCheckLease(1), "w1")
    stale._fenced_epoch = 1  # fenced before the successor took over
    instant, stats = begin_and_write(table, stale, 1, records(range(2, 8), 1))
    with pytest.raises(LeaseLost, match="epoch 2 has begun"):
        commit(table, stale, instant, stats)

    successor.sweep()
    assert not [i for i in Table.open(table.uri).timeline if i.timestamp == instant]
    assert data_files_of(table, instant) == []


def test_files_a_stale_writer_writes_after_the_rollback_are_swept_at_the_next_commit(table):
    stale = Coordinator(table, PassedCheckLease(1), "w1")
    instant, _stats = begin_and_write(table, stale, 1, records(range(2, 8), 1))
    successor = Coordinator(Table.open(table.uri), PassedCheckLease(2), "w1")
    successor.recover()
    assert data_files_of(table, instant) == []

    # the stale writer's tasks go on: one marks and writes a file, another marks and has not written yet
    late = BaseFile("region=us", "late-group-0", "9-9-9", instant)
    markers = WriteMarkers(table.io, instant)
    markers.create(late.path, CREATE)
    table.io.write_bytes(late.path, b"late parquet bytes")
    pending = BaseFile("region=eu", "slow-group-0", "9-9-9", instant)
    slow_marker = markers.create(pending.path, CREATE)

    upsert(Table.open(table.uri), successor, 2, records(range(10, 12), 2), SCHEMA)
    assert successor.sweep() == []  # the sweep after that commit already took the late file
    assert data_files_of(table, instant) == []
    assert table.io.exists(slow_marker), "a marker whose file may still come is kept for a grace period"

    table.io.write_bytes(pending.path, b"even later")
    assert successor.sweep() == [pending.path]
    table.io.write_bytes(late.path, b"the same file, written again by a retried task")
    assert successor.sweep() == [late.path], "markers outlive their files for the grace period"
    old = time.time() - 2 * 3600
    WriteMarkers(table.io, instant).create(BaseFile("region=eu", "slower-0", "9-9-9", instant).path, CREATE)
    for marker in WriteMarkers(table.io, instant).markers():
        os.utime(table.io.full_path(marker.path), (old, old))
    successor.sweep()
    assert instant not in marked_instants(table.io)
    assert {r["id"] for r in state(table.uri)} == {0, 1, 2, 3, 10, 11}


def test_commit_keeps_only_the_winning_attempt_of_each_file(table):
    coordinator = Coordinator(table, PassedCheckLease(1), "w1")
    instant, stats = begin_and_write(table, coordinator, 1, records(range(2, 8), 1))
    loser = BaseFile(stats[0].partition_path, stats[0].file_id, "0-1-77", instant)
    table.io.write_bytes(loser.path, table.io.read_bytes(stats[0].path))
    WriteMarkers(table.io, instant).create(loser.path, CREATE)

    commit(table, coordinator, instant, stats)
    assert not table.io.exists(loser.path)
    assert sorted(data_files_of(table, instant)) == sorted(s.path for s in stats)
    assert not table.io.exists(TEMP_DIR + "/" + instant)
    assert {r["id"]: r["v"] for r in state(table.uri)} == {0: 0, 1: 0, **{i: 1 for i in range(2, 8)}}


def test_timeline_of_a_refused_commit_stays_pending_for_the_holder(table):
    """A refused stale commit writes nothing to the timeline; the instant stays pending until the holder sweeps it."""
    successor = Coordinator(Table.open(table.uri), PassedCheckLease(2), "w1")
    successor.recover()
    stale = Coordinator(table, PassedCheckLease(1), "w1")
    stale._fenced_epoch = 1
    instant, stats = begin_and_write(table, stale, 1, records([5], 1))
    with pytest.raises(LeaseLost):
        commit(table, stale, instant, stats)
    pending = Table.open(table.uri).timeline.pending()
    assert [(i.timestamp, i.state) for i in pending] == [(instant, State.INFLIGHT)]


def test_a_reset_lease_counter_moves_past_the_epochs_the_table_has_seen(table, tmp_path):
    """A new ZooKeeper ensemble or a lost lease file starts epochs at 1 again; the table's fence says otherwise."""
    from laketide.coordinator import LocalLease

    Coordinator(Table.open(table.uri), PassedCheckLease(7), "w1").recover()
    lease = LocalLease(str(tmp_path / "fresh-lease"), table.uri)
    assert lease.acquire().epoch == 1
    coordinator = Coordinator(Table.open(table.uri), lease, "w1")
    coordinator.recover()
    assert lease.epoch == 8 and CommitFence(table.io).epochs() == [8]
    assert upsert(Table.open(table.uri), coordinator, 5, records([40], 5), SCHEMA) is not None
    lease.release()
    again = LocalLease(str(tmp_path / "fresh-lease"), table.uri)
    assert again.acquire().epoch == 9, "the advanced epoch is kept for the next holder"
    again.release()


def test_a_query_that_fails_once_the_lease_ran_out_ends_as_lease_lost():
    """A job paused past its lease wakes to a query failure of Spark's own (the new holder moved the
    checkpoint on) before its heartbeat has noticed: the job still ends as LeaseLost (exit code 5)."""
    import threading
    from types import SimpleNamespace

    from laketide.spark.job import _await

    class RanOut(PassedCheckLease):
        def check(self) -> None:
            raise LeaseLost("the lease ran out")

    class FailedQuery:
        def awaitTermination(self, timeout):
            raise RuntimeError("Concurrent update to the log. Multiple streaming jobs detected for 1")

    failures = SimpleNamespace(fatal=None, raise_if_fatal=lambda: None)
    job = SimpleNamespace(
        table=SimpleNamespace(uri="/lake/t"),
        services=SimpleNamespace(failures=failures),
        coordinator=SimpleNamespace(lease=RanOut(3)),
        stop_requested=threading.Event(),
    )
    batches = SimpleNamespace(failure=None)
    with pytest.raises(LeaseLost, match="lost"):
        _await(FailedQuery(), job, threading.Event(), batches)
    job.coordinator.lease = PassedCheckLease(3)
    with pytest.raises(RuntimeError, match="Concurrent update"):
        _await(FailedQuery(), job, threading.Event(), batches)


def test_a_base_file_a_stale_writer_adds_to_a_completed_compaction_is_swept(tmp_path):
    """A second writer completed a compaction whose first writer was paused; the first wakes and finishes one
    more base file of that instant in a compacted file group (its marker gone with the completion). The next
    sweeps delete it (its partitions are listed at most once a minute), and hudi-rs reads the table again."""
    from laketide.config import CompactionSection
    from laketide.coordinator import sweep as sweeping
    from laketide.table.format.properties import TableConfig
    from laketide.writer.job.compactor import Compactor

    t = Table.create_from_config(
        str(tmp_path / "t"),
        TableConfig(
            name="t",
            table_type="MERGE_ON_READ",
            record_key_fields=["id"],
            partition_fields=["region"],
            ordering_field="v",
        ),
    )
    successor = Coordinator(t, PassedCheckLease(2), "w1")
    for batch in range(3):
        upsert(Table.open(t.uri), successor, batch, records(range(6), batch), SCHEMA)
    compactor = Compactor(successor, CompactionSection(delta_commits=1, mode="inline"))
    instant = compactor.schedule()
    compactor.run()
    table = Table.open(t.uri)
    compacted = table.timeline.commit_metadata(table.timeline.find(instant)[0])
    named = compacted.write_stats()[0]
    late = BaseFile(named.partition_path, named.file_id, "7-7-7", instant)
    table.io.write_bytes(late.path, table.io.read_bytes(named.path))  # a whole, readable base file of the same instant
    with pytest.raises(Exception, match="already present"):
        hudi_read(table.uri)  # two base files of one instant in one file group: readers refuse the table

    swept = Coordinator(Table.open(t.uri), PassedCheckLease(2), "w1").sweeper
    now = time.time()
    assert swept.sweep(now) == [late.path]
    assert {r["id"]: r["v"] for r in state(table.uri)} == {i: 2 for i in range(6)}
    table.io.write_bytes(late.path, table.io.read_bytes(named.path))
    assert swept.sweep(now + 10) == [], "listed at most once a minute"
    assert swept.sweep(now + sweeping.LATE_CHECK_SECONDS + 1) == [late.path]
    table.io.write_bytes(late.path, table.io.read_bytes(named.path))
    assert swept.sweep(now + sweeping.LATE_FILE_SECONDS + 1) == [], (
        "an hour after the completion the partitions are not listed"
    )


def test_a_file_a_late_task_writes_after_its_instant_completed_is_swept(tmp_path):
    """A task of a completed copy-on-write commit that was still running (a zombie attempt) marks and writes one more
    base file of that instant in a file group the commit wrote: the next sweep deletes it, and keeps the marker
    of a file not written yet until its grace runs out."""
    from laketide.coordinator import sweep as sweeping
    from laketide.table.format.properties import TableConfig

    t = Table.create_from_config(
        str(tmp_path / "t"),
        TableConfig(name="t", record_key_fields=["id"], partition_fields=["region"], ordering_field="v"),
    )
    writer = Coordinator(t, PassedCheckLease(1), "w1")
    instant = upsert(Table.open(t.uri), writer, 0, records(range(6), 0), SCHEMA)
    table = Table.open(t.uri)
    named = table.timeline.commit_metadata(table.timeline.find(instant)[0]).write_stats()[0]
    late, later = (BaseFile(named.partition_path, named.file_id, token, instant) for token in ("7-7-7", "8-8-8"))
    markers = WriteMarkers(table.io, instant)
    for f in (late, later):
        markers.create(f.path, CREATE)
    table.io.write_bytes(late.path, table.io.read_bytes(named.path))
    with pytest.raises(Exception, match="already present"):
        hudi_read(table.uri)
    sweeper = Coordinator(Table.open(t.uri), PassedCheckLease(1), "w1").sweeper
    now = time.time()
    assert sweeper.sweep(now) == [late.path]
    assert {r["id"]: r["v"] for r in state(table.uri)} == {i: 0 for i in range(6)}
    table.io.write_bytes(later.path, table.io.read_bytes(named.path))  # the other attempt wakes
    assert sweeper.sweep(now + 10) == [later.path]
    assert sweeper.sweep(now + sweeping.MARKER_GRACE_SECONDS + 1) == [] and not markers.markers()
