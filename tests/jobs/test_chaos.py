"""Chaos through `laketide run` with a ZooKeeper lease: kills at random times, a frozen holder, ZooKeeper outages.

Each test feeds landing files while the chaos goes on, then drains the landing
directory and compares the table, read by hudi-rs, with the model of every
file landed: nothing lost, nothing duplicated, nothing stale committed, no
data file of an instant that did not complete.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time

from chaoslib import (
    Feeder,
    Job,
    completed_count,
    has_inflight,
    job_args,
    leftover_data_files,
    run_here,
    verdict,
    wait_until,
)

from laketide.table import Table
from laketide.table.format.commit import EPOCH_KEY
from laketide.table.format.markers import FREEZE_AFTER_MARKER_ENV

SEED = int(os.environ.get("LAKETIDE_CHAOS_SEED", "20261123"))
EXIT_LEASE_LOST = 5


def _args(root, zookeeper, session_timeout: float, trigger: str = "1 second", settings: list[str] = ()):
    extra = [
        f"coordinator.zookeeper_session_timeout={session_timeout}",
        "coordinator.lease_wait=60",
        "source.max_files_per_trigger=4",
        *settings,
    ]
    return job_args(root, "zookeeper", zookeeper, trigger=trigger, extra=extra)


def _drain_and_check(root, zookeeper, feeder: Feeder, session_timeout: float, settings: list[str] = ()):
    feeder.stop()
    job = Job(_args(root, zookeeper, session_timeout, "available-now", settings), root / "drain.log").start()
    assert job.wait(300) == 0, job.log_tail()
    result = verdict(root, feeder.expected())
    assert result.clean, result
    assert result.expected_rows > 0
    return result


def test_sigkill_at_random_times_while_files_land(zookeeper, tmp_path):
    rng = random.Random(SEED)
    feeder = Feeder(tmp_path, SEED, interval=(1.0, 4.0))
    feeder.start()
    kills = 0
    try:
        for cycle in range(5):
            log = tmp_path / f"job-{cycle}.log"
            job = Job(_args(tmp_path, zookeeper, 3), log).start()
            # the kill window opens once the job holds the lease: on a busy machine, starting Spark alone
            # can take a whole window measured from the process start, and nothing would ever commit
            wait_until(
                lambda job=job, log=log: not job.running() or "lease of " in log.read_text(),
                180,
                "the job to take the lease",
            )
            deadline = time.monotonic() + rng.uniform(3, 14)
            while time.monotonic() < deadline and job.running():
                time.sleep(0.1)
            assert job.running(), f"cycle {cycle}: the job stopped by itself\n{job.log_tail()}"
            job.kill()
            kills += 1
    finally:
        feeder.stopped.set()
    assert kills == 5
    assert completed_count(tmp_path) > 0, "the job committed nothing between kills"
    _drain_and_check(tmp_path, zookeeper, feeder, 3)


def test_a_frozen_holder_is_taken_over_and_cannot_commit_when_it_wakes(zookeeper, tmp_path):
    feeder = Feeder(tmp_path, SEED + 1, interval=(0.2, 0.6))
    feeder.start()
    first = Job(_args(tmp_path, zookeeper, 3), tmp_path / "first.log").start()
    second = None
    try:
        wait_until(lambda: completed_count(tmp_path) >= 2, 120, "the first job's commits", job=first)
        wait_until(lambda: has_inflight(tmp_path), 60, "a micro-batch in flight", poll=0.02)
        first.signal(signal.SIGSTOP)
        frozen_at = completed_count(tmp_path)

        second = Job(_args(tmp_path, zookeeper, 3), tmp_path / "second.log").start()
        wait_until(lambda: completed_count(tmp_path) >= frozen_at + 2, 120, "the second job's commits", job=second)
        first.signal(signal.SIGCONT)
        assert first.wait(120) == EXIT_LEASE_LOST, first.log_tail()
        assert "lease" in first.log_tail().lower()

        after_wake = completed_count(tmp_path)
        # a commit sweeps right after its completed file is written: the second commit after the wake
        # completes once the first one's sweep is done (one micro-batch at a time)
        wait_until(
            lambda: completed_count(tmp_path) >= after_wake + 2,
            120,
            "two commits after the frozen job woke",
            job=second,
        )
        table = Table.open(str(tmp_path / "table"))
        pending = {i.timestamp for i in table.timeline.pending()}
        stale = [p for p in leftover_data_files(table) if not any(ts in p for ts in pending)]
        assert stale == [], "data files of instants that never completed, left after the next commit's sweep"
        assert second.running(), second.log_tail()
        epochs = [
            int(table.timeline.commit_metadata(c).extra_metadata[EPOCH_KEY]) for c in table.timeline.completed_writes()
        ]
        assert epochs == sorted(epochs) and epochs[-1] > epochs[0]
        second.signal(signal.SIGINT)
        assert second.wait(120) == 0, second.log_tail()
    finally:
        feeder.stopped.set()
        for job in (first, second):
            if job is not None and job.running():
                job.signal(signal.SIGCONT)
                job.kill()
    _drain_and_check(tmp_path, zookeeper, feeder, 3)


def test_a_file_written_after_its_instant_was_rolled_back_is_swept(zookeeper, tmp_path):
    """The interleaving timing rarely gives: a task stops between its marker and its data file, a new
    holder rolls the instant back and commits, then the task writes its file. The next commit sweeps it."""
    _late_file_after_rollback(zookeeper, tmp_path, [], "")


def test_a_log_file_written_after_its_instant_was_rolled_back_leaves_the_replayed_log_alone(zookeeper, tmp_path):
    """The same on merge-on-read, frozen before a log file. A log file's name carries its slice and version,
    not its instant, and the replay writes the same slice at the same version: the late write must not
    take the committed log's name, or it would overwrite it and the sweep would then delete it."""
    feeder = Feeder(tmp_path, SEED + 4)
    for _ in range(3):
        feeder.land_one()
    mor = ["table.type=MERGE_ON_READ"]
    run_here(_args(tmp_path, zookeeper, 3, "available-now", mor))
    _late_file_after_rollback(zookeeper, tmp_path, mor, ".log.", feeder)


def _late_file_after_rollback(zookeeper, tmp_path, settings: list[str], freeze_at: str, feeder: Feeder | None = None):
    freeze = tmp_path / "freeze"
    freeze.mkdir()
    (freeze / "armed").write_text(freeze_at)
    feeder = feeder or Feeder(tmp_path, SEED + 3)
    for _ in range(3):
        feeder.land_one()
    first = Job(_args(tmp_path, zookeeper, 3, settings=settings), tmp_path / "first.log")
    first.env = {**first.env, FREEZE_AFTER_MARKER_ENV: str(freeze)}
    first.start()
    second = None
    try:
        wait_until(lambda: (freeze / "frozen").exists(), 120, "the first job's writer to stop after a marker")
        late_file = tmp_path / "table" / (freeze / "frozen").read_text()
        (instant,) = [i.timestamp for i in Table.open(str(tmp_path / "table")).timeline.pending()]
        assert not late_file.exists()
        first.signal(signal.SIGSTOP)
        committed = completed_count(tmp_path)

        second = Job(_args(tmp_path, zookeeper, 3, settings=settings), tmp_path / "second.log").start()
        wait_until(lambda: completed_count(tmp_path) > committed, 120, "the new holder's commit", job=second)
        # and the sweep right after that commit: released before it ends, the late file would be swept
        # there, before this test looks for it (the micro-batch's line is logged once its commit's sweep is done)
        wait_until(
            lambda: re.search(r"micro-batch \d+: instant=", (tmp_path / "second.log").read_text()),
            120,
            "the new holder's first micro-batch",
        )
        rolled_back = Table.open(str(tmp_path / "table")).timeline
        assert instant not in {i.timestamp for i in rolled_back}, "the new holder rolled the frozen instant back"
        assert not late_file.exists(), "the replay wrote a file of the same name as the frozen task's"

        (freeze / "release").touch()
        first.signal(signal.SIGCONT)
        assert first.wait(120) == EXIT_LEASE_LOST, first.log_tail()
        assert late_file.exists(), "the released task wrote its file after the rollback"

        before = completed_count(tmp_path)
        feeder.land_one()
        wait_until(lambda: completed_count(tmp_path) > before, 120, "the next commit", job=second)
        # the sweep runs right after the commit's completed file is written
        wait_until(lambda: not late_file.exists(), 60, "the sweep after the next commit to delete the late file")
        assert leftover_data_files(Table.open(str(tmp_path / "table"))) == []
        second.signal(signal.SIGINT)
        assert second.wait(120) == 0, second.log_tail()
    finally:
        for job in (first, second):
            if job is not None and job.running():
                job.signal(signal.SIGCONT)
                job.kill()
    _drain_and_check(tmp_path, zookeeper, feeder, 3, settings)


def test_zookeeper_restart_and_outages(zookeeper_server, tmp_path):
    # The outage below is the server's stop, a pause and its start (a JVM's, seconds on a busy machine) plus the
    # reconnection: a quarter of the timeout paused leaves room for the rest on a loaded machine.
    session_timeout = 12
    feeder = Feeder(tmp_path, SEED + 2, interval=(0.3, 0.8))
    feeder.start()
    address = zookeeper_server.address
    job = Job(_args(tmp_path, address, session_timeout), tmp_path / "job.log").start()
    try:
        wait_until(lambda: completed_count(tmp_path) >= 2, 120, "the first commits", job=job)

        # a restart with the server's data kept, down for less than the session timeout: the job rides it out
        zookeeper_server.stop()
        time.sleep(session_timeout / 4)
        zookeeper_server.start()
        before = completed_count(tmp_path)
        wait_until(lambda: completed_count(tmp_path) >= before + 2, 120, "commits after the restart", job=job)
        assert job.running(), job.log_tail()
        assert "session intact" in job.log_tail(20000)

        # down for longer than the session timeout: the job stops writing and exits for its supervisor
        zookeeper_server.stop()
        assert job.wait(session_timeout * 4) == EXIT_LEASE_LOST, job.log_tail()
        zookeeper_server.start()
    finally:
        feeder.stopped.set()
        if job.running():
            job.kill()
    _drain_and_check(tmp_path, address, feeder, session_timeout)
