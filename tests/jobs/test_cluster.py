"""The cluster route: a Spark standalone master and worker on loopback, from the pyspark wheel.

The job goes through ``deploy/spark-submit.sh`` on Spark's tasks, with executors whose Python does
not have laketide installed: laketide reaches them only as the ``.zip`` in ``--py-files``. The master's
JSON must list the application, the executors must be told the driver host the user passed, and a
setting passed to spark-submit (shuffle partitions) must reach the session. The table is then read
through hudi-rs and through ``spark.read.format("laketide")`` on the same executors.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pyspark
import pytest
from chaoslib import free_port, job_args, wait_until
from fixture_tables import REPO, SUPPORT
from readback import hudi_read, rows
from streaming import BATCHES, DATA_COLUMNS, expected_after, land_all

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
VENV = Path(sys.executable).parents[1]
DRIVER_HOST = "localhost"  # not the loopback address laketide's own defaults would give


class StandaloneCluster:
    """One master and one worker, each a process of this test, stopped by it."""

    def __init__(self, root: Path):
        self.root = root
        self.port, self.ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        self.procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, *args: str) -> None:
        env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_HOME": str(SPARK_CLASS.parents[1]),
            "SPARK_NO_DAEMONIZE": "1",
        }
        with open(self.root / f"{name}.log", "w") as log:
            self.procs.append(
                subprocess.Popen(
                    [str(SPARK_CLASS), *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            )

    def start(self) -> StandaloneCluster:
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        wait_until(self._master_up, 90, "the Spark master")
        # the port asked for may have been taken meanwhile (the master then binds the next one): its own word
        self.port = int(self.state()["url"].rsplit(":", 1)[1])
        work = self.root / "work"
        work.mkdir()
        self._start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--webui-port",
            str(self.worker_ui_port),
            "--cores",
            "2",
            "--memory",
            "2G",
            "--work-dir",
            str(work),
            self.url,
        )
        wait_until(lambda: self.state().get("aliveworkers", 0) >= 1, 90, "a worker registered with the master")
        return self

    def _master_up(self) -> bool:
        try:
            self.state()
            return True
        except (httpx.HTTPError, ValueError):  # not listening yet, or its web UI answering 404 while it starts
            return False

    def state(self) -> dict:
        return httpx.get(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5).json()

    def executor_logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in (self.root / "work").rglob("stderr"))

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = StandaloneCluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()  # also when it failed to start: its master and worker are already running


def _executor_python(root: Path) -> tuple[Path, Path]:
    """A Python for the executors with laketide's dependencies but not laketide, behind a wrapper that
    records each start, so the test sees which interpreter Spark's tasks ran."""
    venv = root / "executor-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    deps = next((VENV / "lib").glob("python3*/site-packages"))
    (site / "laketide_dependencies.pth").write_text(
        f"{deps}\n"
    )  # a plain path: the editable finder there is not loaded
    found = subprocess.run([str(venv / "bin" / "python"), "-c", "import laketide"], capture_output=True, text=True)
    assert found.returncode != 0, "the executors' Python must not have laketide"
    starts = root / "executor-python.starts"
    wrapper = root / "executor-python"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {starts}\nexec {venv / "bin" / "python"} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, starts


def _submit_env(executor_python: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "VENV": str(VENV),
        "PYSPARK_PYTHON": str(executor_python),
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_SUBMIT_ARGS": f"--conf spark.driver.host={DRIVER_HOST} --conf spark.sql.shuffle.partitions=3 "
        "--executor-memory 1g --total-executor-cores 2",
    }
    env.pop("SPARK_LOCAL_IP", None)
    return env


def _submit_on_tasks(
    cluster: StandaloneCluster, tmp_path: Path, settings: dict
) -> tuple[subprocess.CompletedProcess, Path]:
    """``settings`` run available-now through spark-submit, every micro-batch on Spark's tasks; and the file that
    names each start of the executors' Python."""
    settings = {
        "stream.checkpoint": tmp_path / "checkpoint",
        "stream.trigger": "available-now",
        "write.driver_batch_bytes": 0,
        "write.index_shards": 2,
        "write.parallelism": 2,
        **settings,
    }
    executor_python, starts = _executor_python(tmp_path)
    conf = [a for k, v in settings.items() for a in ("--conf", f"{k}={v}")]
    return _submit(cluster, conf, _submit_env(executor_python)), starts


def _submit(cluster: StandaloneCluster, conf: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["bash", str(REPO / "deploy" / "spark-submit.sh"), "--master", cluster.url, *conf],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def test_the_job_runs_on_a_standalone_cluster_through_spark_submit(cluster, tmp_path):
    land_all(tmp_path)
    executor_python, starts = _executor_python(tmp_path)
    conf = job_args(tmp_path, extra=["write.driver_batch_bytes=0"])[2:]  # Spark's tasks write every micro-batch
    env = _submit_env(executor_python)
    result = _submit(cluster, conf, env)
    assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after(BATCHES)
    assert "on tasks" in result.stdout
    assert (
        f"master {cluster.url}, driver {DRIVER_HOST}:" in result.stdout and "3 shuffle partitions" in result.stdout
    ), result.stdout[-3000:]

    apps = cluster.state()["completedapps"] + cluster.state()["activeapps"]
    assert [a["name"] for a in apps] == ["laketide"], "the application ran on the standalone master"
    assert f"CoarseGrainedScheduler@{DRIVER_HOST}:" in cluster.executor_logs(), (
        "executors were told the driver host the user set"
    )
    assert "pyspark.daemon" in starts.read_text(), "Spark's tasks ran on the executors' Python"

    # the table read back on the same executors, through laketide's Spark source
    starts.write_text("")
    out = tmp_path / "read.parquet"
    read = subprocess.run(
        [
            str(VENV / "bin" / "spark-submit"),
            "--master",
            cluster.url,
            "--py-files",
            str(_package()),
            "--conf",
            f"spark.driver.host={DRIVER_HOST}",
            "--executor-memory",
            "1g",
            str(SUPPORT / "cluster_read.py"),
            str(tmp_path / "table"),
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert read.returncode == 0, read.stderr[-4000:]
    assert rows(pq.read_table(out), "id", DATA_COLUMNS) == expected_after(BATCHES)
    assert "pyspark.daemon" in starts.read_text(), "the source's read tasks ran on the executors' Python"


def test_a_debezium_feed_runs_on_the_cluster_through_spark_submit(cluster, tmp_path):
    """Postgres change events with their schema, in landing files of JSON lines, decoded in the executors' tasks
    (where laketide is only the ``--py-files`` zip): every logical type, columns from the events, partition
    moves, key-only deletes and TOAST placeholders, two micro-batches; read back by hudi-rs."""
    from connect_events import NAMES, TOAST, PostgresTable, sample_row

    landing = tmp_path / "landing"
    landing.mkdir()
    source = PostgresTable()
    first = [source.upsert(sample_row(i, 0), op="r") for i in range(20)]
    second = [source.upsert(sample_row(i, 1, region="moved")) for i in range(0, 20, 3)] + [
        source.delete(i) for i in range(1, 20, 5)
    ]
    second += [source.upsert(sample_row(i, 2), unchanged=("name", "doc", "blob")) for i in (2, 8, 9)]
    for name, events in (("0001.json", first), ("0002.json", second)):
        (landing / name).write_text("".join(json.dumps(e) + "\n" for e in events))
    settings = {
        "table.path": tmp_path / "table",
        "table.name": "orders",
        "table.record_key": '["id"]',
        "table.partition_by": '["region"]',
        "source.format": "json",
        "source.path": landing,
        "source.envelope": "debezium",
        "source.max_files_per_trigger": 1,
    }
    result, starts = _submit_on_tasks(cluster, tmp_path, settings)
    assert result.stdout.count(" on tasks ") == 2 and "pyspark.daemon" in starts.read_text()
    read = rows(hudi_read(tmp_path / "table"), "id", NAMES)
    for r in read:  # columns from the events: a VariableScaleDecimal is its exact text
        r["seen_at"], r["created_at"], r["updated_ms"] = (
            r[n].astimezone(dt.UTC) for n in ("seen_at", "created_at", "updated_ms")
        )
    want = [
        {**r, "price": str(r["price"]), **{n: r[n].astimezone(dt.UTC) for n in ("seen_at", "created_at", "updated_ms")}}
        for r in source.expected(NAMES)
    ]
    assert read == want and not any(TOAST in str(v) for r in read for v in r.values())


def test_a_database_snapshot_runs_on_the_cluster_through_spark_submit(cluster, kafka, tmp_path):
    """A whole database's snapshot from Kafka (Tansu), too big for the driver (``write.driver_batch_bytes = 0``):
    split by table and written by the executors' tasks, where laketide is only the ``--py-files`` zip; each table
    equal to its source, one instant each."""
    from connect_events import POSTGRES_COLUMNS, PostgresTable, sample_row

    sources = [
        PostgresTable(columns=[c for c in POSTGRES_COLUMNS if c.name in names], table=table, lsn=lsn)
        for table, names, lsn in (
            ("orders", ("id", "name", "region", "amount", "created_at"), 1_000),
            ("customers", ("id", "name", "active", "ratio", "seen_at"), 50_000),
        )
    ]
    for source in sources:
        kafka.create_topic(source.topic, 3)
        for i in range(200):
            row = {k: v for k, v in sample_row(i, 0).items() if k in {c.name for c in source.columns}}
            kafka.produce(source.topic, i % 3, source.kafka_key(row), source.upsert(row, op="r"))
    settings = {
        "table.path": f"{tmp_path}/lake/{{table}}",
        "source.format": "kafka",
        "source.envelope": "debezium",
        "source.kafka.bootstrap_servers": kafka.bootstrap,
        "source.kafka.topic_pattern": r"pg\..*",
    }
    result, starts = _submit_on_tasks(cluster, tmp_path, settings)
    assert "written by Spark's tasks" in result.stdout + result.stderr and "pyspark.daemon" in starts.read_text()
    for source in sources:
        names = [c.name for c in source.columns]
        read = rows(hudi_read(tmp_path / "lake" / source.table), "id", names)
        want = source.expected(names)
        assert len(read) == len(want) == 200, source.table
        assert [(r["id"], r["name"]) for r in read] == [(r["id"], r["name"]) for r in want], source.table


def _package() -> Path:
    return max((REPO / "dist").glob("laketide-*.zip"), key=lambda p: p.stat().st_mtime)


def test_python_m_laketide_runs_the_job_from_an_installed_wheel(tmp_path):
    """The wheel's own entry point: ``python -m laketide run``, in a venv that has the wheel and nothing of the
    checkout."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(REPO)], check=True
    )
    wheel = next((tmp_path / "dist").glob("laketide-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)], check=True
    )
    deps = next((VENV / "lib").glob("python3*/site-packages"))
    (site / "laketide_dependencies.pth").write_text(f"{deps}\n")
    python = venv / "bin" / "python"
    where = subprocess.run(
        [str(python), "-c", "import laketide; print(laketide.__file__)"], capture_output=True, text=True, check=True
    )
    assert where.stdout.startswith(str(site)), where.stdout
    land_all(tmp_path)
    conf = job_args(tmp_path)[2:]
    result = subprocess.run(
        [str(python), "-m", "laketide", "run", *conf],
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after(BATCHES)
