"""Key ranges of a bulk insert: where to cut (partition, record key) order between write tasks, so each
task, and so each new file group, holds a contiguous range of keys.

This is Hudi's GLOBAL_SORT bulk insert (``GlobalSortPartitionerWithRows`` in hudi-spark-client sorts
by partition path, then record key, across the input). A file group that holds a key range keeps new
keys out of old groups: later inserts extend the newest ranges, and the footers' min and max record
keys prune the bloom probes of an update. The cut points come from a sample of each part of the batch,
each sample weighted by the rows it stands for, as Spark's range partitioning samples.
"""

from __future__ import annotations

import bisect
import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import PARTITION
from laketide.table.format.schema import RECORD_KEY
from laketide.writer.slots import split_by

# one sampled key per this many rows of a part, and at least ``SAMPLE_LEAST`` (all of a smaller part): a
# range boundary from 1,000 samples is off by about 1.4% of the rows, and 1M rows send 1,000 keys
SAMPLE_EVERY = 1000
SAMPLE_LEAST = 1000
# sorts before any record key: a partition's keys follow its path and this, and precede the next path
_SEPARATOR = "\x00"


def range_keys(rows: pa.Table, global_keys: bool) -> pa.Array:
    """Each row's place in the bulk insert's order as one string: its partition path and key
    (the key alone under a global index, whose duplicates are found by key alone)."""
    keys = rows[RECORD_KEY].combine_chunks()
    if global_keys:
        return keys
    return pc.binary_join_element_wise(rows[PARTITION].combine_chunks(), keys, _SEPARATOR)


def sample(rows: pa.Table, global_keys: bool, seed: int = 0) -> tuple[list[str], float]:
    """Some range keys of ``rows``, picked at random (seeded, so a part samples the same each time),
    and how many rows each stands for."""
    n = rows.num_rows
    if n == 0:
        return [], 0.0
    take = min(n, max(SAMPLE_LEAST, n // SAMPLE_EVERY))
    picked = np.sort(np.random.default_rng(seed).choice(n, size=take, replace=False))
    # only the key columns taken: taking 1,000 rows of a whole 1M-row micro-batch's columns took 68 ms, on the
    # driver before any write thread starts
    keyed = rows.select([RECORD_KEY] if global_keys else [PARTITION, RECORD_KEY])
    return range_keys(keyed.take(pa.array(picked)), global_keys).to_pylist(), n / take


def cut_points(samples: list[tuple[list[str], float]], tasks: int, least_rows: int = 1) -> list[str]:
    """Range keys that split the sampled rows into up to ``tasks`` ranges of about equal weight.

    A range holds at least ``least_rows`` (a new file group's worth), so a small micro-batch is not cut
    into files smaller than one would be; and a cut moves to a partition's start when one lies within a
    quarter of a range of it, so a partition is not split into two small files for a few rows. A row
    goes to the range of the cuts at or below its key; a cut never falls inside one key's rows, so every
    key's duplicates meet in one task."""
    weighted = sorted((key, weight) for keys, weight in samples for key in keys)
    if not weighted:
        return []
    totals = np.cumsum([weight for _, weight in weighted])
    starts = _partition_starts(weighted)
    sized = min(tasks, max(1, int(totals[-1] // max(1, least_rows))))
    at_starts = _partition_start_cuts(weighted, totals, starts, tasks)
    if len(at_starts) + 1 > sized:
        # fewer files' worth of rows than tasks, but more partitions: a cut where a partition starts makes
        # no file smaller (each partition's files are its own), so those ranges run side by side
        return at_starts
    tasks = sized
    if tasks <= 1:
        return []
    share = totals[-1] / tasks
    cuts = []
    for goal in share * np.arange(1, tasks):
        at = min(int(np.searchsorted(totals, goal)), len(weighted) - 1)
        near = [i for i in starts if abs(totals[i] - weighted[i][1] - goal) <= share / 4]
        cuts.append(
            _partition_cut(weighted[min(near, key=lambda i: abs(totals[i] - goal))][0]) if near else weighted[at][0]
        )
    return sorted(set(cuts))


def _partition_start_cuts(
    weighted: list[tuple[str, float]], totals: np.ndarray, starts: list[int], tasks: int
) -> list[str]:
    """Up to ``tasks - 1`` cuts, each where a partition starts, nearest the points that share the rows evenly."""
    if not starts or tasks <= 1:
        return []
    share = totals[-1] / tasks
    before = np.array([totals[i] - weighted[i][1] for i in starts])  # the weight ahead of each partition start
    chosen = {starts[int(np.argmin(np.abs(before - goal)))] for goal in share * np.arange(1, tasks)}
    return sorted(_partition_cut(weighted[i][0]) for i in chosen)


def _partition_starts(weighted: list[tuple[str, float]]) -> list[int]:
    """Where a new partition begins among sorted range keys (none under a global index, whose keys have no
    partition)."""
    parts = [_partition_of(key) for key, _ in weighted]
    return [i for i in range(1, len(parts)) if parts[i] is not None and parts[i] != parts[i - 1]]


def _partition_of(key: str) -> str | None:
    return key.split(_SEPARATOR, 1)[0] if _SEPARATOR in key else None


def _partition_cut(key: str) -> str:
    """The cut where the partition of ``key`` (a key at a partition start, so it has one) begins."""
    return (_partition_of(key) or "") + _SEPARATOR


def split_sorted(rows: pa.Table, cuts: list[str], global_keys: bool) -> list[tuple[int, pa.Table]]:
    """Rows sorted by range key, cut into (task, rows) at ``cuts``: a task's rows are those from its cut up to the
    next."""
    if not rows.num_rows:
        return []
    keys = _Keys(rows, global_keys)
    starts = [0] + [bisect.bisect_left(keys, cut) for cut in cuts] + [rows.num_rows]
    return [
        (task, rows.slice(start, end - start))
        for task, (start, end) in enumerate(itertools.pairwise(starts))
        if end > start
    ]


def split_unsorted(rows: pa.Table, cuts: list[str], global_keys: bool) -> list[tuple[int, pa.Table]]:
    """Rows in any order cut into (task, rows) at ``cuts``, as ``split_sorted`` cuts them: a row's task is
    the number of cuts at or below its range key. Each task sorts its own rows afterwards, so the rows
    are not sorted here too (sorting 500k rows by their string keys took 0.36 s)."""
    if not rows.num_rows:
        return []
    if not cuts:
        return [(0, rows)]
    return split_by(rows, range_numbers(rows, cuts, global_keys))


def range_numbers(rows: pa.Table, cuts: list[str], global_keys: bool) -> np.ndarray:
    """Each row's range, as ``split_sorted`` cuts them: the number of cuts at or below its range key.

    Compared column by column (partition path, then key), as ordering by range key does, rather than on
    the joined range keys: a write task numbers a whole micro-batch, and joining its keys cost a copy of
    every key (tens of millions at a time when a bulk insert loads a large table), in every task."""
    task = np.zeros(rows.num_rows, np.int64)
    if cuts and rows.num_rows:
        keys, partitions = rows[RECORD_KEY], None if global_keys else rows[PARTITION]
        for cut in cuts:
            if partitions is None:
                at_or_above = pc.greater_equal(keys, cut)
            else:
                partition, key = cut.split(_SEPARATOR, 1)
                at_or_above = pc.or_(
                    pc.greater(partitions, partition),
                    pc.and_(pc.equal(partitions, partition), pc.greater_equal(keys, key)),
                )
            task += np.asarray(at_or_above, dtype=bool)
    return task


class _Keys:
    """The range keys of rows sorted by them, as a sequence ``bisect`` searches: only the keys it probes are made."""

    def __init__(self, rows: pa.Table, global_keys: bool):
        self._keys = rows[RECORD_KEY]
        self._partitions = None if global_keys else rows[PARTITION]

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, at: int) -> str:
        key = self._keys[at].as_py()
        return key if self._partitions is None else self._partitions[at].as_py() + _SEPARATOR + key
