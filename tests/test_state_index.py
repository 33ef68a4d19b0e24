from __future__ import annotations

import numpy as np
import pyarrow as pa

from laketide.index.state import ShardRun, StateIndex, index_entries, index_keys, shard_of
from laketide.table import FileIO


def entries(keys, partition, file_id):
    hashes = index_keys(pa.array([partition] * len(keys)), pa.array(keys))
    return index_entries(hashes, [partition] * len(keys), [file_id] * len(keys))


def lookup(index, snapshot, keys, partition):
    hashes = index_keys(pa.array([partition] * len(keys)), pa.array(keys))
    shards = shard_of(hashes, index.shards)
    out = []
    for h, s in zip(hashes, shards):
        run = index.load_shard(snapshot, int(s))
        code = run.lookup(np.array([h], np.uint64))[0]
        out.append(run.groups[code] if code >= 0 else None)
    return out


def write_all(index, instant, table):
    hashes = table["key_hash"].to_numpy()
    shards = shard_of(hashes, index.shards)
    for s in np.unique(shards):
        index.write_delta(int(s), instant, table.filter(pa.array(shards == s)))


def test_deltas_count_only_once_their_instant_commits(tmp_path):
    index = StateIndex.open(FileIO.for_uri(str(tmp_path)), 4)
    write_all(index, "20260101000000001", entries(["a", "b", "c"], "us", "fg1"))
    write_all(index, "20260101000000002", entries(["d"], "us", "fg2"))
    snap = index.snapshot({"20260101000000001"})
    assert lookup(index, snap, ["a", "b", "c", "d"], "us") == [("us", "fg1")] * 3 + [None]
    assert lookup(index, snap, ["a"], "eu") == [None]  # non-global: the partition is part of the key
    snap = index.snapshot({"20260101000000001", "20260101000000002"})
    assert lookup(index, snap, ["d"], "us") == [("us", "fg2")]


def test_rollback_files_and_compaction(tmp_path):
    io = FileIO.for_uri(str(tmp_path))
    index = StateIndex.open(io, 2)
    committed = set()
    for n in range(1, 6):
        ts = f"2026010100000000{n}"
        write_all(index, ts, entries([f"k{n}-{i}" for i in range(50)], "p", f"fg{n}"))
        committed.add(ts)
    index.write_coverage("20260101000000005", [("p", "foreign")])
    assert index.instant_files("20260101000000005")
    snap = index.snapshot(committed)
    assert ("p", "foreign") in snap.covered
    for shard in range(2):
        index.compact(snap, shard)
    after = index.snapshot(committed)
    assert all(len(runs) == 1 and "base_" in runs[0] for runs in after.runs.values())
    assert lookup(index, after, ["k1-0", "k3-7", "k5-49"], "p") == [("p", "fg1"), ("p", "fg3"), ("p", "fg5")]
    # a later instant's delta rolled back: its files are gone and its keys unknown
    write_all(index, "20260101000000006", entries(["new"], "p", "fg6"))
    for f in index.instant_files("20260101000000006"):
        io.delete(f)
    assert lookup(index, index.snapshot(committed | {"20260101000000006"}), ["new"], "p") == [None]


def test_shard_count_of_existing_index_wins(tmp_path):
    io = FileIO.for_uri(str(tmp_path))
    StateIndex.open(io, 8)
    assert StateIndex.open(io, 3).shards == 8


def test_merge_keeps_each_hash_once():
    a = ShardRun(np.array([1, 5, 9], np.uint64), np.array([0, 0, 0], np.int32), [("p", "x")])
    b = ShardRun(np.array([5, 7], np.uint64), np.array([0, 0], np.int32), [("p", "y")])
    merged = ShardRun.merge([a, b])
    assert list(merged.hashes) == [1, 5, 7, 9]
    assert [merged.groups[c] for c in merged.lookup(np.array([1, 5, 7, 9, 2], np.uint64)) if c >= 0] == [("p", "x"), ("p", "y"), ("p", "y"), ("p", "x")]
    assert merged.lookup(np.array([2], np.uint64))[0] == -1
