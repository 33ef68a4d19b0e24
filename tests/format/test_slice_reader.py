"""A file slice's rows merged a key range at a time (``table/reading/slice_reader.py``), and the late check's
bounds read from each file once, from the logs alone where the base cannot be newer, from a block's footer where
it has one: on slices made here, against the whole-slice merge."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from readback import rows

from laketide.table import Table
from laketide.table.format.files import BaseFile, LogFile
from laketide.table.format.logfile import Header
from laketide.table.format.properties import TableConfig
from laketide.table.format.schema import RECORD_KEY
from laketide.table.format.view import FileSlice
from laketide.table.reading.slice_reader import MergeRule


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
