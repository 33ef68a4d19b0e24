"""The engines ``bench/peers.py`` compares, each run in its own process on the same landing files.

Every engine takes the workload as parquet files in arrival order (``landing/batch-0000.parquet`` is the
initial load, each later file one upsert batch), times the load and each batch from reading the file to the
end of its commit, reads its final table back, and compares it with the expected rows. The peers get each
batch deduplicated by key (highest ``ts``), inside the timed part, since a MERGE or upsert needs unique
source keys; laketide dedupes as part of its micro-batch.

An engine's module is imported only inside its function: pypaimon needs pyarrow < 20, so it runs from
its own environment (``.venv-paimon``, which ``make bench`` makes), where laketide is not installed.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from measure import PeakRss
from upsert_bench import Result, Shape, _matches, dedupe, expected_state, run_delta, run_laketide

KEY, PARTITION = "id", "region"


def landing_files(workdir: Path, max_batches: int | None) -> list[Path]:
    files = sorted((workdir / "landing").glob("batch-*.parquet"))
    return files if max_batches is None else files[: 1 + max_batches]


def warm_read(files: list[Path]) -> None:
    """Read and deduplicate the first landing file once, untimed: a process's first parquet read and first
    Arrow grouping (pyarrow's code paged in, its thread pool started, the file's pages maybe reclaimed since it
    was written) added 0.5 to 2.7 s to delta-rs's timed load when the engines before it had pushed them out,
    which is no engine's work. laketide's job warms its Python workers the same way before its first
    micro-batch (``workers.warm_workers``)."""
    if files:
        dedupe(pq.read_table(files[0]))


def _timed(
    files: list[Path], result: Result, load: Callable[[pa.Table], None], upsert: Callable[[pa.Table], None]
) -> None:
    """Run the load on the first file and ``upsert`` on each later one, timing each from its read."""
    warm_read(files)
    for n, path in enumerate(files):
        started = time.perf_counter()
        batch = dedupe(pq.read_table(path))
        (upsert if n else load)(batch)
        if n:
            result.batch_seconds.append(time.perf_counter() - started)
        else:
            result.load_seconds = time.perf_counter() - started


def _live_size(paths: Iterator[str], result: Result) -> None:
    sizes = [os.path.getsize(p.removeprefix("file://").removeprefix("file:")) for p in paths]
    result.files, result.bytes = len(sizes), sum(sizes)


# -- laketide and delta-rs: the upsert bench's runs ------------------------------------------------


def laketide(table_type: str, catalog_down: bool = False) -> Callable[[Path, Shape, int | None], Result]:
    def run(workdir: Path, shape: Shape, max_batches: int | None) -> Result:
        files = landing_files(workdir, None)  # the job takes every landing file
        conf = tuple(json.loads((workdir / "workload.json").read_text()).get("laketide_conf", ()))
        hung = hung_metastore() if catalog_down else None
        if hung is not None:
            conf += hung[1]
        # the job reads the files in its own processes, warmed by its warm-up job: here only their pages are
        # read in, without Arrow, whose freed memory this process (the job's driver) would keep and be measured with
        for path in files:
            path.read_bytes()
        result = run_laketide(
            workdir, workdir / "landing", lambda: expected_rows(files), 4, table_type, 1, shape, extra=conf
        )
        if hung is not None and not _was_called(hung[0]):
            raise SystemExit("the job never called its catalog: the run says nothing of an outage")
        return result

    return run


def hung_metastore() -> tuple[socket.socket, tuple[str, ...]]:
    """A ``[catalog]`` whose metastore is down the hard way: its port takes connections (the kernel completes them,
    as a metastore's host under a long GC pause or behind a dead load balancer does) and never answers, so every
    sync waits its whole Thrift timeout (a refused port fails one in a millisecond). The caller keeps the socket
    open for the job's run."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    return listener, (
        "catalog.kind=hive",
        f"catalog.uri=thrift://127.0.0.1:{listener.getsockname()[1]}",
        "catalog.database=bench",
    )


def _was_called(listener: socket.socket) -> bool:
    """Whether a connection waits on ``listener`` (the kernel completed it; nobody accepted it)."""
    listener.setblocking(False)
    try:
        listener.accept()[0].close()
    except BlockingIOError:
        return False
    return True


def delta(workdir: Path, shape: Shape, max_batches: int | None) -> Result:
    files = landing_files(workdir, max_batches)
    warm_read(files)
    return run_delta(workdir, (pq.read_table(f) for f in files), lambda: expected_rows(files))


def expected_rows(files: list[Path]) -> pa.Table:
    """The rows a table holds after the batches of ``files``: made after an engine's run, as each checks its
    table, so that its process does not hold them while its memory is measured."""
    return expected_state([pq.read_table(f) for f in files])


# -- DuckLake ----------------------------------------------------------------------------------------


def ducklake(workdir: Path, shape: Shape, max_batches: int | None) -> Result:
    """DuckDB's DuckLake: a catalog in a DuckDB file, data in parquet, ``MERGE INTO`` per batch. The
    extension is loaded from its PyPI package's file, so nothing is downloaded."""
    import duckdb
    import duckdb_extension_ducklake

    extension = glob.glob(
        os.path.join(
            os.path.dirname(duckdb_extension_ducklake.__file__), "extensions", "*", "ducklake.duckdb_extension"
        )
    )[0]
    files = landing_files(workdir, max_batches)
    con = duckdb.connect()
    con.execute(f"LOAD '{extension}'")
    con.execute(f"ATTACH 'ducklake:{workdir}/ducklake.meta' AS lake (DATA_PATH '{workdir}/ducklake-data/')")
    result = Result("DuckLake MERGE", 0.0)

    def load(batch: pa.Table) -> None:
        con.register("src", batch)
        con.execute("CREATE TABLE lake.t AS SELECT * FROM src LIMIT 0")
        con.execute(f"ALTER TABLE lake.t SET PARTITIONED BY ({PARTITION})")
        con.execute("INSERT INTO lake.t SELECT * FROM src")
        con.unregister("src")

    def upsert(batch: pa.Table) -> None:
        con.register("src", batch)
        con.execute(
            f"MERGE INTO lake.t AS t USING src AS s ON t.{KEY} = s.{KEY} AND t.{PARTITION} = s.{PARTITION} "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        con.unregister("src")

    with PeakRss() as rss:
        _timed(files, result, load, upsert)
    result.peak_rss_mb, result.peak_pss_mb = rss.peak / 2**20, rss.peak_pss / 2**20
    live = con.execute("SELECT data_file, delete_file FROM ducklake_list_files('lake', 't')").fetchall()
    _live_size((p for row in live for p in row if p), result)
    got = con.execute("SELECT * FROM lake.t").fetch_arrow_table()
    result.verified = _matches(got, expected_rows(files))
    return result


# -- pypaimon ----------------------------------------------------------------------------------------


def paimon(workdir: Path, shape: Shape, max_batches: int | None) -> Result:
    """A Paimon primary-key table (key and partition, 4 buckets a partition, deduplicate merge engine),
    written by pypaimon's batch writer: one commit per batch, merged on read and by its compaction."""
    from pypaimon import CatalogFactory, Schema

    files = landing_files(workdir, max_batches)
    catalog = CatalogFactory.create({"warehouse": f"file://{workdir}/paimon"})
    catalog.create_database("bench", True)
    schema = Schema.from_pyarrow_schema(
        pq.read_schema(files[0]), partition_keys=[PARTITION], primary_keys=[KEY, PARTITION], options={"bucket": "4"}
    )
    catalog.create_table("bench.t", schema, False)
    table = catalog.get_table("bench.t")
    result = Result("pypaimon (primary key)", 0.0)

    def write(batch: pa.Table) -> None:
        builder = table.new_batch_write_builder()
        writer, commit = builder.new_write(), builder.new_commit()
        writer.write_arrow(batch)
        commit.commit(writer.prepare_commit())
        writer.close()
        commit.close()

    with PeakRss() as rss:
        _timed(files, result, write, write)
    result.peak_rss_mb, result.peak_pss_mb = rss.peak / 2**20, rss.peak_pss / 2**20
    reader = table.new_read_builder()
    splits = reader.new_scan().plan().splits()
    _live_size((f.file_path for split in splits for f in split.files), result)
    got = reader.new_read().to_arrow(splits)
    result.verified = _matches(got, expected_rows(files))
    return result


# -- PyIceberg ---------------------------------------------------------------------------------------


def iceberg(workdir: Path, shape: Shape, max_batches: int | None) -> Result:
    """PyIceberg's ``Table.upsert`` on a table partitioned by identity(region), in a SQLite catalog."""
    from pyiceberg.catalog.sql import SqlCatalog

    files = landing_files(workdir, max_batches)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{workdir}/iceberg.db", warehouse=f"file://{workdir}/iceberg")
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.t", schema=pq.read_schema(files[0]))
    with table.update_spec() as spec:
        spec.add_identity(PARTITION)
    result = Result("PyIceberg upsert", 0.0)
    with PeakRss() as rss:
        _timed(files, result, table.append, lambda batch: table.upsert(batch, join_cols=[KEY]))
    result.peak_rss_mb, result.peak_pss_mb = rss.peak / 2**20, rss.peak_pss / 2**20
    table = catalog.load_table("bench.t")
    _live_size((task.file.file_path for task in table.scan().plan_files()), result)
    result.verified = _matches(table.scan().to_arrow(), expected_rows(files))
    return result


ENGINES: dict[str, Callable[[Path, Shape, int | None], Result]] = {
    "laketide-cow": laketide("COPY_ON_WRITE"),
    "laketide-mor": laketide("MERGE_ON_READ"),
    # with [catalog] set to a metastore that never answers: its ratio to the row above is the catalog's cost
    "laketide-cow-catalog-down": laketide("COPY_ON_WRITE", catalog_down=True),
    "laketide-mor-catalog-down": laketide("MERGE_ON_READ", catalog_down=True),
    "delta-rs": delta,
    "ducklake": ducklake,
    "pypaimon": paimon,
    "pyiceberg": iceberg,
}
