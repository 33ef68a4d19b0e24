"""Merge-on-read: our reader against hudi-rs on Spark-written logs, and MOR tables the job writes."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixture_tables import FIXTURES, MOR_FIXTURE
from readback import hudi_read, rows
from streaming import BATCHES, DATA_COLUMNS, expected_after, job_config, land, land_all, row

from laketide.spark.job import run
from laketide.table import Table
from laketide.table.format.files import BaseFile, LogFile
from laketide.table.format.logfile import BlockType, Header, data_block_rows, deleted_records, read_blocks
from laketide.table.format.properties import TableConfig
from laketide.table.format.schema import RECORD_KEY, schema_from_avro, storage_schema
from laketide.table.format.view import FileSlice
from laketide.table.reading.slice_reader import MergeRule, merge_slice

LOG_FIXTURES = FIXTURES / "hudi-log-files"


def test_spark_mor_fixture_reads_as_hudi_rs(fixtures_dir):
    path = fixtures_dir / MOR_FIXTURE
    table = Table.open(str(path))
    assert [i.action for i in table.timeline.completed_writes()] == ["deltacommit", "deltacommit"]
    assert any(s.log_files for s in table.file_system_view().latest_slices())
    theirs = hudi_read(path)
    ours = table.snapshot()
    assert rows(ours, "uuid", theirs.column_names) == rows(theirs, "uuid")
    for instant in table.timeline.completed_writes():
        assert rows(table.snapshot(instant.timestamp), "uuid", theirs.column_names) == rows(
            hudi_read(path, as_of=instant.timestamp), "uuid"
        )


def _fixture_slice(tmp_path, log_name: str, base_rows: pa.Table) -> tuple[Table, FileSlice]:
    """A one-group table holding ``base_rows`` as its base file and a fixture log file on it."""
    table = Table.create_from_config(
        str(tmp_path),
        TableConfig(
            name="t",
            table_type="MERGE_ON_READ",
            record_key_fields=["uuid"],
            partition_fields=["city"],
            ordering_field="ts",
        ),
    )
    base = BaseFile("", "ee2ace10-7667-40f5-9848-0a144b5ea064-0", "0-1-2", "20250101000000000")
    pq.write_table(base_rows, tmp_path / base.name)
    log = LogFile("", base.file_id, base.instant_time, 1, "0-21-30")
    shutil.copy(LOG_FIXTURES / log_name, tmp_path / log.name)
    return table, FileSlice("", base.file_id, base.instant_time, base, [log])


def _fixture_records() -> pa.Table:
    block = next(read_blocks((LOG_FIXTURES / "valid_log_parquet_data.log").read_bytes()))
    return data_block_rows(block)


@pytest.mark.parametrize("log_name", ["valid_log_avro_data.log", "valid_log_parquet_data.log", "valid_log_delete.log"])
def test_log_file_fixtures_merge_as_hudi_rs(tmp_path, log_name):
    from hudi import HudiFileGroupReader

    block = next(read_blocks((LOG_FIXTURES / log_name).read_bytes()))
    schema = storage_schema(schema_from_avro(block.header[Header.SCHEMA]))
    # under a data block, a stored copy of each record with a lower ts; under the delete block, the records it deletes
    stored = _fixture_records().cast(schema)
    if block.block_type == BlockType.DELETE_BLOCK:
        keys = [key for key, _, _ in deleted_records(block)] + ["kept-by-the-delete-block"]
        stored = pa.concat_tables([stored] * len(keys))
        for column in (RECORD_KEY, "uuid"):
            stored = stored.set_column(stored.schema.get_field_index(column), column, pa.array(keys))
    else:
        stored = stored.set_column(
            stored.schema.get_field_index("ts"), "ts", pa.array([0] * stored.num_rows, pa.int64())
        )
        stored = stored.set_column(stored.schema.get_field_index("rider"), "rider", pa.array(["old"] * stored.num_rows))
    table, fs = _fixture_slice(tmp_path, log_name, stored)
    ours = merge_slice(table.io, fs, lambda instant: True, MergeRule("ts"))
    theirs = pa.Table.from_batches(
        [HudiFileGroupReader(str(tmp_path)).read_file_slice_from_paths(fs.base_file.name, [fs.log_files[0].name])]
    )
    assert rows(ours, RECORD_KEY, theirs.column_names) == rows(theirs, RECORD_KEY)
    if block.block_type == BlockType.DELETE_BLOCK:
        assert ours[RECORD_KEY].to_pylist() == ["kept-by-the-delete-block"]
    else:
        assert ours.num_rows >= 1 and "old" not in ours["rider"].to_pylist()


@pytest.fixture(scope="module")
def mor_run(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("mor")
    land_all(root)
    writer = run(job_config(root, table__type="MERGE_ON_READ"))
    return root, writer


def test_mor_job_writes_deltacommits_that_hudi_rs_reads_as_the_model(mor_run):
    root, writer = mor_run
    table = Table.open(str(root / "table"))
    assert table.config.table_type == "MERGE_ON_READ"
    instants = table.timeline.completed_writes()
    assert [i.action for i in instants] == ["deltacommit"] * 3
    slices = table.file_system_view().latest_slices()
    # updates and deletes went to log files; every base file is still the one its group started with
    assert sum(len(s.log_files) for s in slices) >= 3
    assert all(s.base_file.instant_time == s.base_instant for s in slices)
    for n, instant in enumerate(instants, start=1):
        expected = expected_after(BATCHES[:n])
        assert rows(hudi_read(root / "table", as_of=instant.timestamp), "id", DATA_COLUMNS) == expected, instant
        assert rows(table.snapshot(instant.timestamp), "id", DATA_COLUMNS) == expected, instant
    reports = [r for r in writer.status.recent if not r.skipped]
    assert reports[1].updates == 10 and reports[1].deletes == 2 and reports[1].inserts == 1


def test_mor_incremental_reads_match_hudi_rs(mor_run):
    root, _ = mor_run
    table = Table.open(str(root / "table"))
    points = ["19700101000000000"] + [i.timestamp for i in table.timeline.completed_writes()]
    for i, start in enumerate(points):
        for end in points[i + 1 :]:
            theirs = hudi_read(root / "table", start=start, end=end)
            assert rows(table.incremental(start, end), "id", DATA_COLUMNS) == rows(theirs, "id", DATA_COLUMNS), (
                start,
                end,
            )


def test_read_optimized_reads_base_files_only(mor_run):
    root, _ = mor_run
    table = Table.open(str(root / "table"))
    first = expected_after(BATCHES[:1])
    # nothing compacted yet: the base files hold the first micro-batch plus later inserts into new groups
    optimized = {r["id"]: r for r in rows(table.read_optimized(), "id", DATA_COLUMNS)}
    assert all(optimized[r["id"]] == r for r in first)


def test_rolling_back_deltacommits_deletes_only_their_log_files(mor_run, tmp_path):
    from commands import laketide

    root, _ = mor_run
    copy = tmp_path / "table"
    shutil.copytree(root / "table", copy)
    table = Table.open(str(copy))
    first, middle, last = [i.timestamp for i in table.timeline.completed_writes()]
    logs_before = {lf.path for s in table.file_system_view().latest_slices() for lf in s.log_files}
    logs_of = {
        i: {s.path for s in table.timeline.commit_metadata(i).write_stats() if ".log." in s.path}
        for i in table.timeline.completed_writes()
    }
    logs_of = {i.timestamp: paths for i, paths in logs_of.items()}
    assert logs_of[middle] and logs_of[last] and logs_before == logs_of[middle] | logs_of[last]

    code, out, err = laketide("rollback", str(copy), last, "--json")
    assert code == 0, err
    assert rows(hudi_read(copy), "id", DATA_COLUMNS) == expected_after(BATCHES[:2])
    # the middle deltacommit wrote logs on slices whose base instant is the first one; rolling it back
    # (forced, as it is completed and not the newest) removes exactly those files
    code, out, err = laketide("rollback", str(copy), middle, "--force", "--json")
    assert code == 0, err
    deleted = set(json.loads(out)["files"])
    table = Table.open(str(copy))
    logs_after = {lf.path for s in table.file_system_view().latest_slices() for lf in s.log_files}
    assert {p for p in deleted if ".log." in p} == logs_of[middle] and not logs_after
    assert not any(path.endswith(".parquet") and first in path for path in deleted)
    assert (
        rows(hudi_read(copy), "id", DATA_COLUMNS)
        == expected_after(BATCHES[:1])
        == rows(table.snapshot(), "id", DATA_COLUMNS)
    )


def test_late_updates_and_deletes_lose_to_newer_stored_rows(spark, tmp_path):
    """Event-time ordering without reading the base: the late records go into the log, and the readers keep the newer
    rows."""
    batches = [
        [row(i, 10) for i in range(1, 7)],
        # 1: late update; 2: late delete; 3: newer update; 4: newer delete; 5: tie (the later write wins)
        [row(1, 5), row(2, 5, deleted=True), row(3, 11), row(4, 11, deleted=True), row(5, 10, name="tie")],
    ]
    for n, lines in enumerate(batches):
        land(tmp_path, f"b{n}.json", lines, 1_700_000_000 + n)
    run(job_config(tmp_path, table__type="MERGE_ON_READ"))
    kept = {1: row(1, 10), 2: row(2, 10), 3: row(3, 11), 5: row(5, 10, name="tie"), 6: row(6, 10)}
    expected = [{c: kept[i][c] for c in DATA_COLUMNS} for i in sorted(kept)]
    table = Table.open(str(tmp_path / "table"))
    assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected
    assert rows(table.snapshot(), "id", DATA_COLUMNS) == expected
