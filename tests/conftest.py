from __future__ import annotations

import os
import shutil
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

# the servers' fixtures (s3, azurite; kafka), for every module that asks for them
pytest_plugins = ["stores", "kafka_broker"]

REPO = Path(__file__).resolve().parents[1]
# the classes of a Spark driver JVM, archived by `make test` (tests/class_archive.py): each of the suite's
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
FIXTURES = Path(os.environ.get("LAKETIDE_FIXTURES", REPO.parent / "shared" / "fixtures"))
SPARK_TABLES = FIXTURES / "hudi-spark-tables"
COW_FIXTURES = [
    "v6_simplekeygen_nonhivestyle",
    "v6_simplekeygen_hivestyle_no_metafields",
    "v8_simplekeygen_nonhivestyle",
]
MOR_FIXTURE = "v6_trips_8i1u"


# tables Apache Hudi 1.x wrote, from hudi-rs's test data (tests/fixtures/hudi-1x/README.md)
HUDI_1X = REPO / "tests" / "fixtures" / "hudi-1x"


def unzip_fixture(name: str, dest: Path) -> Path:
    """Unzip table ``name`` (from the Hudi 1.x corpus, else the Spark-written fixtures) into ``dest``."""
    archive = HUDI_1X / f"{name}.zip"
    if not archive.exists():
        archive = SPARK_TABLES / f"{name}.zip"
    if not archive.exists():
        raise FileNotFoundError(f"fixture {archive} is missing; set LAKETIDE_FIXTURES to the fixtures folder")
    with zipfile.ZipFile(archive) as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX")]
        zf.extractall(dest, members)
    return dest / name


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


def hudi_read(path: Path | str, as_of: str | None = None, start: str | None = None, end: str | None = None) -> pa.Table:
    """Read a table with hudi-rs, the reference reader."""
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(str(Path(path).resolve())).build()
    options = HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    if start is not None or end is not None:
        options = options.with_query_type(HudiQueryType.Incremental)
        if start is not None:
            options = options.with_start_timestamp(start)
        if end is not None:
            options = options.with_end_timestamp(end)
    batches = table.read(options)
    return pa.Table.from_batches(batches) if batches else pa.table({})


def rows(table: pa.Table, key: str, columns: list[str] | None = None) -> list[dict]:
    """Rows as dicts sorted by ``key``, for row-by-row comparison.

    Ties (one key in two partitions of a non-global index) are broken by the whole row, so two reads of the
    same rows always compare equal whatever order the reader returned them in.
    """
    if table.num_rows == 0:
        return []
    if columns is not None:
        table = table.select(columns)
    return sorted(table.to_pylist(), key=lambda r: (r[key], repr(sorted(r.items()))))


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
