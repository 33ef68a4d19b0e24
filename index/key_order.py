"""Record keys put in order: by their bytes, as Hudi orders ``_hoodie_record_key``, equal keys in row order.

Arrow's ``sort_indices`` compares the strings themselves, a key at a time: 1M keys in random order (UUIDs, or
numbers as text arriving unsorted) took 0.37 to 0.47 s, most of a bulk-insert task's ordering. Here each key
is first reduced to the 8 bytes that follow the prefix every key shares (a table's keys often start alike:
``order-000...``), as one big-endian integer, and the integers are sorted: 1M such keys then take about 0.05 s.
Keys whose 8 bytes tie are put in order among themselves afterwards: by length, when none of them goes on past
those bytes (the bytes tie, so they are equal keys, or the shorter is the other's start), else by Arrow comparing
them. When most keys tie that way (they agree well past their shared prefix), Arrow sorts them all, as it would
have anyway. ``stable_order`` orders small integer codes (partitions, file groups) the same way: stably.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.hashing import compiled, key_bytes
from laketide.table.format.schema import RECORD_KEY

# fewer keys than this are sorted by Arrow directly: the integers' set-up costs more than they save
DIRECT_BELOW = 4096
# past this share of tied keys, Arrow sorts all of them
MOST_TIE = 0.25
WIDTH = 8  # the bytes of a key compared as one integer


def key_order(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Row numbers of ``keys`` (strings, no nulls) in ascending byte order, equal keys in row order: what
    ``pc.sort_indices(keys)`` gives."""
    n = len(keys)
    if n < DIRECT_BELOW or compiled is None:
        return pc.sort_indices(keys).to_numpy()
    data, offsets = key_bytes(keys)
    skip = _shared_prefix(keys)
    prefixes = np.empty(n, np.uint64)
    compiled.key_prefixes(data, offsets, skip, prefixes)
    order = np.argsort(prefixes)  # not stable: ties are ordered below, by row among equal keys
    ranked = prefixes[order]
    same = ranked[1:] == ranked[:-1]
    if not same.any():
        return order
    tied = np.zeros(n, bool)
    tied[1:] = same
    tied[:-1] |= same
    at = np.flatnonzero(tied)
    run = np.cumsum(np.concatenate([[True], ~same]))[at]  # which tie each tied key is in, ascending
    rows = order[at]
    lengths = np.diff(offsets)[rows]
    if int(lengths.max()) <= skip + WIDTH:  # equal keys (a key repeated in the batch) or one the other's start
        within = _by_run_length_row(run, lengths, rows, n)
    elif len(at) > MOST_TIE * n:
        return pc.sort_indices(keys).to_numpy()
    else:
        tie = pa.table({"run": run, "key": keys.take(pa.array(rows)), "row": rows})
        within = pc.sort_indices(tie, sort_keys=[("run", "ascending"), ("key", "ascending"), ("row", "ascending")])
        within = within.to_numpy()
    order[at] = rows[within]
    return order


def by_key(rows: pa.Table) -> pa.Table:
    """``rows`` in record key order: what ``rows.sort_by(RECORD_KEY)`` gives, the order found by ``key_order``."""
    if rows.num_rows < 2:
        return rows
    return rows.take(pa.array(key_order(rows[RECORD_KEY])))


def _by_run_length_row(run: np.ndarray, lengths: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """The order of tied keys by (tie, length, row): as one integer when the three fit 64 bits (1M keys drawn from
    300,000 were ordered in 0.12 s so, against 0.39 by ``np.lexsort`` of the three)."""
    row_bits, length_bits = n.bit_length(), int(lengths.max()).bit_length()
    if int(run[-1]).bit_length() + length_bits + row_bits > 64:
        return np.lexsort((rows, lengths, run))
    combined = run.astype(np.uint64) << np.uint64(length_bits + row_bits)
    combined |= lengths.astype(np.uint64) << np.uint64(row_bits)
    combined |= rows.astype(np.uint64)
    return np.argsort(combined)


def _shared_prefix(keys: pa.Array | pa.ChunkedArray) -> int:
    """The bytes every key starts with: those the smallest and the largest key share."""
    bounds = pc.min_max(keys)
    low, high = (bounds["min"].as_py() or "").encode(), (bounds["max"].as_py() or "").encode()
    shared = 0
    for a, b in zip(low, high):
        if a != b:
            break
        shared += 1
    return shared


def stable_order(codes: np.ndarray) -> np.ndarray:
    """The order that sorts integer ``codes`` stably: numpy's stable sort is a radix sort for 16-bit values, so
    small non-negative codes are sorted as those (2 ms for 500,000 against 15 as 32-bit ones)."""
    small = len(codes) > 0 and codes.dtype.kind in "iu" and codes.min() >= 0 and codes.max() < 2**16
    return np.argsort(codes.astype(np.uint16) if small else codes, kind="stable")
