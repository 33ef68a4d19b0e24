"""The configurations users run, through `laketide run` in a subprocess: lease local or ZooKeeper, API off or on with a
token."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from chaoslib import free_port, job_args
from fixture_tables import REPO
from readback import hudi_read, rows
from streaming import BATCHES, DATA_COLUMNS, expected_after, land_all

from laketide.table import Table

TOKEN = "matrix-token"


def _args(root: Path, lease: str, zookeeper: str, api_port: int | None) -> list[str]:
    return job_args(root, lease, zookeeper, api_port, trigger="1 second" if api_port else "available-now")


def _wait_for_batches(api: str, proc: subprocess.Popen, count: int, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        try:
            writer = httpx.get(f"{api}/v1/writer", timeout=5).json()
            if len([b for b in writer.get("recent", []) if not b["skipped"]]) >= count:
                return writer
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the job did not commit {count} micro-batches within {timeout}s")


@pytest.mark.parametrize("lease", ["local", "zookeeper"])
@pytest.mark.parametrize("api_on", [False, True], ids=["api-off", "api-on"])
def test_laketide_run(zookeeper, tmp_path, lease, api_on):
    land_all(tmp_path)
    port = free_port() if api_on else None
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "LAKETIDE_API_TOKEN": TOKEN}
    proc = subprocess.Popen(
        _args(tmp_path, lease, zookeeper, port), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        if api_on:
            api = f"http://127.0.0.1:{port}"
            writer = _wait_for_batches(api, proc, len(BATCHES))
            assert writer["running"] and writer["last_instant"]
            held = httpx.get(f"{api}/v1/lease").json()
            assert held["held"] and held["holder"]["api_address"] == api and held["holder"]["epoch"] >= 1
            assert held["holder"]["pid"] == proc.pid
            assert (
                httpx.post(f"{api}/v1/instants/{writer['last_instant']}/rollback", json={"dry_run": True}).status_code
                == 401
            )
            authorized = {"Authorization": f"Bearer {TOKEN}"}
            dry = httpx.post(
                f"{api}/v1/instants/{writer['last_instant']}/rollback", json={"dry_run": True}, headers=authorized
            )
            assert dry.status_code == 200 and dry.json()["dry_run"]
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    commits = Table.open(str(tmp_path / "table")).timeline.completed_writes()
    assert len(commits) == len(BATCHES) >= 2
    assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after(BATCHES)


def test_deploy_spark_submit_with_a_local_master(tmp_path):
    land_all(tmp_path)
    script = REPO / "deploy" / "spark-submit.sh"
    conf = _args(tmp_path, "local", "", None)[2:]
    env = {**os.environ, "MASTER": "local[2]", "VENV": str(Path(sys.executable).parents[1])}
    result = subprocess.run(["bash", str(script), *conf], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after(BATCHES)
