"""The laketide command line as a user runs it: subprocesses, --json output, exit codes."""

from __future__ import annotations

import json
import threading

import pytest
from chaoslib import free_port
from commands import laketide
from readback import hudi_read, rows
from writes import history

from laketide.api.app import create_app
from laketide.api.server import ApiServer
from laketide.coordinator import Coordinator, LocalLease
from laketide.index.state import StateIndex
from laketide.table import Table
from laketide.table.reading.view_sync import ViewSync
from laketide.writer.job.operations import Operations


@pytest.fixture
def written(tmp_path):
    return history(tmp_path / "t", width=3)


def test_help_everywhere():
    for command in ([], ["run"], ["timeline"], ["show"], ["rollback"], ["serve"], ["lease"]):
        code, out, _ = laketide(*command, "--help")
        assert code == 0 and "Usage" in out


def test_timeline_show_and_lease(written):
    table, instants, _, dangling = written
    code, out, _ = laketide("timeline", table.uri, "--json")
    assert code == 0
    assert [i["instant"] for i in json.loads(out)] == [dangling, *instants[::-1]]
    code, out, _ = laketide("timeline", table.uri, "--state", "completed", "--limit", "2", "--json")
    assert [i["instant"] for i in json.loads(out)] == instants[:0:-1]
    code, out, _ = laketide("timeline", table.uri)
    assert code == 0 and instants[0] in out
    code, out, _ = laketide("show", table.uri, instants[0], "--json")
    assert code == 0 and json.loads(out)["totals"]["inserts"] == 3
    code, out, _ = laketide("lease", table.uri, "--json")
    assert code == 0 and json.loads(out) == {"held": False, "holder": None, "last_job": None}


def test_exit_codes_tell_not_found_refused_and_usage(written, tmp_path):
    table, instants, _, _ = written
    code, out, _ = laketide("show", table.uri, "20000101000000000", "--json")
    assert code == 3 and "no instant" in json.loads(out)["error"]
    assert laketide("show", str(tmp_path / "nothing"), instants[0])[0] == 3
    assert laketide("show", table.uri, "yesterday")[0] == 2
    code, out, _ = laketide("rollback", table.uri, instants[0], "--json")
    assert code == 4 and "force" in json.loads(out)["error"]
    code, _, err = laketide("run", "--conf", "write.index_shards=0")
    assert code == 2 and "write.index_shards" in err
    held = LocalLease.for_table(table.uri, job_id="someone-else")
    held.acquire()
    try:
        code, _, err = laketide("rollback", table.uri, instants[2])
        assert code == 4 and "someone-else" in err
    finally:
        held.release()


def test_local_rollback_dry_run_then_real(written):
    table, instants, states, dangling = written
    code, out, _ = laketide("rollback", table.uri, dangling, "--dry-run", "--json")
    plan = json.loads(out)
    assert code == 0 and plan["dry_run"] and all(table.io.exists(f) for f in plan["files"])
    assert laketide("rollback", table.uri, dangling)[0] == 0
    code, out, _ = laketide("rollback", table.uri, instants[2], "--json")
    assert code == 0 and json.loads(out)["was_completed"]
    assert rows(hudi_read(table.uri), "id", ["id", "v", "region"]) == states[1]


class _Job:
    """A coordinator that holds the lease and serves the API, as the streaming job does."""

    def __init__(self, table):
        self.lease = LocalLease.for_table(table.uri, job_id="streaming-job")
        self.lease.acquire()
        self.coordinator = Coordinator(table, self.lease, "w")
        self.views = ViewSync(table)
        self.lock = threading.Lock()
        self.server = ApiServer(create_app(table, "tok", job=self)).start()
        self.lease.announce(self.server.address)

    def status(self):
        return {"running": True, "writer_id": "w"}

    @property
    def operations(self):
        return Operations(
            self.coordinator, StateIndex(self.coordinator.table.io, 1), between_batches=self.between_batches
        )

    def between_batches(self, action):
        with self.lock:
            return action()

    def close(self):
        self.server.stop()
        self.lease.release()


def test_rollback_goes_through_the_running_jobs_api(written):
    table, _instants, states, dangling = written
    job = _Job(table)
    try:
        code, out, _ = laketide("lease", table.uri, "--json")
        assert json.loads(out)["holder"]["api_address"] == job.server.address
        code, out, _ = laketide("rollback", table.uri, dangling, "--json", env={"LAKETIDE_API_TOKEN": "wrong"})
        assert code == 4 and "403" in json.loads(out)["error"]
        code, out, _ = laketide("rollback", table.uri, dangling, "--json", env={"LAKETIDE_API_TOKEN": "tok"})
        assert code == 0 and json.loads(out)["instant"] == dangling
        code, out, _ = laketide("rollback", table.uri, "20000101000000000", "--json", env={"LAKETIDE_API_TOKEN": "tok"})
        assert code == 3
        assert rows(hudi_read(table.uri), "id", ["id", "v", "region"]) == states[2]
    finally:
        job.close()


def test_unreachable_zookeeper_stops_the_job_at_start(tmp_path):
    code, _, err = laketide(
        "run",
        "--conf",
        f"table.path={tmp_path / 't'}",
        "--conf",
        f"stream.checkpoint={tmp_path / 'cp'}",
        "--conf",
        "coordinator.lease=zookeeper",
        "--conf",
        f"coordinator.zookeeper=127.0.0.1:{free_port()}",
    )
    assert code == 6 and "cannot reach ZooKeeper" in err and "never falls back" in err


def test_a_local_checkpoint_logs_through_the_raw_local_file_system(tmp_path):
    """A job whose checkpoint is on the local disk writes its query's logs through Hadoop's FileSystem API on the raw
    local file system (``spark.session.LOCAL_CHECKPOINT``): no checksum file beside an entry, and its micro-batches
    run on after a restart from the logs it wrote."""
    settings = [
        f"table.path={tmp_path / 't'}",
        f"stream.checkpoint={tmp_path / 'cp'}",
        "source.generator.rows_per_batch=200",
        "stream.trigger=available-now",
    ]
    for batches in (3, 5):
        args = [arg for key in [*settings, f"source.generator.batches={batches}"] for arg in ("--conf", key)]
        code, out, err = laketide("run", *args)
        assert code == 0, err[-3000:]
        assert "through Hadoop's raw local file system" in err + out
    for log in ("offsets", "commits"):
        assert sorted(p.name for p in (tmp_path / "cp" / log).iterdir()) == [str(n) for n in range(5)]
    assert not [p for p in (tmp_path / "cp").rglob("*") if p.name.endswith(".crc") or p.name.endswith(".tmp")]
    assert len(Table.open(str(tmp_path / "t")).timeline.completed_writes()) == 5


def test_version():
    from laketide import __version__

    code, out, _ = laketide("--version")
    assert code == 0 and out.strip() == f"laketide {__version__}"


def test_a_timeline_page_before_what_is_not_an_instant_is_refused(written):
    code, _, err = laketide("timeline", written[0].uri, "--before", "notaninstant")
    assert code == 2 and "yyyyMMddHHmmssSSS" in err
