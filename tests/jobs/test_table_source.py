"""laketide tables as a Spark source, batch and streaming, checked against hudi-rs."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixture_tables import REPO
from readback import hudi_read, rows
from streaming import DATA_COLUMNS, job_config, land_all
from writes import HISTORY_SCHEMA, rewritten_history, upsert

from laketide.spark.job import run
from laketide.spark.table_source import LaketideDataSource
from laketide.table import Table

COLUMNS = ["id", "v", "region"]


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    spark.dataSource.register(LaketideDataSource)


def _spark_rows(df, columns) -> list[dict]:
    return rows(pa.Table.from_pandas(df.toPandas(), preserve_index=False), "id", columns)


def test_batch_reads_snapshot_time_travel_and_changes(spark, tmp_path):
    table, _coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=3)
    lease.release()
    source = spark.read.format("laketide")
    assert _spark_rows(source.load(table.uri), COLUMNS) == reads[instants[-1]]
    assert _spark_rows(source.option("as_of", instants[0]).load(table.uri), COLUMNS) == reads[instants[0]]
    changes = source.option("start", instants[0]).option("end", instants[1]).load(table.uri)
    assert _spark_rows(changes, COLUMNS) == rows(
        hudi_read(table.uri, start=instants[0], end=instants[1]), "id", COLUMNS
    )
    assert source.load(table.uri).columns[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]


def test_a_version_8_table_reads_through_the_source_as_hudi_rs_reads_it(spark, tmp_path):
    """Snapshot, time travel and an incremental read of a version 8 table (its commits ordered by completion time)."""
    import laketide

    path = str(tmp_path / "v8")
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string())])
    settings = {"table": {"version": 8}, "write": {"parallelism": 2, "index_shards": 2}}
    for n in range(3):
        data = pa.Table.from_pylist([{"id": i, "v": n, "region": ("us", "eu")[i % 2]} for i in range(n, 12)], schema)
        laketide.write(path, data, record_key="id", partition_by="region", settings=settings)
    writes = [i.timestamp for i in Table.open(path).timeline.completed_writes()]
    source = spark.read.format("laketide")
    assert _spark_rows(source.load(path), COLUMNS) == rows(hudi_read(path), "id", COLUMNS)
    assert _spark_rows(source.option("as_of", writes[0]).load(path), COLUMNS) == rows(
        hudi_read(path, as_of=writes[0]), "id", COLUMNS
    )
    changes = source.option("start", writes[0]).option("end", writes[2]).load(path)
    assert _spark_rows(changes, COLUMNS) == rows(hudi_read(path, start=writes[0], end=writes[2]), "id", COLUMNS)


def _drain(spark, uri: str, checkpoint, sink, **options) -> None:
    reader = spark.readStream.format("laketide")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load(uri)
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(sink))
    )
    query.awaitTermination(300)
    assert query.exception() is None


def _sink_by_commit(sink) -> dict[str, list[dict]]:
    files = list(sink.glob("*.parquet"))
    data = (
        pa.concat_tables([pq.read_table(f) for f in files])
        if files
        else pa.table({"_hoodie_commit_time": pa.array([], pa.string())})
    )
    out: dict[str, list[dict]] = {}
    for commit in sorted(set(data["_hoodie_commit_time"].to_pylist())):
        part = data.filter(pa.compute.equal(data["_hoodie_commit_time"], commit))
        out[commit] = rows(part, "id", DATA_COLUMNS)
    return out


def test_a_downstream_query_reads_each_change_once_across_restarts_of_both(spark, tmp_path):
    """Upstream: the laketide job over three landing files, failing once after a begin (its instant is
    rolled back) and restarted. Downstream: a streaming read of the table, one commit per micro-batch,
    into a parquet sink, run before, beside and after the upstream restart."""
    land_all(tmp_path)
    path = tmp_path / "table"
    downstream, sink = tmp_path / "downstream-checkpoint", tmp_path / "sink"

    def failing(point, batch_id):
        if (point, batch_id) == ("begun", 2):
            raise RuntimeError("upstream dies after beginning micro-batch 2")

    with pytest.raises(Exception, match="upstream dies"):
        run(job_config(tmp_path), failing)
    _drain(spark, str(path), downstream, sink, max_instants_per_trigger="1")
    first = _sink_by_commit(sink)
    assert len(first) == 2, "the two commits before the failure; the rolled-back instant is never read"
    # restarted, the downstream query polls while the restarted upstream job writes
    query = (
        spark.readStream.format("laketide")
        .option("max_instants_per_trigger", "1")
        .load(str(path))
        .writeStream.format("parquet")
        .option("checkpointLocation", str(downstream))
        .trigger(processingTime="200 milliseconds")
        .start(str(sink))
    )
    try:
        run(job_config(tmp_path))
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None

    table = Table.open(str(path))
    commits = [i.timestamp for i in table.timeline.completed_writes()]
    assert len(commits) == 3
    got = _sink_by_commit(sink)
    assert list(got) == commits, "every commit once, none repeated across the restarts"
    # the first micro-batch from "earliest" is the table as of the first commit; then each commit's changes
    assert got[commits[0]] == rows(hudi_read(path, as_of=commits[0]), "id", DATA_COLUMNS)
    for previous, commit in itertools.pairwise(commits):
        assert got[commit] == rows(hudi_read(path, start=previous, end=commit), "id", DATA_COLUMNS), commit
    assert sum(len(v) for v in got.values()) == sum(len(v) for v in first.values()) + len(got[commits[2]])


def test_start_latest_and_a_window_older_than_the_active_timeline(spark, tmp_path):
    from laketide.coordinator.archiver import Archiver
    from laketide.coordinator.cleaner import Cleaner
    from laketide.table.format.clean import Retention

    table, coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=6)
    _drain(spark, table.uri, tmp_path / "cp-latest", tmp_path / "sink-latest", start="latest")
    instants.append(upsert(table, coordinator, 6, [{"id": 100, "v": 6, "region": "us"}], HISTORY_SCHEMA))
    _drain(spark, table.uri, tmp_path / "cp-latest", tmp_path / "sink-latest", start="latest")
    got = pq.read_table(tmp_path / "sink-latest")
    assert got["id"].to_pylist() == [100], "start=latest reads only what is committed after the query began"

    Cleaner(coordinator, Retention(commits=2)).clean()
    Archiver(coordinator, 2, 3).archive()
    lease.release()
    assert Table.open(table.uri).timeline.start > instants[1]
    with pytest.raises(Exception, match="fallback_to_full_scan"):
        _drain(spark, table.uri, tmp_path / "cp-old", tmp_path / "sink-old", start=instants[0])
    _drain(
        spark, table.uri, tmp_path / "cp-full", tmp_path / "sink-full", start=instants[0], fallback_to_full_scan="true"
    )
    full = rows(pq.read_table(tmp_path / "sink-full"), "id", COLUMNS)
    assert full == rows(hudi_read(table.uri), "id", COLUMNS), "the whole table once, as of the window's end"


def test_an_installed_laketide_is_found_by_spark_without_registration():
    """Spark registers every installed ``pyspark_*`` module's ``DefaultSource``
    (pyspark.sql.worker.lookup_data_sources);
    a wheel installs ``pyspark_laketide`` at the top level of site-packages, as ``src/`` holds it."""
    import subprocess
    import sys

    src = REPO / "src"
    probe = (
        "import pkgutil, importlib; "
        f"found = {{m.name: importlib.import_module(m.name) for m in pkgutil.iter_modules([{str(src)!r}]) if "
        "m.name.startswith('pyspark_')}; "
        "print(sorted((n, m.DefaultSource.name(), m.DefaultSource.__name__) for n, m in found.items()))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[('pyspark_laketide', 'laketide', 'LaketideDataSource')]"
