"""Late events under event-time ordering: counted the same on both table types, and never written over a newer row.

Copy-on-write meets the stored row when it merges; merge-on-read reads the slice's key and ordering
columns only when a stored row can be newer (``LogWriter.drop_late``). Either way the micro-batch's log
line says how many were late, and its updates and deletes count only what changed.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest
from opslib import OpsTable, region_of
from readback import hudi_read, rows
from streaming import DATA_COLUMNS, row

LINE = re.compile(r"micro-batch (\d+): instant=\d+ records=(\d+) inserts=(\d+) updates=(\d+) deletes=(\d+) late=(\d+)")


def _r(key: int, ts: int, deleted: bool = False) -> dict:
    return row(key, ts, region=region_of(key), deleted=deleted)


BATCHES = [
    [_r(k, 10) for k in range(30)],
    # keys 0-9 updated; 10-14 late updates; 15-19 late deletes; 20-22 deleted
    [_r(k, 20) for k in range(10)]
    + [_r(k, 5) for k in range(10, 15)]
    + [_r(k, 5, True) for k in range(15, 20)]
    + [_r(k, 20, True) for k in range(20, 23)],
    # against rows the previous micro-batch stored (in log files, on merge-on-read): 0-4 late, 5-9 newer,
    # and 23 a tie, which goes to the incoming record
    [_r(k, 15) for k in range(5)] + [_r(k, 25) for k in range(5, 10)] + [_r(23, 10)],
    # every record of every group late: nothing to write but the counts
    [_r(k, 1) for k in range(24, 30)],
]
# (inserts, updates, deletes, late) of each micro-batch
COUNTS = [(30, 0, 0, 0), (0, 10, 3, 10), (0, 6, 0, 5), (0, 0, 0, 6)]


def _expected() -> list[dict]:
    stored: dict[int, dict] = {}
    for lines in BATCHES:
        for line in lines:
            current = stored.get(line["id"])
            if current is not None and current["ts"] > line["ts"]:
                continue
            stored[line["id"]] = line
    return [{c: stored[k][c] for c in DATA_COLUMNS} for k in sorted(stored) if not stored[k].get("_hoodie_is_deleted")]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_late_updates_and_deletes_are_counted_and_lose_to_the_stored_row(tmp_path, table_type):
    ops = OpsTable(tmp_path, {"table.type": table_type, "compaction.mode": "off"})
    ops.land(BATCHES)
    done = ops.run()
    counts = [tuple(int(g) for g in m.groups()[2:]) for m in LINE.finditer(done.stderr)]
    assert counts == COUNTS, done.stderr[-3000:]
    assert rows(hudi_read(ops.path), "id", DATA_COLUMNS) == _expected()


@pytest.mark.parametrize(
    "kind", [pa.int64(), pa.string(), pa.timestamp("us", "UTC"), pa.date32(), pa.float64()], ids=str
)
def test_a_tasks_ordering_spans_match_each_groups_own(kind):
    """The lowest ordering value among existing keys and the highest among upserts, taken for every file
    group of a write task at once (``ordering_spans``), are what each group's own records give."""
    from laketide.index.columns import EXISTED
    from laketide.table.format.schema import IS_DELETED
    from laketide.writer.files.log_writer import OrderingSpan, ordering_spans

    rng = np.random.default_rng(3)
    n = 500
    values = pa.array(rng.integers(0, 10_000, n)).cast(pa.int64())
    values = pa.array([None if i % 17 == 0 else v for i, v in enumerate(values.to_pylist())], pa.int64())
    typed = values.cast(pa.int32()).cast(kind) if kind == pa.date32() else values.cast(kind)
    existed = pa.array([None if i % 11 == 0 else bool(b) for i, b in enumerate(rng.random(n) < 0.5)])
    deleted = pa.array(rng.random(n) < 0.2)
    # group 3 holds only new keys, group 4 only deletes: each lacks one of the two values
    starts = np.array([0, 40, 41, 200, 260, 300])
    existed = pa.array([False if 200 <= i < 260 else v for i, v in enumerate(existed.to_pylist())])
    deleted = pa.array([True if 260 <= i < 300 else v for i, v in enumerate(deleted.to_pylist())])
    rows = pa.table({"ts": typed, EXISTED: existed, IS_DELETED: deleted})
    spans = ordering_spans(rows, starts, "ts", typed.type)
    ends = np.append(starts[1:], n)
    for span, start, end in zip(spans, starts, ends):
        own = OrderingSpan.of(rows.slice(start, end - start), "ts", typed.type)
        assert (span.lowest.as_py(), span.highest.as_py()) == (own.lowest.as_py(), own.highest.as_py())
    assert not spans[3].lowest.is_valid and not spans[4].highest.is_valid


def test_the_late_check_decodes_only_blocks_that_can_be_newer_and_answers_as_if_it_read_them_all(tmp_path, monkeypatch):
    """Merge-on-read's late check leaves out the log blocks whose every ordering value is at most the incoming
    records' lowest: under event-time ordering it then finds, for every key, the same stored rows newer than that
    value as a merge of every block, with upserts and deletes of random times spread over many blocks."""
    import laketide
    from laketide.table import Table
    from laketide.table.reading import slice_reader
    from laketide.table.reading.slice_reader import MergeRule, _log_ops, _merged, stored_ordering

    rng = np.random.default_rng(3)
    uri = str(tmp_path / "t")
    highest = []  # each log block's highest upsert time (the first write is the base file)
    for block in range(8):
        keys = rng.choice(200, 60, replace=False)
        ts = rng.integers(block * 10, block * 10 + 25, len(keys))  # each block's times overlap the next's
        deleted = rng.random(len(keys)) < 0.2
        highest.append(int(ts[~deleted].max()))
        laketide.write(
            uri,
            pa.table({"id": keys.astype(np.int64), "ts": ts.astype(np.int64), "_hoodie_is_deleted": deleted}),
            record_key="id",
            ordering_field="ts",
            table_type="MERGE_ON_READ",
            settings={"compaction": {"mode": "off"}},
        )
    table = Table.open(uri)
    (fs,) = table.file_system_view().latest_slices()
    assert len(fs.log_files) == 7

    decoded = []
    real = slice_reader.data_block_rows
    monkeypatch.setattr(
        slice_reader, "data_block_rows", lambda block, columns=None: decoded.append(block) or real(block, columns)
    )
    columns = ["_hoodie_record_key", "ts"]
    for lowest in (0, 15, 40, 62, 95):
        decoded.clear()
        pruned = stored_ordering(table.io, fs, lambda _: True, MergeRule("ts"), pa.scalar(lowest, pa.int64()))
        assert len(decoded) == sum(1 for h in highest[1:] if h > lowest)  # the blocks that can be newer
        ops = _log_ops(table.io, fs, lambda _: True, columns)
        whole = pa.concat_tables(list(_merged(table.io, fs, ops, MergeRule("ts"), 10_000, columns)))
        assert _newer_than(pruned, lowest) == _newer_than(whole, lowest), lowest


def _newer_than(stored: pa.Table | None, lowest: int) -> dict:
    """Each stored key whose row is newer than ``lowest``, with its ordering value."""
    if stored is None:
        return {}
    return {k: t for k, t in zip(stored["_hoodie_record_key"].to_pylist(), stored["ts"].to_pylist()) if t > lowest}
