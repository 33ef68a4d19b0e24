"""One operations layer: the same change made through the running job's API, the CLI and `laketide serve`
leaves the Delta mirror caught up each time (delta-rs reads what hudi-rs reads, and the newest Delta
version is the change). Each way runs as users run it: `laketide run` and `laketide serve` in subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import httpx
from chaoslib import CLI, free_port, job_args, run_here
from deltalake import DeltaTable
from readback import hudi_read, rows
from streaming import BATCHES, DATA_COLUMNS, land, land_all, row

from laketide.table import Table

TOKEN = "ops-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ENV = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "LAKETIDE_API_TOKEN": TOKEN}
MIRROR = ["mirror.delta=true"]


def _newest_write(path) -> str:
    return Table.open(str(path)).timeline.completed_writes()[-1].timestamp


def _assert_mirror_shows(path, rollback_instant: str) -> None:
    """The newest Delta version is the rollback, and Delta reads the same rows as hudi-rs."""
    dt = DeltaTable(str(path))
    assert dt.history(1)[0]["laketide"]["hudiInstant"] == rollback_instant, "the mirror's newest version is the change"
    assert rows(dt.to_pyarrow_table(), "id", DATA_COLUMNS) == rows(hudi_read(path), "id", DATA_COLUMNS)


def _rolled_back_rows(answer: dict) -> int:
    return sum(answer["rows"].values())


def _wait_for(url: str, proc: subprocess.Popen, ready, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-3000:] if proc.stderr else "the process ended"
        try:
            answer = httpx.get(url, timeout=5)
            if answer.status_code == 200 and ready(answer.json()):
                return answer.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} was not ready within {timeout}s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _through_the_jobs_api(root) -> None:
    land_all(root)
    port = free_port()
    job = subprocess.Popen(
        job_args(root, api_port=port, trigger="1 second", extra=MIRROR),
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        api = f"http://127.0.0.1:{port}"
        writer = _wait_for(
            f"{api}/v1/writer",
            job,
            lambda w: len([b for b in w["recent"] if not b["skipped"] and not b["empty"]]) >= len(BATCHES),
        )
        answer = httpx.post(f"{api}/v1/instants/{writer['last_instant']}/rollback", json={}, headers=AUTH, timeout=300)
        assert answer.status_code == 200, answer.text
        assert _rolled_back_rows(answer.json()) > 0
        _assert_mirror_shows(root / "table", answer.json()["rollback_instant"])
        assert httpx.get(f"{api}/v1/writer").json()["recent"][-1]["rolled_back"], (
            "the job's status marks the rolled-back micro-batch"
        )
    finally:
        _stop(job)
    assert job.returncode == 0


def _write_one_more(root, n: int) -> None:
    land(root, f"batch-more-{n:03d}.json", [row(i, 10 + n) for i in range(1, 8)], 1_700_000_100 + n)
    run_here(job_args(root, extra=MIRROR))


def _through_the_cli(root) -> None:
    _write_one_more(root, 0)
    newest = _newest_write(root / "table")
    done = subprocess.run(
        [CLI, "rollback", str(root / "table"), newest, "--json"], env=ENV, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert _rolled_back_rows(answer) > 0
    _assert_mirror_shows(root / "table", answer["rollback_instant"])


def _through_serve(root) -> None:
    _write_one_more(root, 1)
    newest = _newest_write(root / "table")
    port = free_port()
    serve = subprocess.Popen(
        [CLI, "serve", "--table", str(root / "table"), "--port", str(port)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        api = f"http://127.0.0.1:{port}"
        _wait_for(f"{api}/healthz", serve, lambda h: h["status"] == "ok", timeout=60)
        answer = httpx.post(f"{api}/v1/instants/{newest}/rollback", json={}, headers=AUTH, timeout=300)
        assert answer.status_code == 200, answer.text
        assert _rolled_back_rows(answer.json()) > 0
        _assert_mirror_shows(root / "table", answer.json()["rollback_instant"])
    finally:
        serve.terminate()
        serve.communicate(timeout=60)


def test_a_rollback_through_the_job_the_cli_and_serve_shows_in_the_mirror_each_time(tmp_path):
    _through_the_jobs_api(tmp_path)
    _through_the_cli(tmp_path)
    _through_serve(tmp_path)
