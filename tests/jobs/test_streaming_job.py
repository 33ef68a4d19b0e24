"""The real streaming job on a landing directory of JSON files, read back by hudi-rs."""

from __future__ import annotations

import posixpath

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from readback import hudi_read, rows
from streaming import BAD_ROWS, BATCHES, DATA_COLUMNS, expected_after, job_config, land_all

from laketide.spark.job import run
from laketide.spark.pipeline import MicroBatchReader
from laketide.table import Table
from laketide.table.format.files import parse_data_file
from laketide.writer.exchange import Exchange


# the driver writes these small micro-batches itself by default; with no driver budget, Spark's tasks do
@pytest.fixture(scope="module", params=["driver", "tasks"])
def job_run(spark, tmp_path_factory, request):
    root = tmp_path_factory.mktemp("stream")
    land_all(root)
    writer = run(job_config(root, **({} if request.param == "driver" else {"write__driver_batch_bytes": 0})))
    assert {r.ran_on for r in writer.status.recent} == {request.param}
    return root, writer


def test_final_rows_match_the_model(job_run):
    root, _writer = job_run
    table = hudi_read(root / "table")
    assert rows(table, "id", DATA_COLUMNS) == expected_after(BATCHES)
    assert len(set(table["_hoodie_record_key"].to_pylist())) == table.num_rows


def test_each_file_was_one_micro_batch_with_progress(job_run):
    _root, writer = job_run
    reports = writer.status.recent
    assert [r.batch_id for r in reports] == [0, 1, 2]
    assert reports[0].inserts == 30 and reports[0].updates == 0
    assert reports[1].deletes == 2 and reports[1].quarantined == BAD_ROWS
    assert all(r.files > 0 and r.seconds > 0 for r in reports)
    # where each micro-batch's time went: driver steps, and the Python seconds of the Spark stages' tasks
    for r in reports:
        assert {"read", "plan", "write", "commit"} <= set(r.stage_seconds)
        assert r.stage_seconds["prepare_tasks"] > 0 and r.stage_seconds["write_tasks"] > 0
        assert sum(v for k, v in r.stage_seconds.items() if not k.endswith("_tasks")) <= r.seconds + 0.01
    assert "write_tasks=" in reports[0].line()
    # the first micro-batch loads an empty table: nothing to look up, so no assign stage (written as a bulk insert)
    assert "assign_tasks" not in reports[0].stage_seconds
    assert all(r.stage_seconds["assign_tasks"] > 0 for r in reports[1:])


def test_the_first_micro_batch_is_cut_into_key_ranges_over_the_write_tasks(job_run):
    """Two partitions (eu, us) in a load written by two write tasks: each task takes one range of
    (partition, key), so both wrote files (had no part carried a sample of its keys, one task took all)."""
    root, _ = job_run
    timeline = Table.open(str(root / "table")).timeline
    first = timeline.completed_writes()[0]
    tasks = {
        parse_data_file(*posixpath.split(s.path)).write_token.split("-")[0]
        for s in timeline.commit_metadata(first).write_stats()
    }
    assert tasks == {"0", "1"}


def test_bad_rows_are_quarantined_with_reasons(job_run):
    root, _ = job_run
    quarantine = pq.read_table(root / "table_quarantine")
    reasons = sorted(quarantine["reason"].to_pylist())
    assert len(reasons) == BAD_ROWS
    assert "malformed record (not valid JSON)" in reasons
    assert "record key field 'id' is null or empty" in reasons
    assert any(r.startswith("ordering field 'ts'") for r in reasons)
    assert "partition value of 'region' would be the directory '.' or '..'" in reasons
    raws = quarantine["raw"].to_pylist()
    assert "{not json" in raws and any('"abc"' in r for r in raws)
    assert set(quarantine["batch_id"].to_pylist()) == {1}


def test_time_travel_to_each_micro_batch(job_run):
    root, _ = job_run
    from laketide.table import Table

    commits = Table.open(str(root / "table")).timeline.completed_writes()
    assert len(commits) == 3
    for n, commit in enumerate(commits):
        assert rows(hudi_read(root / "table", as_of=commit.timestamp), "id", DATA_COLUMNS) == expected_after(
            BATCHES[: n + 1]
        )


def test_lost_checkpoint_does_not_duplicate(job_run, tmp_path):
    root, _ = job_run
    config = job_config(root, stream__checkpoint=str(tmp_path / "fresh-checkpoint"))
    run(config)  # replays every landed file as new batches of a new writer
    table = hudi_read(root / "table")
    assert len(set(table["_hoodie_record_key"].to_pylist())) == table.num_rows
    assert rows(table, "id", DATA_COLUMNS) == expected_after(BATCHES)
    # the index routed every replayed key to its file group: no new file group for old keys
    groups = pc.unique(table["_hoodie_file_name"]).to_pylist()
    assert len({g.split("_")[0] for g in groups}) <= 2 * 3 * 2


def test_time_travel_by_a_readable_timestamp(job_run):
    root, _ = job_run
    table = Table.open(str(root / "table"))
    first = table.timeline.completed_writes()[0].timestamp
    readable = f"{first[:4]}-{first[4:6]}-{first[6:8]} {first[8:10]}:{first[10:12]}:{first[12:14]}.{first[14:]}"
    then = table.snapshot(as_of=readable)
    assert then.num_rows == table.snapshot(as_of=first).num_rows == len(expected_after(BATCHES[:1]))
    with pytest.raises(ValueError, match="not a point in time"):
        table.snapshot(as_of="last tuesday")


@pytest.mark.parametrize("on_disk", [True, False], ids=["disk", "object-store"])
def test_rows_kept_whole_for_a_bulk_insert_the_plan_did_not_make_are_cut_by_shard(
    spark, tmp_path, monkeypatch, on_disk
):
    """The job hands the first micro-batch of an empty table on whole, for a bulk insert; should the table
    have filled by the plan (another writer), the rows are cut by shard then. Here every micro-batch is
    laid out so, the exchange on a disk or taken for an object store's."""
    monkeypatch.setattr(MicroBatchReader, "_bulk_inserted", lambda self: True)
    monkeypatch.setattr(Exchange, "on_disk", property(lambda self: on_disk))
    land_all(tmp_path)
    writer = run(job_config(tmp_path, write__driver_batch_bytes=0))
    assert all(r.stage_seconds["assign_tasks"] > 0 for r in writer.status.recent[1:])
    assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after(BATCHES)
    assert not list((tmp_path / "table" / ".hoodie" / ".laketide" / "exchange").iterdir()), (
        "each micro-batch deletes its exchange files"
    )


def test_sparks_python_workers_allocate_arrow_memory_with_the_c_librarys_malloc(spark):
    """The session sets the workers' Arrow memory pool (``session.WANTED``): on pyarrow's default, a fresh
    worker's first large micro-batch ran far slower."""
    names = (
        spark.sparkContext.parallelize(range(2), 2)
        .map(lambda _: __import__("pyarrow").default_memory_pool().backend_name)
        .collect()
    )
    assert names == ["system", "system"]


def test_the_driver_allocates_arrow_memory_with_the_c_librarys_malloc(spark):
    """The job owns its driver process, and takes the C library's malloc for it (``session._use_driver_pool``;
    ``laketide run`` sets the same through ``ARROW_DEFAULT_MEMORY_POOL``): on pyarrow's default mimalloc a 1M-row load
    on the driver spent most of its time in the kernel."""
    import pyarrow as pa

    assert pa.default_memory_pool().backend_name == "system"


def test_a_task_gives_the_memory_it_freed_back_to_the_system(spark):
    """A Python worker outlives its tasks: what a task's Arrow tables held leaves the worker at the task's end
    (``workers.give_back_memory``), not at the worker's."""

    def held_after(give_back: bool) -> int:
        def task(_):
            import numpy as np
            import pyarrow as pa

            from laketide.spark.workers import give_back_memory

            def rss() -> int:
                with open("/proc/self/statm") as statm:
                    return int(statm.read().split()[1]) * 4096

            def hold_and_free() -> None:
                # many small buffers, as a task's batches are: each below the size malloc maps on its own
                tables = [pa.table({"v": pa.array(np.arange(n, n + 8_000))}) for n in range(4_000)]
                del tables

            hold_and_free()  # once before measuring: the code it runs is paged in
            give_back_memory()
            before = rss()
            hold_and_free()
            if give_back:
                give_back_memory()
            yield rss() - before

        return spark.sparkContext.parallelize([0], 1).mapPartitions(task).collect()[0]

    kept, given_back = held_after(give_back=False), held_after(give_back=True)
    assert given_back < 16 * 2**20 < 128 * 2**20 < kept, (kept, given_back)


def test_a_log_entry_a_kill_left_half_written_does_not_stop_the_next_start(tmp_path):
    """Spark writes each entry of the query's offset and commit logs to a temporary file and renames it; a job
    killed between the two leaves the temporary file (seen after a kill -9 in the first micro-batch), and Spark
    refuses to start a query whose log holds no batch beside it ("offsets should be empty on batch 0"). The next
    job clears such files before its query starts."""
    from streaming import land

    land(tmp_path, "batch-000.json", [{"id": 1, "name": "a", "amount": 1.0, "ts": 1, "region": "eu"}], 1_700_000_000)
    checkpoint = tmp_path / "checkpoint"
    for folder in ("offsets", "commits", "sources/0"):
        (checkpoint / folder).mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id":"d298cb4b-2c3b-47f5-bc45-b157938d2263"}')
    left = [
        checkpoint / "offsets" / ".0.569938aa-b1e4-4b86-8ec5-ac9bebc6c400.tmp",
        checkpoint / "offsets" / "..0.5.tmp.crc",
    ]
    for path in left:
        path.write_bytes(b"")
    run(job_config(tmp_path))
    assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == [
        {"id": 1, "name": "a", "amount": 1.0, "ts": 1, "region": "eu"}
    ]
    assert not any(path.exists() for path in left)
