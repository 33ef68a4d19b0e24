"""Chaos harness: a restartable ZooKeeper server, a feeder of landing files, `laketide run` jobs
that can be killed or frozen as whole process trees, and the checks of the table they leave.

Used by the chaos tests and by ``bench/chaos.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from commands import CLI
from streaming import DATA_COLUMNS, SCHEMA_DDL, Model

from laketide.table import Table
from laketide.table.format.commit import EPOCH_KEY

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ZooKeeperServer:
    """Debian's ZooKeeper on a loopback port, stopped and started again on the same port and data."""

    def __init__(self, root: Path):
        if not ZOOKEEPER_JAR.exists():
            raise RuntimeError(
                f"ZooKeeper is not installed ({ZOOKEEPER_JAR} missing); run deploy/install-system-deps.sh"
            )
        self.root = root
        self.port = free_port()
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "zoo.cfg").write_text(
            f"tickTime=200\ndataDir={root / 'data'}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "minSessionTimeout=600\nmaxSessionTimeout=30000\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n"
        )
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> ZooKeeperServer:
        with open(self.root / "zookeeper.log", "a") as log:
            self.proc = subprocess.Popen(
                [
                    "java",
                    "-Dzookeeper.admin.enableServer=false",
                    "-cp",
                    f"/etc/zookeeper/conf:{ZOOKEEPER_JAR}",
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    str(self.root / "zoo.cfg"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        log.close()
        deadline = time.monotonic() + timeout
        while not self._ok():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not start; see {self.root / 'zookeeper.log'}")
            time.sleep(0.2)
        return self

    def _ok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"ruok")
                return conn.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# -- the workload ---------------------------------------------------------

KEYS = 150


def feed_lines(rng: random.Random, n: int) -> list[dict]:
    """One landing file: upserts and a few deletes of random keys. ``ts`` grows with the file number."""
    lines = []
    for _ in range(rng.randrange(5, 40)):
        i = rng.randrange(KEYS)
        line = {
            "id": i,
            "name": f"n{i}-{n}",
            "amount": round(rng.random() * 100, 2),
            "ts": n,
            "region": ("us", "eu", "apac")[i % 3],
        }
        if rng.random() < 0.1:
            line["_hoodie_is_deleted"] = True
        lines.append(line)
    return lines


class Feeder(threading.Thread):
    """Lands numbered files into ``<root>/landing`` at random intervals while the chaos goes on."""

    def __init__(self, root: Path, seed: int, interval: tuple[float, float] = (0.3, 1.5)):
        super().__init__(daemon=True)
        self.root = root
        self.rng = random.Random(seed)
        self.interval = interval
        self.files: list[list[dict]] = []
        self.stopped = threading.Event()

    def land_one(self) -> None:
        n = len(self.files)
        lines = feed_lines(self.rng, n)
        landing = self.root / "landing"
        landing.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".feed-{n:05d}.json"
        tmp.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
        os.utime(tmp, (1_700_000_000 + n, 1_700_000_000 + n))
        tmp.rename(landing / f"feed-{n:05d}.json")
        self.files.append(lines)

    def run(self) -> None:
        while not self.stopped.is_set():
            self.land_one()
            self.stopped.wait(self.rng.uniform(*self.interval))

    def stop(self) -> None:
        self.stopped.set()
        if self.ident is not None:  # a feeder that lands files only when told is never started
            self.join()

    def expected(self) -> list[dict]:
        model = Model()
        for lines in self.files:
            model.apply(lines)
        return model.expected()


# -- the job --------------------------------------------------------------


def job_args(
    root: Path,
    lease: str = "local",
    zookeeper: str = "",
    api_port: int | None = None,
    trigger: str = "available-now",
    extra: list[str] | None = None,
) -> list[str]:
    conf = [
        f"table.path={root / 'table'}",
        "table.name=orders",
        'table.record_key=["id"]',
        'table.partition_by=["region"]',
        "table.ordering_field=ts",
        "source.format=json",
        f"source.path={root / 'landing'}",
        f"source.schema={SCHEMA_DDL}",
        "source.max_files_per_trigger=1",
        f"stream.checkpoint={root / 'checkpoint'}",
        "write.index_shards=2",
        "write.parallelism=2",
        f"coordinator.lease={lease}",
        f"stream.trigger={trigger}",
    ]
    if lease == "zookeeper":
        conf.append(f"coordinator.zookeeper={zookeeper}")
    if api_port:
        conf.append(f"coordinator.api_port={api_port}")
    conf += extra or []
    return [CLI, "run", *[a for c in conf for a in ("--conf", c)]]


def run_here(args: list[str]) -> None:
    """The job ``job_args`` describes, on this test process's Spark session rather than in a `laketide run`
    of its own: for runs that only build the table a test starts from (a subprocess starts a JVM and
    Spark, about 10 s of CPU)."""
    from laketide.config import load_config
    from laketide.spark.job import run

    assert args[1] == "run", args
    run(load_config(overrides=[a for flag, a in zip(args[2::2], args[3::2]) if flag == "--conf"]))


@dataclass
class Job:
    """`laketide run` in its own process group, so the whole tree (driver, JVM, Python workers) is signalled at once."""

    args: list[str]
    log_path: Path
    env: dict = field(default_factory=lambda: {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    proc: subprocess.Popen | None = None

    def start(self) -> Job:
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                self.args, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def running(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def wait_until(condition, timeout: float, what: str, poll: float = 0.2, job: Job | None = None) -> None:
    """Poll `condition`; fail naming `what` on timeout, or at once if `job` exits, with the tail of its log."""
    deadline = time.monotonic() + timeout
    while not condition():
        if job is not None and not job.running():
            raise AssertionError(f"the job exited ({job.proc.returncode}) while waiting for {what}\n{job.log_tail()}")
        if time.monotonic() > deadline:
            tail = f"\n--- the job's log ---\n{job.log_tail()}" if job is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{tail}")
        time.sleep(poll)


def completed_count(root: Path) -> int:
    try:
        return len(Table.open(str(root / "table")).timeline.completed_writes())
    except Exception:
        return 0


def has_inflight(root: Path) -> bool:
    try:
        return bool(Table.open(str(root / "table")).timeline.pending())
    except Exception:
        return False


# -- what the table must look like afterwards -----------------------------


@dataclass
class Verdict:
    expected_rows: int
    rows_lost: int
    rows_duplicated: int
    rows_wrong: int
    files_left_over: list[str]
    pending: list[str]
    epoch_regressions: int

    @property
    def clean(self) -> bool:
        return not (
            self.rows_lost
            or self.rows_duplicated
            or self.rows_wrong
            or self.files_left_over
            or self.pending
            or self.epoch_regressions
        )


def leftover_data_files(table: Table) -> list[str]:
    """Data files whose instant is not a completed write: what readers could one day take for committed."""
    from laketide.table.format.files import instant_of_file

    completed = {i.timestamp for i in table.timeline.completed_writes()}
    found = []
    for entry in table.io.walk():
        if entry.is_dir or entry.path.startswith(".hoodie"):
            continue
        instant = instant_of_file(entry.name)
        if instant is not None and instant not in completed:
            found.append(entry.path)
    return sorted(found)


def verdict(root: Path, expected: list[dict]) -> Verdict:
    from readback import hudi_read

    table = Table.open(str(root / "table"))
    read = hudi_read(root / "table")
    got = read.select(DATA_COLUMNS).to_pylist() if read.num_rows else []
    want = {r["id"]: r for r in expected}
    seen: dict[int, int] = {}
    for r in got:
        seen[r["id"]] = seen.get(r["id"], 0) + 1
    wrong = sum(1 for r in got if r["id"] in want and r != want[r["id"]]) + sum(1 for k in seen if k not in want)
    timeline = table.timeline
    epochs = [int(timeline.commit_metadata(c).extra_metadata.get(EPOCH_KEY, 0)) for c in timeline.completed_writes()]
    return Verdict(
        expected_rows=len(want),
        rows_lost=sum(1 for k in want if k not in seen),
        rows_duplicated=sum(n - 1 for n in seen.values()),
        rows_wrong=wrong,
        files_left_over=leftover_data_files(table),
        pending=[i.timestamp for i in timeline.pending()],
        epoch_regressions=sum(1 for a, b in itertools.pairwise(epochs) if b < a),
    )


def drain(root: Path, args_for_trigger, log_path: Path, timeout: float = 300) -> int:
    """Run the job with the available-now trigger until every landed file is committed; its exit code."""
    job = Job(args_for_trigger("available-now"), log_path).start()
    return job.wait(timeout)
