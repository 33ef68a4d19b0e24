"""The API served by the running streaming job: status, lease, and a rollback, a savepoint and a restore between
micro-batches."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import httpx
from commands import CLI
from readback import hudi_read, rows
from streaming import DATA_COLUMNS, expected_after, job_config, land, row

from laketide.service import TOKEN_ENV, run_service
from laketide.writer.job.running import WAITING_SECONDS
from laketide.writer.job.state import JobState
from laketide.writer.landing import landing_backlog

TOKEN = "job-token"


def wait_for(condition, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_rollback_through_the_running_jobs_api(spark, tmp_path):
    first = [row(i, 1) for i in range(1, 11)]
    second = [row(i, 2) for i in range(1, 6)] + [row(i, 2) for i in range(40, 45)]
    land(tmp_path, "b0.json", first, 1_700_000_000)
    config = job_config(tmp_path, stream__trigger="1 second", coordinator__api_port=0, coordinator__api_token=TOKEN)
    jobs = []
    thread = threading.Thread(target=run_service, args=(config,), kwargs={"on_ready": jobs.append}, daemon=True)
    thread.start()
    wait_for(lambda: jobs and jobs[0].writer.status.last_instant)
    job = jobs[0]
    api = job.coordinator.lease.holder.api_address
    try:
        assert api and api.startswith("http://127.0.0.1:")
        land(tmp_path, "b1.json", second, 1_700_000_001)
        wait_for(lambda: len(job.writer.status.recent) == 2)
        writer = httpx.get(f"{api}/v1/writer").json()
        assert writer["running"] and writer["writer_id"] == job.coordinator.writer_id
        assert [b["batch_id"] for b in writer["recent"]] == [0, 1]
        assert [b["ran_on"] for b in writer["recent"]] == ["driver", "driver"], (
            "small micro-batches are written by the driver"
        )
        assert writer["index"]["file_groups"] == writer["index"]["covered_file_groups"] > 0
        lease = httpx.get(f"{api}/v1/lease").json()
        assert lease["held"] and lease["holder"]["api_address"] == api and lease["holder"]["pid"] > 0
        metrics = httpx.get(f"{api}/metrics").text
        name = job.table.name  # every metric is labelled with the table it counts
        assert (
            f'laketide_micro_batches_total{{outcome="committed",table="{name}"}} 2.0' in metrics
            and f'laketide_lease_held{{table="{name}"}} 1.0' in metrics
        )

        newest = job.writer.status.last_instant
        answer = httpx.post(
            f"{api}/v1/instants/{newest}/rollback", json={}, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["was_completed"] and answer.json()["instant"] == newest
        assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after([first])
        assert httpx.post(f"{api}/v1/instants/{newest}/rollback", json={}).status_code == 401
        recent = httpx.get(f"{api}/v1/writer").json()["recent"]
        assert [(b["instant"], b["rolled_back"]) for b in recent] == [(recent[0]["instant"], False), (newest, True)]
        assert {"late", "replaced", "empty", "stage_seconds", "ran_on"} <= set(recent[0]), (
            "every field of the batch report"
        )

        # a savepoint and a restore through the CLI, which finds the job's API through the lease
        env = {**os.environ, TOKEN_ENV: TOKEN}
        saved = subprocess.run(
            [CLI, "savepoint", "create", str(tmp_path / "table"), "--json"], capture_output=True, text=True, env=env
        )
        assert saved.returncode == 0, saved.stderr
        savepoint = json.loads(saved.stdout)["instant"]
        assert [s["instant"] for s in httpx.get(f"{api}/v1/savepoints").json()] == [savepoint]
        third = [row(i, 3) for i in range(1, 4)]
        land(tmp_path, "b2.json", third, 1_700_000_002)
        wait_for(lambda: len(job.writer.status.recent) == 3)
        assert httpx.post(f"{api}/v1/restore", json={"savepoint": savepoint}).status_code == 401
        restored = subprocess.run(
            [CLI, "restore", str(tmp_path / "table"), savepoint, "--json"], capture_output=True, text=True, env=env
        )
        assert restored.returncode == 0, restored.stderr
        assert json.loads(restored.stdout)["rolled_back"] == [job.writer.status.last_instant]
        assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after([first])
        fourth = [row(i, 4) for i in range(2, 5)]
        land(tmp_path, "b3.json", fourth, 1_700_000_003)
        wait_for(lambda: len(job.writer.status.recent) == 4)
        assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after([first, fourth]), (
            "the job writes on after the restore"
        )
        time.sleep(WAITING_SECONDS)  # the backlog is listed at most this often
        writer = httpx.get(f"{api}/v1/writer").json()
        assert writer["files_waiting"] == 0, "every landing file was taken"
        health = writer["health"]
        assert health["state"] == "idle" and health["backlog"]["files"] == 0 and health["last_commit_seconds_ago"] < 60
        assert health["input_rate"] > 0 and health["processing_rate"] > 0 and not health["falling_behind"]
        assert JobState.read(job.table.io).state == "running"
    finally:
        job.stop()
        thread.join(120)
    assert not thread.is_alive()
    # files that landed after the job stopped wait for its next run, as Spark's checkpoint tells
    land(tmp_path, "b4.json", [row(7, 5)], 1_700_000_004)
    land(tmp_path, "b5.json", [row(8, 5)], 1_700_000_005)
    land(tmp_path, ".hidden.json", [row(9, 5)], 1_700_000_006)
    last = job.writer.status.recent[-1].batch_id
    backlog = landing_backlog(str(tmp_path / "landing"), str(tmp_path / "checkpoint"), last)
    assert backlog.files == 2 and backlog.bytes > 0 and backlog.age_seconds is not None
    # the job's last word stays with the table: a server without the job shows it
    stopped = JobState.read(job.table.io)
    assert stopped.state == "stopped" and stopped.last_batch == last and stopped.writer_id == job.coordinator.writer_id

    from laketide.api.app import create_app
    from laketide.api.server import ApiServer

    said = subprocess.run(
        [CLI, "lease", str(tmp_path / "table"), "--json"], capture_output=True, text=True, timeout=120
    )
    assert said.returncode == 0 and json.loads(said.stdout)["last_job"]["state"] == "stopped", said.stderr[-2000:]
    assert (
        "last job: stopped at"
        in subprocess.run([CLI, "lease", str(tmp_path / "table")], capture_output=True, text=True, timeout=120).stdout
    )
    server = ApiServer(create_app(job.table, TOKEN)).start()
    try:
        assert httpx.get(f"{server.address}/v1/writer").json()["last_job"]["state"] == "stopped"
        assert 'id="last-job"' in httpx.get(f"{server.address}/ui/part/job").text
    finally:
        server.stop()
