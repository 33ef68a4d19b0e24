from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from fixture_tables import COW_FIXTURES, MOR_FIXTURE, unzip_fixture

# the servers' fixtures (s3, azurite; kafka; a Hive Metastore), for every module that asks for them
pytest_plugins = ["stores", "kafka_broker", "metastore"]

# the classes of a Spark driver JVM, archived by `make test` (tests/support/class_archive.py): each of the suite's
# jobs starts its JVM from it, about 3.5 s sooner
CLASS_ARCHIVE = Path(sys.executable).parents[1] / "spark-classes.jsa"
# The suite's driver JVMs live seconds on small data: the JIT's first tier only (C1) spares them the
# optimizing compiler's threads, which competed with the other test worker for the two cores. A small
# `laketide run` took 9.7 s against 11.8. A long-running job wants the optimizing tier: not for production.
TEST_JVM_OPTS = [
    "-XX:TieredStopAtLevel=1",
    *([f"-XX:SharedArchiveFile={CLASS_ARCHIVE}"] if CLASS_ARCHIVE.exists() else []),
]
os.environ.setdefault("SPARK_SUBMIT_OPTS", " ".join(TEST_JVM_OPTS))


@pytest.fixture(scope="session")
def fixtures_dir(tmp_path_factory) -> Path:
    """Every Spark-written fixture table, unzipped once (read-only use)."""
    root = tmp_path_factory.mktemp("fixtures")
    for name in [*COW_FIXTURES, MOR_FIXTURE]:
        unzip_fixture(name, root)
    return root


@pytest.fixture
def fixture_copy(fixtures_dir, tmp_path):
    """A private, writable copy of one fixture table."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(fixtures_dir / name, dest)
        return dest

    return copy


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test session."""
    from laketide.config import SparkSection
    from laketide.spark.session import spark_session

    session = spark_session(SparkSection(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}))
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A real ZooKeeper server (Debian's package) on a free loopback port, shared by the session."""
    from chaoslib import ZooKeeperServer

    try:
        server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield server.address
    server.stop()


@pytest.fixture
def zookeeper_server(tmp_path_factory):
    """A ZooKeeper server of one test's own, which the test may stop and start again."""
    from chaoslib import ZooKeeperServer

    try:
        server = ZooKeeperServer(tmp_path_factory.mktemp("zk")).start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()


# seconds each test module took (setup, call and teardown, summed on whichever worker ran it): the suite's budget
# is spent by module, since each worker takes a whole module at a time
_MODULE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    module = report.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _MODULE_SECONDS:
        return
    terminalreporter.write_sep("=", "slowest 15 test modules")
    for module, seconds in sorted(_MODULE_SECONDS.items(), key=lambda item: -item[1])[:15]:
        terminalreporter.write_line(f"{seconds:8.1f}s {module}")
