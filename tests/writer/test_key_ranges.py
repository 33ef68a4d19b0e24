"""A bulk insert's key ranges (``writer.ranges``)."""

from __future__ import annotations

import bisect

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import PARTITION
from laketide.table.format.schema import RECORD_KEY
from laketide.writer import ranges


def _rows(n: int, seed: int, partitions: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = [str(k) for k in rng.integers(0, n // 2, size=n)]  # duplicates on purpose
    partitions = [f"region={r}" for r in rng.integers(0, partitions, size=n)]
    return pa.table({RECORD_KEY: keys, PARTITION: partitions, "v": pa.array(np.arange(n))})


def test_cut_points_split_the_rows_of_many_parts_evenly_and_never_split_a_key():
    parts = [_rows(5_000, seed) for seed in range(3)] + [_rows(40_000, 9)]
    tasks = 4
    cuts = ranges.cut_points([ranges.sample(p, global_keys=False, seed=i) for i, p in enumerate(parts)], tasks)
    assert len(cuts) == tasks - 1 and cuts == sorted(cuts)
    ranged: dict[int, list[pa.Table]] = {}
    for part in parts:
        ordered = part.sort_by([(PARTITION, "ascending"), (RECORD_KEY, "ascending")])
        for task, rows in ranges.split_sorted(ordered, cuts, global_keys=False):
            ranged.setdefault(task, []).append(rows)
    tables = {task: pa.concat_tables(rows) for task, rows in ranged.items()}
    assert sum(t.num_rows for t in tables.values()) == sum(p.num_rows for p in parts)
    sizes = [tables[t].num_rows for t in range(tasks)]
    assert max(sizes) < 1.3 * sum(sizes) / tasks, sizes
    seen: dict[str, int] = {}
    for task, table in tables.items():
        for key in ranges.range_keys(table, False).to_pylist():
            assert seen.setdefault(key, task) == task, "one key's rows meet in one task"
            assert bisect.bisect_right(cuts, key) == task, "a key equal to a cut starts the next range"
    # each task's range lies wholly above the one before
    bounds = [
        (min(ranges.range_keys(tables[t], False).to_pylist()), max(ranges.range_keys(tables[t], False).to_pylist()))
        for t in range(tasks)
    ]
    assert all(bounds[t][1] < bounds[t + 1][0] for t in range(tasks - 1))


def test_unsorted_rows_are_cut_into_the_ranges_sorted_rows_are_cut_into():
    """Spark's tasks cut a part without sorting it (each write task sorts its range): the same rows per task."""
    rows = _rows(20_000, 3, partitions=3)
    cuts = ranges.cut_points([ranges.sample(rows, global_keys=False)], 4)
    order = [(PARTITION, "ascending"), (RECORD_KEY, "ascending"), ("v", "ascending")]
    sorted_cut = {task: part for task, part in ranges.split_sorted(rows.sort_by(order), cuts, global_keys=False)}
    unsorted_cut = {task: part.sort_by(order) for task, part in ranges.split_unsorted(rows, cuts, global_keys=False)}
    assert sorted_cut.keys() == unsorted_cut.keys() and len(sorted_cut) == 4
    assert all(sorted_cut[t].equals(unsorted_cut[t]) for t in sorted_cut)
    assert ranges.split_unsorted(rows, [], global_keys=False)[0][1] is rows


def test_range_keys_order_as_partition_then_key_and_by_key_alone_when_global():
    rows = pa.table({RECORD_KEY: ["b", "a", "a"], PARTITION: ["p", "pq", "p"]})
    keys = ranges.range_keys(rows, False).to_pylist()
    assert sorted(range(3), key=lambda i: keys[i]) == [2, 0, 1], (
        "p/a, p/b, then pq/a: a path that extends another sorts after all its keys"
    )
    assert ranges.range_keys(rows, True).to_pylist() == ["b", "a", "a"]
    assert ranges.cut_points([], 4) == [] and ranges.cut_points([(["x"], 1.0)], 1) == []


def test_a_small_batch_is_cut_only_where_partitions_start_and_a_cut_near_a_partition_start_moves_there():
    # 3 partitions of 4,000, 4,000 and 2,000 rows
    rows = pa.table(
        {RECORD_KEY: [f"{i:05d}" for i in range(10_000)], PARTITION: ["a"] * 4_000 + ["b"] * 4_000 + ["c"] * 2_000}
    )
    samples = [ranges.sample(rows, global_keys=False)]
    assert ranges.cut_points(samples, 4, least_rows=20_000) == ["b\x00", "c\x00"], (
        "less than a file's worth: cut only where partitions start"
    )
    one_partition = [ranges.sample(rows.filter(pc.equal(rows[PARTITION], "a")), global_keys=False)]
    assert ranges.cut_points(one_partition, 4, least_rows=20_000) == [], (
        "less than a file's worth of one partition: one range"
    )
    cuts = ranges.cut_points(samples, 2, least_rows=1_000)
    assert cuts == ["b\x00"], "the middle (5,000) is within a quarter range of b's start (4,000)"
    parts = ranges.split_sorted(rows, cuts, False)
    assert [(task, t.num_rows) for task, t in parts] == [(0, 4_000), (1, 6_000)]


def test_range_numbers_compare_partition_then_key_as_the_joined_range_keys_order():
    """``range_numbers`` compares column by column; a row's range is the number of cuts at or below its
    joined range key, also where one partition path is the start of another's and a cut falls inside a
    partition, and by key alone under a global index."""
    partitions = ["a", "ab", "a", "b", "ab", "a", "b", ""]
    keys = ["9", "1", "10", "0", "5", "", "7", "3"]
    rows = pa.table(
        {
            RECORD_KEY: pa.chunked_array([keys[:3], keys[3:]]),
            PARTITION: pa.chunked_array([partitions[:3], partitions[3:]]),
        }
    )
    for global_keys, cuts in [(False, ["a\x001", "a\x00", "ab\x003", "b\x00"]), (False, []), (True, ["10", "5"])]:
        cuts = sorted(cuts)
        joined = ranges.range_keys(rows, global_keys).to_pylist()
        assert ranges.range_numbers(rows, cuts, global_keys).tolist() == [bisect.bisect_right(cuts, k) for k in joined]
