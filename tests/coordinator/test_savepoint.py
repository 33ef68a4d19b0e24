"""Savepoints hold a commit through cleaning and archival; restore returns the table to it (checked with hudi-rs)."""

from __future__ import annotations

import itertools
import json
import subprocess

import pytest
from commands import CLI
from crashes import CrashingFileIO, SimulatedCrash
from java_avro import java_container_read
from writes import HISTORY_SCHEMA, base_files, rewritten_history, state_at, upsert

from laketide.coordinator import Coordinator
from laketide.coordinator.archiver import Archiver
from laketide.coordinator.cleaner import Cleaner
from laketide.coordinator.savepoints import SavepointRefused, Savepoints
from laketide.table import Table
from laketide.table.format import avro_models
from laketide.table.format.clean import CleanPolicy, Retention
from laketide.table.format.instant import RESTORE, ROLLBACK, SAVEPOINT, State
from laketide.table.format.savepoint import savepointed_files
from laketide.table.format.timeline import InstantNotFound


def test_a_savepointed_commit_survives_cleaning_and_archival(tmp_path):
    table, coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=4)
    saved = Savepoints(coordinator).create(instants[1], user="ops", comment="before the backfill")
    assert saved.files and all(table.io.exists(f) for f in saved.files)
    for n in range(4, 12):
        instants.append(
            upsert(
                table,
                coordinator,
                n,
                [{"id": i, "v": n, "region": ("us", "eu")[i % 2]} for i in range(8)],
                HISTORY_SCHEMA,
            )
        )
        reads[instants[-1]] = state_at(table.uri)
    Cleaner(coordinator, Retention(commits=2)).clean()
    Archiver(coordinator, 3, 5).archive()
    assert set(saved.files) <= base_files(table), "cleaning kept every file the savepoint holds"
    assert state_at(table.uri, as_of=instants[1]) == reads[instants[1]], "hudi-rs time travel to the savepoint"
    timeline = Table.open(table.uri).timeline
    assert timeline.completed_writes()[0].timestamp <= instants[1], "archival stopped before the savepoint"
    assert [s.instant for s in Savepoints(coordinator).list()] == [instants[1]]
    assert Savepoints(coordinator).create(instants[1]).saved_at_ms == saved.saved_at_ms, (
        "saving again returns the savepoint"
    )
    lease.release()


def test_restore_returns_the_table_to_the_savepoint(tmp_path):
    table, coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=6)
    Savepoints(coordinator).create(instants[2])
    Cleaner(coordinator, Retention(commits=1)).clean()
    result = Savepoints(coordinator).restore(instants[2])
    assert result.rolled_back == instants[3:][::-1]
    assert state_at(table.uri) == reads[instants[2]], "hudi-rs reads the savepoint's state"
    assert Table.open(table.uri).snapshot().num_rows == len(reads[instants[2]])
    timeline = Table.open(table.uri).timeline
    assert [i.timestamp for i in timeline.completed_writes()] == instants[:3]
    assert [i.action for i in timeline if i.action == ROLLBACK] == [], "the restore's rollbacks live in its metadata"
    (restore,) = timeline.filter({State.COMPLETED}, [RESTORE])
    record = avro_models.read_container(timeline.read_bytes(restore), "HoodieRestoreMetadata")
    assert record["instantsToRollback"] == instants[3:][::-1] and set(record["hoodieRestoreMetadata"]) == set(
        instants[3:]
    )
    assert [i["action"] for i in record["restoreInstantInfo"]] == ["commit"] * 3
    plan = avro_models.read_container(timeline.read_bytes(restore.with_state(State.REQUESTED)), "HoodieRestorePlan")
    assert plan["savepointToRestoreTimestamp"] == instants[2] and plan["version"] == 2
    after = upsert(table, coordinator, 50, [{"id": 1, "v": 50, "region": "eu"}], HISTORY_SCHEMA)
    assert after > restore.timestamp and state_at(table.uri)[1]["v"] == 50, "writes go on after a restore"
    lease.release()


def test_refusals(tmp_path):
    _table, coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=4)
    pending = coordinator.begin(99)
    with pytest.raises(SavepointRefused, match="not a completed write"):
        Savepoints(coordinator).create(pending)
    with pytest.raises(InstantNotFound):
        Savepoints(coordinator).create("20200101000000000")
    with pytest.raises(InstantNotFound):
        Savepoints(coordinator).restore(instants[1])
    with pytest.raises(InstantNotFound):
        Savepoints(coordinator).delete(instants[1])
    coordinator.rollback(pending, force=True)
    Cleaner(coordinator, Retention(commits=1)).clean()
    with pytest.raises(SavepointRefused, match=r"is before .*, the oldest commit the last clean kept"):
        Savepoints(coordinator).create(instants[0])
    # a policy without a retained commit: the files themselves are checked
    Cleaner(coordinator, Retention(CleanPolicy.KEEP_LATEST_FILE_VERSIONS, file_versions=1)).clean()
    with pytest.raises(SavepointRefused, match="files a read of it needs are gone"):
        Savepoints(coordinator).create(instants[-2])
    lease.release()


def test_delete_releases_the_files(tmp_path):
    table, coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=4)
    saved = Savepoints(coordinator).create(instants[0])
    assert savepointed_files(Table.open(table.uri).timeline) == frozenset(saved.files)
    Savepoints(coordinator).delete(instants[0])
    assert Savepoints(coordinator).list() == []
    Cleaner(coordinator, Retention(commits=1)).clean()
    assert not set(saved.files) & base_files(table)
    lease.release()


def _crash_loop(tmp_path, action, check, commits=5):
    crash_points = 0
    for budget, after in ((b, a) for b in itertools.count(1) for a in (False, True)):
        table, coordinator, lease, instants, reads = rewritten_history(
            tmp_path / f"t-{budget}-{after}", commits=commits
        )
        Savepoints(coordinator).create(instants[1])
        crashing = Coordinator(Table(CrashingFileIO(table.io, budget, after), table.config), lease, "w")
        try:
            action(Savepoints(crashing), instants)
            finished = True
        except SimulatedCrash:
            finished = False
            crash_points += 1
        assert state_at(table.uri) in list(reads.values()), "readers see some commit's state at every step"
        again = Savepoints(Coordinator(Table.open(table.uri), lease, "w"))
        again.resume_restore()
        action(again, instants)
        check(table, instants, reads)
        lease.release()
        if finished:
            return crash_points
    return crash_points


def test_a_restore_interrupted_after_any_step_is_finished(tmp_path):
    def check(table, instants, reads):
        timeline = Table.open(table.uri).timeline
        assert state_at(table.uri) == reads[instants[1]]
        assert timeline.pending() == [] and [i.timestamp for i in timeline.completed_writes()] == instants[:2]

    assert _crash_loop(tmp_path, lambda sp, instants: sp.restore(instants[1]), check) >= 6


def test_savepoint_create_and_delete_interrupted_after_any_step(tmp_path):
    def check(table, instants, reads):
        timeline = Table.open(table.uri).timeline
        assert [i.timestamp for i in timeline.filter(actions=[SAVEPOINT])] == [instants[1]]
        assert state_at(table.uri, as_of=instants[1]) == reads[instants[1]]

    def recreate(sp, instants):
        sp.delete(instants[1]) if sp.list() else None
        sp.create(instants[1])

    assert _crash_loop(tmp_path, recreate, check) >= 2


def test_savepoint_metadata_is_read_by_javas_avro(spark, tmp_path):
    table, coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=3)
    Savepoints(coordinator).create(instants[1], user="ops", comment="nightly")
    decoded = json.loads(java_container_read(spark, table.io.read_bytes(f".hoodie/{instants[1]}.savepoint")))
    assert decoded["savepointedBy"] == "ops" and decoded["comments"] == "nightly"
    assert sorted(decoded["partitionMetadata"]) == ["eu", "us"]
    Savepoints(coordinator).restore(instants[1])
    (restore,) = Table.open(table.uri).timeline.filter({State.COMPLETED}, [RESTORE])
    decoded = json.loads(java_container_read(spark, Table.open(table.uri).timeline.read_bytes(restore)))
    assert decoded["instantsToRollback"] == [instants[2]]
    assert decoded["hoodieRestoreMetadata"][instants[2]][0]["commitsRollback"] == [instants[2]]
    lease.release()


def test_cli_savepoint_and_restore(tmp_path):
    table, _coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=4)
    lease.release()

    def cli(*args):
        done = subprocess.run([CLI, *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    cli("savepoint", "create", table.uri, instants[1], "--comment", "keep")
    listed = json.loads(cli("savepoint", "list", table.uri, "--json"))
    assert [s["instant"] for s in listed] == [instants[1]] and listed[0]["comment"] == "keep"
    assert "restored" in cli("restore", table.uri, instants[1])
    assert state_at(table.uri) == reads[instants[1]]
    cli("savepoint", "delete", table.uri, instants[1])
    assert json.loads(cli("savepoint", "list", table.uri, "--json")) == []
    missing = subprocess.run([CLI, "restore", table.uri, instants[1]], capture_output=True, text=True)
    assert missing.returncode != 0 and "no savepoint" in missing.stderr
