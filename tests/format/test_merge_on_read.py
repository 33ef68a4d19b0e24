"""Merge-on-read: our reader against hudi-rs on Spark-written logs, and MOR tables the job writes."""

from __future__ import annotations

import itertools
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
    from test_cli import laketide

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


# updates and a delete per micro-batch on 40 keys: with compaction.delta_commits = 2 every group compacts every other
# batch
COMPACTING_BATCHES = [[row(i, 1) for i in range(1, 41)]] + [
    [row(i, t) for i in range(1 + t, 20 + t)] + [row(30 + t, t, deleted=True)] for t in range(2, 8)
]


def _land_batches(root, batches):
    for n, lines in enumerate(batches):
        land(root, f"b{n:03d}.json", lines, 1_700_000_000 + n)


@pytest.mark.parametrize("mode", ["inline", "async"])
def test_compaction_in_the_job_keeps_every_read_equal_to_the_model(spark, tmp_path, mode):
    from test_cli import laketide

    _land_batches(tmp_path, COMPACTING_BATCHES)
    run(job_config(tmp_path, table__type="MERGE_ON_READ", compaction__delta_commits="2", compaction__mode=mode))
    path = tmp_path / "table"
    table = Table.open(str(path))
    writes = table.timeline.completed_writes()
    compactions = [i for i in writes if i.action == "commit"]
    assert len(compactions) == 3 and all(table.timeline.commit_metadata(c).compacted for c in compactions)
    assert not table.timeline.pending()
    # every slice is compacted: base files at the last compaction, no logs left on them
    slices = table.file_system_view().latest_slices()
    assert {s.base_instant for s in slices} == {compactions[-1].timestamp} and not any(s.log_files for s in slices)
    assert rows(table.read_optimized(), "id", DATA_COLUMNS) == expected_after(COMPACTING_BATCHES)
    deltas = [i for i in writes if i.action == "deltacommit"]
    for n, instant in enumerate(deltas, start=1):
        expected = expected_after(COMPACTING_BATCHES[:n])
        assert rows(hudi_read(path, as_of=instant.timestamp), "id", DATA_COLUMNS) == expected, instant
        assert rows(table.snapshot(instant.timestamp), "id", DATA_COLUMNS) == expected, instant
    # incremental reads across compactions: a compaction adds no change of its own
    for start, end in itertools.pairwise(deltas):
        theirs = hudi_read(path, start=start.timestamp, end=end.timestamp)
        assert rows(table.incremental(start.timestamp, end.timestamp), "id", DATA_COLUMNS) == rows(
            theirs, "id", DATA_COLUMNS
        )
        assert {r["ts"] for r in rows(theirs, "id", DATA_COLUMNS)} <= {deltas.index(end) + 1}

    # cleaning down to one version per group removes the older slices, logs included
    view = table.file_system_view()
    assert any(lf.base_instant != compactions[-1].timestamp for g in view.groups.values() for lf in g.log_files)
    code, _out, err = laketide(
        "clean", str(path), "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retain-file-versions", "1", "--json"
    )
    assert code == 0, err
    view = Table.open(str(path)).file_system_view()
    assert all(len(g.base_files) == 1 and not g.log_files for g in view.groups.values())
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == expected_after(COMPACTING_BATCHES)


def test_compact_command_and_writes_during_a_pending_compaction(spark, tmp_path):
    from test_cli import laketide

    _land_batches(tmp_path, COMPACTING_BATCHES[:3])
    config = dict(table__type="MERGE_ON_READ", compaction__mode="off")
    run(job_config(tmp_path, **config))
    path = tmp_path / "table"
    code, out, err = laketide("compact", str(path), "--schedule", "--delta-commits", "2", "--json")
    assert code == 0, err
    scheduled = json.loads(out)["scheduled"]
    assert scheduled and Table.open(str(path)).timeline.pending()[0].action == "compaction"

    planned = {lf.name for s in Table.open(str(path)).file_system_view().latest_slices() for lf in s.log_files}
    # micro-batches while the compaction is pending: their logs stay on the committed slices, where every reader sees
    # them
    _land_batches(tmp_path, COMPACTING_BATCHES[:5])
    run(job_config(tmp_path, **config))
    table = Table.open(str(path))
    late = [lf for s in table.file_system_view().latest_slices() for lf in s.log_files if lf.name not in planned]
    assert late and all(lf.base_instant < scheduled for lf in late)
    assert (
        rows(hudi_read(path), "id", DATA_COLUMNS)
        == expected_after(COMPACTING_BATCHES[:5])
        == rows(table.snapshot(), "id", DATA_COLUMNS)
    )

    # the job's write.parquet_compression, given to the command, which does not read the job's configuration
    code, out, err = laketide("compact", str(path), "--run", "--json", "--parquet-compression", "snappy")
    assert code == 0, err
    assert [c["instant"] for c in json.loads(out)["compacted"]] == [scheduled]
    table = Table.open(str(path))
    slices = table.file_system_view().latest_slices()
    assert {
        pq.ParquetFile(table.io.full_path(s.base_file.path)).metadata.row_group(0).column(0).compression for s in slices
    } == {"SNAPPY"}
    # the logs written since the plan were carried over to the new slices, blocks and all
    carried = [lf for s in slices for lf in s.log_files]
    assert {s.base_instant for s in slices} == {scheduled} and len(carried) == len(late)
    assert all(lf.base_instant == scheduled for lf in carried)
    assert sorted(table.io.read_bytes(lf.path) for lf in carried) == sorted(table.io.read_bytes(lf.path) for lf in late)
    assert (
        rows(hudi_read(path), "id", DATA_COLUMNS)
        == expected_after(COMPACTING_BATCHES[:5])
        == rows(table.snapshot(), "id", DATA_COLUMNS)
    )

    code, out, err = laketide("compact", str(Table.open(str(tmp_path / "table")).uri), "--run")
    assert code == 0 and "no pending compaction" in out


def test_a_kill_during_compaction_then_recovery(tmp_path):
    """The job killed while a compaction writes its base files (kills at the steps of a deltacommit are
    ``test_exactly_once``'s): readers go on seeing the logs, the restart finishes the compaction, and
    the table equals the model."""
    import os
    import subprocess

    from streaming import PYTHON, RUNNER

    _land_batches(tmp_path, COMPACTING_BATCHES)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    settings = ["table.type=MERGE_ON_READ", "compaction.delta_commits=2", "compaction.mode=inline"]
    path = tmp_path / "table"
    for point, batch in [("compaction-written", -1), ("-", 0)]:
        result = subprocess.run(
            [PYTHON, str(RUNNER), str(tmp_path), point, str(batch), *settings],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == (0 if point == "-" else 137), result.stderr[-3000:]
        if point == "compaction-written":
            # killed with the base files written: the compaction is pending, and readers still see the logs
            pending = Table.open(str(path)).timeline.pending()
            assert [i.action for i in pending] == ["compaction"]
            assert rows(hudi_read(path), "id", DATA_COLUMNS) == expected_after(COMPACTING_BATCHES[:3])
    table = Table.open(str(path))
    timeline = table.timeline
    assert timeline.pending() == []
    assert (
        rows(hudi_read(path), "id", DATA_COLUMNS)
        == expected_after(COMPACTING_BATCHES)
        == rows(table.snapshot(), "id", DATA_COLUMNS)
    )
    deltas = [c for c in timeline.completed_writes() if c.action == "deltacommit"]
    assert sorted(int(timeline.commit_metadata(c).extra_metadata["laketide.batch.id"]) for c in deltas) == list(
        range(len(COMPACTING_BATCHES))
    )
    assert len([c for c in timeline.completed_writes() if c.action == "commit"]) >= 2


def test_a_slice_merges_a_key_range_at_a_time_as_it_merges_whole(tmp_path):
    """Bounded memory: merging against 64-row batches of the base file gives the rows the whole-slice merge gives."""
    import random

    from laketide.table.format.encoding import SORTED_MARKER
    from laketide.table.format.logfile import delete_block, parquet_data_block
    from laketide.table.reading.slice_reader import merge_slice_batches

    table = Table.create_from_config(
        str(tmp_path), TableConfig(name="t", table_type="MERGE_ON_READ", record_key_fields=["k"], ordering_field="ts")
    )
    keys = [f"k{i:05d}" for i in range(1000)]
    base = BaseFile("", "f1-0", "0-0-0", "20260101000000000")
    stored = pa.table({RECORD_KEY: keys, "k": keys, "ts": [10] * 1000, "v": ["base"] * 1000})
    pq.write_table(stored.replace_schema_metadata({SORTED_MARKER: RECORD_KEY}), tmp_path / base.name)
    rng = random.Random(1)
    # updates newer and older than the stored rows, inserts beyond and before every stored key, deletes of all kinds
    upserted = sorted(set(rng.sample(keys, 300) + [f"k{i:05d}" for i in range(1000, 1100)] + ["a-before"]))
    updates = pa.table(
        {
            RECORD_KEY: upserted,
            "k": upserted,
            "ts": [rng.choice([5, 11]) for _ in upserted],
            "v": ["log"] * len(upserted),
        }
    )
    deleted = [*rng.sample(keys, 100), "k01050"]
    blocks = [
        parquet_data_block(updates, {Header.INSTANT_TIME: "20260101000000001"}),
        delete_block(
            deleted,
            [""] * len(deleted),
            [rng.choice([0, 7, 12]) for _ in deleted],
            pa.int64(),
            {Header.INSTANT_TIME: "20260101000000002"},
        ),
    ]
    log = LogFile("", base.file_id, base.instant_time, 1, "0-0-0")
    (tmp_path / log.name).write_bytes(b"".join(b.to_bytes() for b in blocks))
    fs = FileSlice("", base.file_id, base.instant_time, base, [log])
    batches = list(merge_slice_batches(table.io, fs, lambda instant: True, MergeRule("ts"), batch_rows=64))
    whole = list(merge_slice_batches(table.io, fs, lambda instant: True, MergeRule("ts"), batch_rows=10**9))
    assert len(batches) > 10 and len(whole) == 1
    merged = pa.concat_tables(batches, promote_options="permissive")
    assert rows(merged, "k") == rows(whole[0], "k")
    by_key = {r["k"]: r for r in merged.to_pylist()}
    assert "a-before" in by_key and "k01099" in by_key and "k01050" not in by_key
    assert all(by_key[k]["v"] == "base" for k in upserted if k in by_key and k < "k01000" and by_key[k]["ts"] == 10)


def test_the_late_check_reads_each_file_of_a_slice_once_per_process(tmp_path):
    """``stored_ordering`` bounds a slice by each file's highest ordering value, read once: a later
    micro-batch on the same slice reads only its new log, and still finds a stored row that is newer."""
    from laketide.table.format.encoding import SORTED_MARKER
    from laketide.table.format.logfile import parquet_data_block
    from laketide.table.reading.slice_reader import stored_ordering

    table = Table.create_from_config(
        str(tmp_path), TableConfig(name="t", table_type="MERGE_ON_READ", record_key_fields=["k"], ordering_field="ts")
    )
    base = BaseFile("", "f2-0", "0-0-0", "20260101000000000")
    pq.write_table(
        pa.table({RECORD_KEY: ["a", "b"], "k": ["a", "b"], "ts": [10, 10]}).replace_schema_metadata(
            {SORTED_MARKER: RECORD_KEY}
        ),
        tmp_path / base.name,
    )
    logs = []
    for version, ts in ((1, 20), (2, 30)):
        log = LogFile("", base.file_id, base.instant_time, version, "0-0-0")
        block = parquet_data_block(
            pa.table({RECORD_KEY: ["a"], "k": ["a"], "ts": [ts]}), {Header.INSTANT_TIME: f"2026010100000000{version}"}
        )
        (tmp_path / log.name).write_bytes(block.to_bytes())
        logs.append(
            LogFile("", base.file_id, base.instant_time, version, "0-0-0", (tmp_path / log.name).stat().st_size)
        )
    read = []
    io = table.io
    real = io.read_bytes
    io.read_bytes = lambda path: read.append(path) or real(path)
    fs = FileSlice(
        "",
        base.file_id,
        base.instant_time,
        BaseFile.parse("", base.name, (tmp_path / base.name).stat().st_size),
        logs[:1],
    )
    assert stored_ordering(io, fs, lambda i: True, MergeRule("ts"), pa.scalar(25)) is None  # nothing above 25 yet
    assert stored_ordering(io, fs, lambda i: True, MergeRule("ts"), pa.scalar(25)) is None
    assert read == [logs[0].path], "the first log is read once"
    fs = FileSlice("", base.file_id, base.instant_time, fs.base_file, logs)
    newer = stored_ordering(io, fs, lambda i: True, MergeRule("ts"), pa.scalar(25))
    assert newer is not None and dict(zip(newer[RECORD_KEY].to_pylist(), newer["ts"].to_pylist()))["a"] == 30


@pytest.mark.parametrize("seed", range(6))
def test_late_events_newer_than_the_base_file_are_judged_from_the_logs_alone(tmp_path, monkeypatch, seed):
    """When no row of the base file can be above the incoming records' lowest ordering value, the late check
    merges the slice's logs without the base (a whole base file per touched group per micro-batch made a
    100M-key table's batch take a minute): which incoming records are late is what the whole slice says,
    through upserts and deletes (with an ordering value and in natural order) in several logs. Events older
    than some base row read the base, and either way only the incoming keys' records are merged."""
    import random

    from laketide.table.format.encoding import SORTED_MARKER
    from laketide.table.format.logfile import delete_block, parquet_data_block
    from laketide.table.reading import slice_reader
    from laketide.table.reading.slice_reader import merge_slice_batches, stored_ordering

    rng = random.Random(seed)
    table = Table.create_from_config(
        str(tmp_path), TableConfig(name="t", table_type="MERGE_ON_READ", record_key_fields=["k"], ordering_field="ts")
    )
    keys = [f"k{i:03d}" for i in range(200)]
    base = BaseFile("", "f3-0", "0-0-0", "20260101000000000")
    pq.write_table(
        pa.table({RECORD_KEY: keys, "k": keys, "ts": [rng.randint(1, 10) for _ in keys]}).replace_schema_metadata(
            {SORTED_MARKER: RECORD_KEY}
        ),
        tmp_path / base.name,
    )
    logs = []
    for version in range(1, 5):
        upserted = sorted(rng.sample(keys, 60) + [f"n{version}{i:02d}" for i in range(5)])
        deleted = rng.sample(keys + upserted, 30)
        blocks = [
            parquet_data_block(
                pa.table({RECORD_KEY: upserted, "k": upserted, "ts": [rng.randint(1, 40) for _ in upserted]}),
                {Header.INSTANT_TIME: f"2026010100000000{version}"},
            ),
            delete_block(
                deleted,
                [""] * len(deleted),
                [rng.choice([0, rng.randint(1, 40)]) for _ in deleted],
                pa.int64(),
                {Header.INSTANT_TIME: f"2026010100000000{version}"},
            ),
        ]
        log = LogFile("", base.file_id, base.instant_time, version, "0-0-0")
        (tmp_path / log.name).write_bytes(b"".join(b.to_bytes() for b in blocks))
        logs.append(
            LogFile("", base.file_id, base.instant_time, version, "0-0-0", (tmp_path / log.name).stat().st_size)
        )
    fs = FileSlice(
        "", base.file_id, base.instant_time, BaseFile.parse("", base.name, (tmp_path / base.name).stat().st_size), logs
    )
    whole = pa.concat_tables(
        list(merge_slice_batches(table.io, fs, lambda i: True, MergeRule("ts"), columns=[RECORD_KEY, "ts"]))
    )
    stored = dict(zip(whole[RECORD_KEY].to_pylist(), whole["ts"].to_pylist()))
    opened = []
    real = slice_reader.key_ordered_batches
    monkeypatch.setattr(
        slice_reader, "key_ordered_batches", lambda io, path, *a, **kw: opened.append(path) or real(io, path, *a, **kw)
    )
    # events newer than the base file, then events older than some of its rows (the base is read)
    for oldest, base_read in ((11, False), (1, True)):
        incoming = {k: rng.randint(oldest, 40) for k in [*rng.sample(keys, 120), "n100", "n301", "absent"]}
        names = pa.array(list(incoming))
        judged = stored_ordering(
            table.io, fs, lambda i: True, MergeRule("ts"), pa.scalar(min(incoming.values())), names
        )
        found = dict(zip(judged[RECORD_KEY].to_pylist(), judged["ts"].to_pylist()))
        late = {k for k, v in incoming.items() if k in stored and stored[k] > v}
        assert {k for k, v in incoming.items() if k in found and found[k] > v} == late
        assert late and len(late) < len(incoming), "some incoming records late, some not"
        assert set(found) <= set(incoming), "only the incoming keys are merged"
        assert bool(opened) == base_read, "the base file's rows are read only for events older than some of them"


@pytest.mark.parametrize(
    "values",
    [
        [3, 41, 7],
        [2.5, -1.0, 9.25],
        ["b", "zz", "a"],
        [pa.scalar(5, pa.timestamp("us", tz="UTC")), pa.scalar(9, pa.timestamp("us", tz="UTC")), None],
    ],
    ids=["int", "double", "string", "timestamp"],
)
def test_a_logs_ordering_bound_comes_from_its_blocks_footers(tmp_path, monkeypatch, values):
    """A log block laketide writes carries statistics for the ordering field, so a writer bounds the log
    from the block's footer without decoding its rows (the first micro-batch after a start reads every
    log's bound); a block without them (older, or another writer's) is decoded, to the same bound."""
    from laketide.table.format.logfile import parquet_data_block
    from laketide.table.reading import ordering_bounds
    from laketide.table.storage.io import FileIO

    column = pa.array(
        [v.as_py() if isinstance(v, pa.Scalar) else v for v in values],
        values[0].type if isinstance(values[0], pa.Scalar) else None,
    )
    rows = pa.table({RECORD_KEY: ["a", "b", "c"], "ts": column})
    io = FileIO.for_uri(str(tmp_path))
    expected = pa.compute.max(column).as_py()
    for name, field in (("with", "ts"), ("without", None)):
        (tmp_path / name).write_bytes(
            parquet_data_block(rows, {Header.INSTANT_TIME: "20260101000000001"}, ordering_field=field).to_bytes()
        )
    decoded = []
    real = ordering_bounds.data_block_rows
    monkeypatch.setattr(
        ordering_bounds, "data_block_rows", lambda block, columns=None: decoded.append(1) or real(block, columns)
    )
    assert ordering_bounds.log_max(io, "with", "ts").to_pylist() == [expected]
    assert decoded == [], "the footer answered"
    assert ordering_bounds.log_max(io, "without", "ts").to_pylist() == [expected]
    assert decoded == [1]


def test_archival_takes_a_compaction_plan_with_its_commit(spark, tmp_path):
    """A completed compaction is a commit plus its plan files: archived together, or the plan would read as pending."""
    from laketide.table.format.archive import ArchivedTimeline

    _land_batches(tmp_path, COMPACTING_BATCHES)
    run(
        job_config(
            tmp_path,
            table__type="MERGE_ON_READ",
            compaction__delta_commits="2",
            compaction__mode="inline",
            archive__min_commits="4",
            archive__max_commits="6",
            clean__retain_commits="3",
        )
    )
    table = Table.open(str(tmp_path / "table"))
    timeline = table.timeline
    assert timeline.pending() == []
    archived = [a.instant for a in ArchivedTimeline(table.io, table.config.archive_dir).instants()]
    plans = [i for i in archived if i.action == "compaction"]
    assert plans and {i.timestamp for i in plans} <= {i.timestamp for i in archived if i.action == "commit"}
    names = [e.name for e in table.io.list_dir(table.config.timeline_dir) if not e.is_dir]
    assert not any(name.split(".")[0] in {i.timestamp for i in plans} for name in names)
    assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after(COMPACTING_BATCHES)


def test_a_write_task_decides_its_log_blocks_dictionary_columns_once_from_its_records():
    """Which columns a task's log blocks dictionary-encode is decided once from its records: a repeating
    column and the meta columns with one value per file are encoded, unique values and laketide's own columns not."""
    import io

    import numpy as np

    from laketide.table.format.encoding import ONE_PER_FILE, records_dictionary_columns
    from laketide.table.format.logfile import parquet_data_block
    from laketide.table.format.schema import COMMIT_TIME

    n = 1000
    records = pa.table(
        {
            RECORD_KEY: [str(i) for i in range(n)],
            "status": ["new", "paid"] * (n // 2),
            "amount": np.arange(n) / 7,
            "_lt_file_id": ["g"] * n,
        }
    )
    decided = records_dictionary_columns(records)
    assert "status" in decided and set(ONE_PER_FILE) <= set(decided)
    assert not {RECORD_KEY, "amount", "_lt_file_id"} & set(decided)
    written = records.drop_columns(["_lt_file_id"]).append_column(COMMIT_TIME, pa.array(["20260101000000000"] * n))
    block = parquet_data_block(written.slice(0, 3), {Header.INSTANT_TIME: "20260101000000000"}, decided)
    meta = pq.ParquetFile(io.BytesIO(block.content)).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert any("DICTIONARY" in e for e in encodings["status"]), "three rows alone would not have chosen it"
    assert not any("DICTIONARY" in e for e in encodings[RECORD_KEY])


def test_an_async_compaction_waits_for_the_micro_batch_being_written_but_not_forever():
    """Before each slice, the compactor waits for the job's batch lock (held while a micro-batch is
    written), up to ``compaction.yield_seconds``; the CLI's compactor, whose lock no job holds, never waits."""
    import threading
    import time

    from laketide.config import CompactionSection
    from laketide.writer.job.compactor import Compactor

    def waited(held_for: float, yield_seconds: float, job: bool = True) -> float:
        compactor = Compactor.__new__(Compactor)
        compactor.settings = CompactionSection(yield_seconds=yield_seconds)
        compactor.finish_lock = threading.RLock()
        batch_lock = compactor.finish_lock if job else threading.RLock()
        taken, release = threading.Event(), threading.Event()

        def micro_batch():
            with batch_lock:
                taken.set()
                release.wait(held_for)

        writer = threading.Thread(target=micro_batch)
        writer.start()
        taken.wait(5)
        started = time.monotonic()
        compactor._yield_to_batch()
        seconds = time.monotonic() - started
        release.set()
        writer.join()
        return seconds

    assert 0.25 <= waited(held_for=0.3, yield_seconds=10) < 5  # until the micro-batch is done
    assert 0.15 <= waited(held_for=5, yield_seconds=0.2) < 2  # no longer than yield_seconds
    assert waited(held_for=5, yield_seconds=0) < 0.1
    assert waited(held_for=5, yield_seconds=10, job=False) < 0.1
