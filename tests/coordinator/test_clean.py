"""Cleaning: old file versions go, every read inside the retained window still works (checked with hudi-rs)."""

from __future__ import annotations

import itertools
import json
import subprocess
from datetime import UTC, datetime, timedelta

import fastavro
import pytest
from commands import CLI
from crashes import CrashingFileIO, SimulatedCrash
from readback import hudi_read
from writes import base_files, rewritten_history, state_at

from laketide.coordinator import Coordinator
from laketide.coordinator.cleaner import Cleaner
from laketide.index.state import StateIndex
from laketide.table import Table
from laketide.table.format.clean import CleanerPlan, CleanPolicy, Retention, plan_clean
from laketide.table.format.files import BaseFile
from laketide.table.format.instant import CLEAN, State, instant_to_datetime


def test_keep_latest_commits_keeps_every_read_in_the_window(tmp_path):
    table, coordinator, lease, instants, reads = rewritten_history(tmp_path / "t")
    before = base_files(table)
    result = Cleaner(coordinator, Retention(CleanPolicy.KEEP_LATEST_COMMITS, commits=3)).clean()
    assert result.clean_instant is not None and result.earliest_to_retain == instants[-3]
    assert result.files and set(result.files) < before
    table = Table.open(table.uri)
    for instant in instants[-3:]:
        assert state_at(table.uri, as_of=instant) == reads[instant], f"time travel to retained {instant}"
    assert state_at(table.uri) == reads[instants[-1]]
    # what is left: per file group, the versions from the earliest retained commit on, plus the one just before it
    left = {BaseFile.parse(*p.rsplit("/", 1)) for p in base_files(table)}
    assert all(b.instant_time >= instants[-4] for b in left)
    assert {b.instant_time for b in left} >= set(instants[-3:])

    clean = [i for i in table.timeline if i.action == CLEAN]
    assert [i.state for i in clean] == [State.COMPLETED]
    with open(table.io.full_path(f".hoodie/{clean[0].timestamp}.clean"), "rb") as f:
        record = next(fastavro.reader(f))
    assert record["earliestCommitToRetain"] == instants[-3] and record["totalFilesDeleted"] == len(result.files)
    assert record["version"] == 2 and record["lastCompletedCommitTimestamp"] == instants[-1]
    assert sum(len(pm["successDeleteFiles"]) for pm in record["partitionMetadata"].values()) == len(result.files)
    with open(table.io.full_path(f".hoodie/{clean[0].timestamp}.clean.requested"), "rb") as f:
        plan = next(fastavro.reader(f))
    assert plan["policy"] == "KEEP_LATEST_COMMITS"
    assert all(
        info["filePath"].startswith(table.io.full_path(""))
        for infos in plan["filePathsToBeDeletedPerPartition"].values()
        for info in infos
    )

    again = Cleaner(coordinator, Retention(CleanPolicy.KEEP_LATEST_COMMITS, commits=3)).clean()
    assert again.clean_instant is None and again.files == [], "nothing left to clean makes no instant"
    lease.release()


def test_keep_latest_file_versions(tmp_path):
    table, coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=4)
    Cleaner(coordinator, Retention(CleanPolicy.KEEP_LATEST_FILE_VERSIONS, file_versions=1)).clean()
    table = Table.open(table.uri)
    groups = [BaseFile.parse(*p.rsplit("/", 1)).file_id for p in base_files(table)]
    assert len(groups) == len(set(groups)), "one version per file group"
    assert state_at(table.uri) == reads[instants[-1]]
    lease.release()


def test_keep_latest_by_hours(tmp_path):
    table, _coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=3)
    view = table.file_system_view()
    assert plan_clean(view, Retention(CleanPolicy.KEEP_LATEST_BY_HOURS, hours=1)).is_empty(), (
        "all commits are within the hour"
    )
    later = datetime.now(UTC) + timedelta(hours=5)
    assert plan_clean(view, Retention(CleanPolicy.KEEP_LATEST_BY_HOURS, hours=1), now=later).is_empty(), (
        "no commit in the window: as Hudi, clean nothing"
    )
    just_after_last = instant_to_datetime(instants[-1]) + timedelta(hours=1)
    plan = plan_clean(view, Retention(CleanPolicy.KEEP_LATEST_BY_HOURS, hours=1), now=just_after_last)
    assert plan.earliest_to_retain == instants[-1]
    assert plan.files and all(BaseFile.parse(*p.rsplit("/", 1)).instant_time == instants[0] for p in plan.files)
    lease.release()


def test_files_of_failed_writes_are_swept(tmp_path):
    table, coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=3)
    orphan = BaseFile("region=us", "orphan-0", "0-0-0", str(int(instants[0]) + 1))
    table.io.write_bytes(orphan.path, b"a failed write's file")
    result = Cleaner(coordinator, Retention(commits=10)).clean()
    assert result.files == [orphan.path]
    assert not table.io.exists(orphan.path)
    assert state_at(table.uri) == reads[instants[-1]]
    lease.release()


def test_a_clean_interrupted_after_any_step_is_finished_by_the_next(tmp_path):
    crash_points = 0
    for budget, after in ((b, a) for b in itertools.count(1) for a in (False, True)):
        table, _coordinator, lease, instants, reads = rewritten_history(tmp_path / f"t-{budget}-{after}", commits=4)
        crashing = Table(CrashingFileIO(table.io, budget, after), table.config)
        try:
            Cleaner(Coordinator(crashing, lease, "w"), Retention(commits=2)).clean()
            finished = True
        except SimulatedCrash:
            finished = False
            crash_points += 1
        for instant in instants[-2:]:
            assert state_at(table.uri, as_of=instant) == reads[instant]
        Cleaner(Coordinator(Table.open(table.uri), lease, "w"), Retention(commits=2)).clean()
        timeline = Table.open(table.uri).timeline
        assert timeline.pending() == []
        assert plan_clean(Table.open(table.uri).file_system_view(), Retention(commits=2)).is_empty()
        for instant in instants[-2:]:
            assert state_at(table.uri, as_of=instant) == reads[instant]
        lease.release()
        if finished:
            break
    assert crash_points >= 4


def test_index_runs_a_compaction_replaced_are_cleaned(tmp_path):
    table, coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=2)
    index = StateIndex.open(table.io, 2)
    shard_dir = StateIndex.shard_dir(0)
    table.io.write_bytes(f"{shard_dir}/delta_{instants[0]}_0.arrow", b"folded already")
    table.io.write_bytes(f"{shard_dir}/base_{instants[1]}.arrow", b"newest base")
    obsolete = index.obsolete_runs()
    assert f"{shard_dir}/delta_{instants[0]}_0.arrow" in obsolete
    assert all(run.startswith(f"{shard_dir}/delta_") for run in obsolete), "only the runs the newest base folded in"
    Cleaner(coordinator, Retention(), index.obsolete_runs).clean()
    assert index.obsolete_runs() == []
    assert table.io.exists(f"{shard_dir}/base_{instants[1]}.arrow")
    lease.release()


def test_plan_round_trips_through_hudis_avro(tmp_path):
    plan = CleanerPlan(
        CleanPolicy.KEEP_LATEST_COMMITS,
        "20260101000000000",
        "20260102000000000",
        ("a=1/x_0-0-0_20250101000000000.parquet", "y_0-0-0_20250101000000000.parquet"),
    )
    base = str(tmp_path / "t")
    assert CleanerPlan.from_bytes(plan.to_bytes(base), base) == plan


def test_cli_clean(tmp_path):
    table, _coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=4)
    lease.release()
    dry = subprocess.run(
        [CLI, "clean", table.uri, "--retain-commits", "2", "--dry-run", "--json"], capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned["dry_run"] and planned["files"] and all(table.io.exists(f) for f in planned["files"])
    done = subprocess.run([CLI, "clean", table.uri, "--retain-commits", "2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "cleaned with" in done.stdout
    assert not any(table.io.exists(f) for f in planned["files"])
    assert state_at(table.uri) == reads[instants[-1]]
    bad = subprocess.run([CLI, "clean", table.uri, "--policy", "KEEP_NOTHING"], capture_output=True, text=True)
    assert bad.returncode == 2 and "policy" in bad.stderr


@pytest.mark.parametrize("commits", [1, 2])
def test_nothing_to_clean_on_a_young_table(tmp_path, commits):
    table, coordinator, lease, _instants, _reads = rewritten_history(tmp_path / "t", commits=commits)
    assert Cleaner(coordinator, Retention(commits=10)).clean().clean_instant is None
    assert [i for i in Table.open(table.uri).timeline if i.action == CLEAN] == []
    lease.release()


@pytest.mark.parametrize("background", [True, False], ids=["async", "inline"])
def test_the_job_cleans_after_its_commits(spark, tmp_path, background):
    from laketide.cli.jobs import embedded_defaults
    from laketide.config import load_config
    from laketide.spark.job import run

    config = load_config(
        base=embedded_defaults([]),
        overrides=[
            f"table.path={tmp_path / 'table'}",
            f"stream.checkpoint={tmp_path / 'checkpoint'}",
            "source.generator.rows_per_batch=300",
            "source.generator.batches=7",
            "clean.retain_commits=2",
            f"clean.async={str(background).lower()}",
        ],
    )
    run(config)
    table = Table.open(str(tmp_path / "table"))
    writes = [i.timestamp for i in table.timeline.completed_writes()]
    cleans = [i for i in table.timeline if i.action == CLEAN]
    assert len(writes) == 7 and cleans and all(i.state is State.COMPLETED for i in cleans)
    assert plan_clean(table.file_system_view(), Retention(commits=2)).files == () or background, (
        "inline cleaning keeps up"
    )
    left = {BaseFile.parse(*p.rsplit("/", 1)).instant_time for p in base_files(table)}
    assert min(left) >= writes[-3], "no version older than the one a read as of the earliest retained commit sees"
    for instant in writes[-2:]:
        assert hudi_read(table.uri, as_of=instant).num_rows == Table.open(table.uri).snapshot(as_of=instant).num_rows
