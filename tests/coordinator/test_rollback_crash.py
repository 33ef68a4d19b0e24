"""Rollback interrupted after each of its steps, then run again: hudi-rs always reads a correct table."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from crashes import CrashingFileIO, SimulatedCrash
from readback import hudi_read, rows
from writes import upsert

from laketide.coordinator import Coordinator, LocalLease
from laketide.table import Table
from laketide.table.format import avro_models
from laketide.table.format.instant import ROLLBACK, State
from laketide.table.format.rollback import RollbackMetadata

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string())])


def build(path, lease):
    table = Table.create(str(path), "t", ["id"], ["region"], "v")
    coordinator = Coordinator(table, lease, "w")
    upsert(table, coordinator, 1, [{"id": i, "v": 1, "region": r} for i in range(6) for r in ["us"]], SCHEMA)
    before = rows(hudi_read(path), "id", ["id", "v", "region"])
    c2 = upsert(table, coordinator, 2, [{"id": 1, "v": 2, "region": "us"}, {"id": 50, "v": 2, "region": "eu"}], SCHEMA)
    after_c2 = rows(hudi_read(path), "id", ["id", "v", "region"])
    dangling = upsert(
        table,
        coordinator,
        3,
        [{"id": 2, "v": 3, "region": "us"}, {"id": 60, "v": 3, "region": "apac"}],
        SCHEMA,
        commit=False,
    )
    return table, c2, dangling, before, after_c2


@pytest.mark.parametrize("target_kind", ["dangling", "newest_completed"])
def test_rollback_survives_a_crash_after_every_step(tmp_path, target_kind):
    lease = LocalLease(str(tmp_path / "lease"), "t")
    lease.acquire()
    crash_points = 0
    for budget, after in ((b, a) for b in itertools.count(1) for a in (False, True)):
        path = tmp_path / f"t-{budget}-{after}"
        table, c2, dangling, before, after_c2 = build(path, lease)
        target = dangling if target_kind == "dangling" else c2
        # the dangling instant still sits on top of c2; for the completed case, drop it first
        if target_kind == "newest_completed":
            Coordinator(table, lease, "w").rollback(dangling)
        expected_end = after_c2 if target_kind == "dangling" else before
        acceptable_mid = [after_c2, before]
        target_files = table.file_system_view().uncommitted_files(target)

        crashing = Table(CrashingFileIO(table.io, budget, after), table.config)
        try:
            Coordinator(crashing, lease, "w").rollback(target)
            finished = True
        except SimulatedCrash:
            finished = False
            crash_points += 1
            assert rows(hudi_read(path), "id", ["id", "v", "region"]) in acceptable_mid

        again = Coordinator(Table.open(str(path)), lease, "w")
        if not finished:
            again.rollback(target)
        assert rows(hudi_read(path), "id", ["id", "v", "region"]) == expected_end
        assert rows(Table.open(str(path)).snapshot(), "id", ["id", "v", "region"]) == expected_end
        timeline = Table.open(str(path)).timeline
        assert not [i for i in timeline if i.timestamp == target]
        assert timeline.pending() == []
        rollbacks = [i for i in timeline if i.action == ROLLBACK and i.state is State.COMPLETED]
        targets = [RollbackMetadata.from_bytes(timeline.read_bytes(rb)).target for rb in rollbacks]
        assert targets.count(target) == 1
        assert not any(table.io.exists(f) for f in target_files)
        assert again.recover() == []
        if finished:
            break
    assert crash_points >= 8
    lease.release()


def test_recover_rolls_back_what_a_dead_writer_left(tmp_path):
    lease = LocalLease(str(tmp_path / "lease"), "t")
    lease.acquire()
    _table, _c2, dangling, _before, after_c2 = build(tmp_path / "t", lease)
    lease.release()
    successor = LocalLease(str(tmp_path / "lease"), "t", job_id="successor")
    assert successor.acquire().epoch == 2
    results = Coordinator(Table.open(str(tmp_path / "t")), successor, "w2").recover()
    assert [r.instant for r in results] == [dangling]
    assert rows(hudi_read(tmp_path / "t"), "id", ["id", "v", "region"]) == after_c2
    successor.release()


def test_rollback_plan_and_metadata_name_absolute_paths(tmp_path):
    """Hudi's BaseRollbackHelper resolves each file's partition against the base path, so the paths are absolute."""
    lease = LocalLease(str(tmp_path / "lease"), "t")
    lease.acquire()
    table, _c2, dangling, _before, _after_c2 = build(tmp_path / "t", lease)
    result = Coordinator(table, lease, "w").rollback(dangling)
    timeline = Table.open(table.uri).timeline
    (rb,) = timeline.filter({State.COMPLETED}, [ROLLBACK])
    plan = avro_models.read_container(timeline.read_bytes(rb.with_state(State.REQUESTED)))
    planned = [f for r in plan["RollbackRequests"] for f in r["filesToBeDeleted"]]
    meta = avro_models.read_container(timeline.read_bytes(rb))
    deleted = [f for pm in meta["partitionMetadata"].values() for f in pm["successDeleteFiles"]]
    assert planned and deleted and result.files
    for path in planned + deleted:
        assert path.startswith(table.uri + "/"), path
    for r in plan["RollbackRequests"]:
        assert all(f.rsplit("/", 1)[0] == f"{table.uri}/{r['partitionPath']}" for f in r["filesToBeDeleted"])
    # read back relative to the table, as the rest of laketide names files
    assert sorted(RollbackMetadata.from_bytes(timeline.read_bytes(rb), table.uri).deleted) == sorted(result.files)
    lease.release()
