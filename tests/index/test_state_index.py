from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

from laketide.index.hashing import index_keys
from laketide.index.shard_run import ShardRun
from laketide.index.state import StateIndex, index_entries, shard_of
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


def compact(index, snapshot, shard: int) -> str | None:
    """A shard folded into a base and the runs it replaced deleted, at once (the job deletes them between
    micro-batches)."""
    fold = index.fold(snapshot, shard)
    if fold is not None:
        index.retire(fold)
    return fold.path if fold is not None else None


def commit_runs(index, instants: int, keys: int) -> set[str]:
    """Instants 1..n, each adding ``keys`` keys k<n>-<i> in file group fg<n>; their times, as committed."""
    committed = set()
    for n in range(1, instants + 1):
        ts = f"2026010100000000{n}"
        write_all(index, ts, entries([f"k{n}-{i}" for i in range(keys)], "p", f"fg{n}"))
        committed.add(ts)
    return committed


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
    committed = commit_runs(index, 5, 50)
    index.write_coverage("20260101000000005", [("p", "foreign")])
    assert index.instant_files("20260101000000005")
    snap = index.snapshot(committed)
    assert ("p", "foreign") in snap.covered
    for shard in range(2):
        compact(index, snap, shard)
    after = index.snapshot(committed)
    assert all(len(runs) == 1 and "base_" in runs[0] for runs in after.runs.values())
    read = []
    index._read_run = lambda path: read.append(path)  # the compacted runs are this process's: no base is read back
    assert lookup(index, after, ["k1-0", "k3-7", "k5-49"], "p") == [("p", "fg1"), ("p", "fg3"), ("p", "fg5")]
    assert read == []
    del index._read_run
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
    assert [merged.groups[c] for c in merged.lookup(np.array([1, 5, 7, 9, 2], np.uint64)) if c >= 0] == [
        ("p", "x"),
        ("p", "y"),
        ("p", "y"),
        ("p", "x"),
    ]
    assert merged.lookup(np.array([2], np.uint64))[0] == -1


def test_extending_a_run_equals_merging_it_again():
    rng = np.random.default_rng(3)
    base = ShardRun.from_table(index_entries(rng.integers(0, 2**63, 5000, dtype=np.uint64), ["p"] * 5000, ["a"] * 5000))
    # new keys, and keys the base already has (which stay in their group, as keys never move)
    fresh = rng.integers(0, 2**63, 300, dtype=np.uint64)
    again = base.hashes[rng.integers(0, len(base.hashes), 50)]
    delta = ShardRun.from_table(index_entries(np.concatenate([fresh, again]), ["p"] * 350, ["b"] * 300 + ["a"] * 50))
    merged = ShardRun.merge([base, delta])
    extended = base.extended([delta])
    flat = extended.flattened()
    assert np.array_equal(flat.hashes, merged.hashes)
    assert [flat.groups[c] for c in flat.codes] == [merged.groups[c] for c in merged.codes]
    probe = np.concatenate([merged.hashes, rng.integers(0, 2**63, 100, dtype=np.uint64)])
    assert [extended.groups[c] if c >= 0 else None for c in extended.lookup(probe)] == [
        merged.groups[c] if c >= 0 else None for c in merged.lookup(probe)
    ]
    assert base.extended([ShardRun()]) is base


def test_a_micro_batch_extends_the_index_without_copying_it():
    """Each batch's entries join a small run over the large one, which is rewritten only once the small
    one holds an eighth of it: the large arrays are shared, not copied, from batch to batch."""
    rng = np.random.default_rng(5)
    run = ShardRun.from_table(
        index_entries(rng.integers(0, 2**63, 80_000, dtype=np.uint64), ["p"] * 80_000, ["a"] * 80_000)
    )
    large = run.hashes
    for n in range(10):
        batch = rng.integers(0, 2**63, 1000, dtype=np.uint64)
        run = run.extended([ShardRun.from_table(index_entries(batch, ["p"] * 1000, [f"g{n}"] * 1000))])
        assert run.groups[run.lookup(batch[:1])[0]] == ("p", f"g{n}")
        if n < 9:
            assert run.hashes is large and len(run.recent.hashes) == 1000 * (n + 1)
    assert run.recent is None and len(run.hashes) == 90_000  # the tenth batch made the small run an eighth: folded


def test_many_micro_batches_make_layers_of_growing_size_that_answer_as_one_run():
    """Batch after batch, a shard's entries form layers, each under an eighth of the one below it, so a
    batch copies a layer about its own size; lookups through the layers equal those of one merged run."""
    rng = np.random.default_rng(11)
    base = rng.integers(0, 2**63, 400_000, dtype=np.uint64)
    run = ShardRun.from_table(index_entries(base, ["p"] * len(base), ["a"] * len(base)))
    large, runs = run.hashes, [run]
    for n in range(45):
        # half new keys, half keys of the base moving to this batch's group
        batch = np.concatenate([rng.integers(0, 2**63, 500, dtype=np.uint64), rng.choice(base, 500)])
        runs.append(ShardRun.from_table(index_entries(batch, ["p"] * 1000, [f"g{n}"] * 1000)))
        run = run.extended([runs[-1]])
    assert run.hashes is large, "45,000 entries are under an eighth of the 400,000: the large run was not copied"
    layers, layer = [], run
    while layer is not None:
        layers.append(len(layer.hashes))
        layer = layer.recent
    assert len(layers) >= 3 and all(upper * 8 < lower for lower, upper in itertools.pairwise(layers)), layers
    merged = ShardRun.merge(runs)
    probe = np.concatenate([merged.hashes[::97], rng.integers(0, 2**63, 100, dtype=np.uint64)])
    assert [run.groups[c] if c >= 0 else None for c in run.lookup(probe)] == [
        merged.groups[c] if c >= 0 else None for c in merged.lookup(probe)
    ]


def test_cached_shards_are_extended_with_new_deltas_only(tmp_path, monkeypatch):
    io = FileIO.for_uri(str(tmp_path))
    index = StateIndex.open(io, 1)
    reads = []
    read_run = StateIndex._read_run
    monkeypatch.setattr(StateIndex, "_read_run", lambda self, path: reads.append(path) or read_run(self, path))
    committed = set()
    for n in range(1, 5):
        ts = f"2026010100000000{n}"
        write_all(index, ts, entries([f"k{n}-{i}" for i in range(20)], "p", f"fg{n}"))
        committed.add(ts)
        reads.clear()
        snap = index.snapshot(committed)
        assert lookup(index, snap, [f"k{m}-3" for m in range(1, n + 1)], "p") == [
            ("p", f"fg{m}") for m in range(1, n + 1)
        ]
        # each micro-batch reads only the run its own instant added
        assert [p.rsplit("/", 1)[1] for p in reads] == [f"delta_{ts}_0.arrow"]
    # a run that disappears (a rolled-back instant) makes the shard load again from its files
    io.delete(index.instant_files("20260101000000004")[0])
    committed.discard("20260101000000004")
    reads.clear()
    snap = index.snapshot(committed)
    assert lookup(index, snap, ["k4-3", "k3-3"], "p") == [None, ("p", "fg3")]
    assert len(reads) == 3


def test_coverage_files_are_folded_into_one(tmp_path):
    io = FileIO.for_uri(str(tmp_path))
    index = StateIndex.open(io, 2)
    committed = set()
    for n in range(1, 8):
        ts = f"2026010100000000{n}"
        index.write_coverage(ts, [("p", f"fg{n}"), ("p", "shared")])
        committed.add(ts)
    index.write_coverage("20260101000000009", [("p", "pending")])  # not committed: neither read nor folded
    snap = index.snapshot(committed)
    assert len(snap.coverage_files) == 7
    folded = index.compact_coverage(snap)
    assert folded.endswith("coverage_20260101000000007.json")
    after = index.snapshot(committed)
    assert after.coverage_files == (folded,) and after.covered == snap.covered
    assert ("p", "pending") not in after.covered
    assert index.instant_files("20260101000000009")  # left for its rollback


def test_the_shard_cache_holds_under_many_threads_past_its_capacity(tmp_path):
    """Eight threads load 96 shards (the cache keeps 64) in shuffled orders while deltas commit: every
    lookup finds its key, nothing raises, and the cache never grows past its capacity."""
    import random
    import threading

    from laketide.index.shard_cache import SHARDS

    index = StateIndex.open(FileIO.for_uri(str(tmp_path)), 96)
    keys = [f"k{i}" for i in range(3000)]
    write_all(index, "20260101000000001", entries(keys, "p", "fg1"))
    committed = {"20260101000000001"}
    snapshots = [index.snapshot(set(committed))]
    for n in range(2, 5):
        ts = f"2026010100000000{n}"
        write_all(index, ts, entries([f"n{n}-{i}" for i in range(300)], "p", f"fg{n}"))
        committed.add(ts)
        snapshots.append(index.snapshot(set(committed)))
    hashes = index_keys(pa.array(["p"] * len(keys)), pa.array(keys))
    shard_of_key = shard_of(hashes, index.shards)
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def hammer(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        try:
            for _ in range(600):
                snapshot = rng.choice(snapshots)
                i = rng.randrange(len(keys))
                run = index.load_shard(snapshot, int(shard_of_key[i]))
                code = run.lookup(np.array([hashes[i]], np.uint64))[0]
                assert run.groups[code] == ("p", "fg1")
                assert len(SHARDS) <= SHARDS.capacity
        except BaseException as exc:  # collected: an assertion in a thread would go unseen
            failures.append(exc)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    assert len(SHARDS) == SHARDS.capacity


def test_run_files_hold_groups_dictionary_encoded_and_older_plain_runs_still_read(tmp_path):
    """A base of many keys in few groups costs about 16 bytes a key on disk (the hash, and two dictionary
    codes), not the 56 of a partition and file id spelled out per key; runs written that older way read the same."""
    import pyarrow.ipc as ipc

    from laketide.index.state import RUN_SCHEMA, SHARDS

    index = StateIndex.open(FileIO.for_uri(str(tmp_path)), 1)
    keys = [f"k{i}" for i in range(20_000)]
    index.write_delta(0, "20260101000000001", entries(keys[:10_000], "p=1", "a" * 36 + "-0"))
    old = pa.BufferOutputStream()
    with ipc.new_file(old, RUN_SCHEMA) as writer:  # a delta as runs were written before: plain strings
        writer.write_table(entries(keys[10_000:], "p=2", "b" * 36 + "-0"))
    index.io.write_atomic(
        f"{index.shard_dir(0)}/delta_20260101000000002_0.arrow", old.getvalue().to_pybytes(), overwrite=True
    )
    snap = index.snapshot({"20260101000000001", "20260101000000002"})
    base = compact(index, snap, 0)
    assert index.io.size(base) / len(keys) < 20
    SHARDS.put((index.io.base_path, 0), (), None)  # read the base back from its file
    snap = index.snapshot({"20260101000000001", "20260101000000002"})
    assert lookup(index, snap, ["k1", "k19999"], "p=1") == [("p=1", "a" * 36 + "-0"), None]
    assert lookup(index, snap, ["k19999"], "p=2") == [("p=2", "b" * 36 + "-0")]


@pytest.mark.parametrize("entries", [1, 3, 5_000, 50_000])
def test_a_large_run_finds_keys_through_its_directory_as_a_binary_search_would(monkeypatch, entries):
    """Runs of at least ``DIRECTORY_FROM`` entries search each key's bucket of a directory of their hashes'
    top bits: the same positions as a search of the whole run, for keys present, absent, and at the ends,
    whatever the run's size (the directory's bits follow it)."""
    from laketide.index import shard_run

    rng = np.random.default_rng(9)
    hashes = np.unique(rng.integers(0, 2**64 - 1, entries, dtype=np.uint64))
    run = ShardRun(hashes, np.arange(len(hashes), dtype=np.int32) % 7, [("p", f"g{i}") for i in range(7)])
    probe = np.concatenate(
        [
            hashes[rng.integers(0, len(hashes), 2000)],
            rng.integers(0, 2**64 - 1, 2000, dtype=np.uint64),
            np.array([0, hashes[0], hashes[-1], 2**64 - 1], np.uint64),
        ]
    )
    plain = run.lookup(probe)
    monkeypatch.setattr(shard_run, "DIRECTORY_FROM", 1)
    monkeypatch.setattr(shard_run, "_DIRECTORY_CHUNK", 1000)  # counted in several slices
    assert np.array_equal(run.lookup(probe), plain)
    assert run._directory is not None and (plain >= 0).sum() >= 2000
    assert (
        run._directory[-1] == len(hashes) and len(run._directory) <= 2 * len(hashes) // shard_run.DIRECTORY_BUCKET + 3
    )


def test_a_compacted_base_on_a_local_disk_is_mapped_not_copied(tmp_path):
    """A base is written sorted and says so: read back (after its compaction, and at the next start) its hashes
    and codes are views of the memory-mapped file, pages the kernel may drop and read again, not the
    process's own memory; lookups through them agree with the runs it folded."""
    from laketide.index.state import SHARDS

    io = FileIO.for_uri(str(tmp_path))
    index = StateIndex.open(io, 1)
    committed = commit_runs(index, 3, 300)
    snap = index.snapshot(committed)
    compact(index, snap, 0)
    after = index.snapshot(committed)
    for fresh in (False, True):
        if fresh:
            SHARDS.put((io.base_path, 0), (), None)  # as at the next start: the base is read from its file
        run = index.load_shard(after, 0)
        base = io.full_path(after.runs[0][0])
        assert _mapped_from(run.hashes, base) and _mapped_from(run.codes, base)
        assert lookup(index, after, ["k1-0", "k2-150", "k3-299", "absent"], "p") == [
            ("p", "fg1"),
            ("p", "fg2"),
            ("p", "fg3"),
            None,
        ]


def _mapped_from(array: np.ndarray, path: str) -> bool:
    """Whether ``array``'s memory lies in a mapping of the file at ``path`` (``/proc/self/maps``)."""
    address = array.ctypes.data
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == path:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if start <= address < end:
                    return True
    return False


@pytest.mark.parametrize("path", ["compiled", "numpy"])
def test_index_keys_hash_the_partition_a_nul_and_the_key(path, monkeypatch):
    """An index entry's hash is FNV-1a 64 of ``partition + "\\x00" + key``, as every run written holds it, whether the
    partitions come as strings, dictionaries or chunks of either."""
    import pyarrow.compute as pc

    from laketide.index import hashing

    if path == "numpy":
        monkeypatch.setattr(hashing, "compiled", None)
    partitions = pa.array([f"region={i % 7}/day=2026-12-0{i % 3}" for i in range(5_000)] + ["", "é/日本"])
    keys = pa.array([f"key-{i}" for i in range(5_000)] + ["x", ""])
    expected = hashing.hash64(pc.binary_join_element_wise(partitions, keys, "\x00"))
    assert np.array_equal(index_keys(partitions, keys), expected)
    assert np.array_equal(index_keys(partitions.dictionary_encode(), keys), expected)
    chunked = pa.chunked_array(
        [partitions.slice(0, 1_000).dictionary_encode(), partitions.slice(1_000).dictionary_encode()]
    )
    assert np.array_equal(index_keys(chunked, pa.chunked_array([keys.slice(0, 3), keys.slice(3)])), expected)
    assert np.array_equal(index_keys(pa.chunked_array([partitions.slice(0, 9), partitions.slice(9)]), keys), expected)
    assert np.array_equal(index_keys(partitions, keys, global_keys=True), hashing.hash64(keys))
