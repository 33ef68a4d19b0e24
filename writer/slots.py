"""Which write task each file group goes to: the largest groups first, each to the least loaded task.

The driver's threads and Spark's write tasks use the same slots, so a file group is written by one task.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from functools import partial

import numpy as np
import pyarrow as pa

from laketide.index.key_order import stable_order


def balanced_slots(sizes: dict[str, int], tasks: int) -> dict[str, int]:
    """Each file group's write task: the largest groups first, each to the least loaded task."""
    loads = [(0, task) for task in range(tasks)]
    slots = {}
    for file_id, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        load, task = heapq.heappop(loads)
        slots[file_id] = task
        heapq.heappush(loads, (load + max(size, 1), task))
    return slots


def split_by(rows: pa.Table, keys: np.ndarray) -> list[tuple[int, pa.Table]]:
    """(key, its rows) for each distinct key of ``rows`` (a task, a shard, a write slot), in key order,
    each key's rows in the order they came."""
    if not rows.num_rows:
        return []
    order, starts, sorted_keys = _runs(keys)
    ordered = rows.take(pa.array(order))
    return [(int(sorted_keys[start]), ordered.slice(start, end - start)) for start, end in itertools.pairwise(starts)]


def split_lazily(rows: pa.Table, keys: np.ndarray) -> list[tuple[int, Callable[[], pa.Table]]]:
    """``split_by``, each key's rows taken only when called: the driver's worker threads then copy
    their own parts side by side, rather than the batch thread copying every row first."""
    if not rows.num_rows:
        return []
    order, starts, sorted_keys = _runs(keys)
    return [
        (int(sorted_keys[start]), partial(rows.take, pa.array(order[start:end])))
        for start, end in itertools.pairwise(starts)
    ]


def present(codes: np.ndarray) -> list[int]:
    """The distinct values of small non-negative codes (shards, tasks, write slots), in order, by counting them:
    ``np.unique`` sorted or hashed every row of a micro-batch for a handful of values."""
    return np.flatnonzero(np.bincount(codes)).tolist() if len(codes) else []


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The order that groups ``keys`` (stably), where each key's run starts in it (and the end), and the keys
    in that order."""
    order = stable_order(keys)
    sorted_keys = keys[order]
    starts = np.concatenate([[0], np.nonzero(sorted_keys[1:] != sorted_keys[:-1])[0] + 1, [len(keys)]])
    return order, starts, sorted_keys
