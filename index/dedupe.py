"""Step 1 of the bucket assigner (``index.assigner``): one record per key in a micro-batch's shard, the highest
ordering value winning, then the later arrival; and the run starts of rows sorted by key, which the bulk insert and
the stages use too.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import ARRIVAL, ARRIVAL_FILE, PARTITION
from laketide.table.format.schema import RECORD_KEY


def dedupe(
    rows: pa.Table, hashes: np.ndarray, ordering_field: str | None, global_keys: bool = False
) -> tuple[pa.Table, np.ndarray]:
    """One row per (partition, key), or per key when keys are global, and its hash (``index_keys``, one per
    row of ``rows``): highest ordering value, then latest arrival (later file, later line). The winners keep
    their order in ``rows``.

    Only rows whose hash repeats can repeat a key, so only those are sorted by key to find the winners
    (a hash shared by two keys sorts them apart); a micro-batch with no repeated key is returned as it is.
    Sorting every row by its string key cost more than the rest of the assign step."""
    keep = winners(rows, hashes, ordering_field, global_keys)
    if keep is None:
        return rows, hashes
    return rows.filter(pa.array(keep)), hashes[keep]


def winners(
    rows: pa.Table, hashes: np.ndarray, ordering_field: str | None, global_keys: bool = False
) -> np.ndarray | None:
    """Which rows ``dedupe`` keeps, as a mask; ``None`` when no key repeats (every row is kept)."""
    order = np.argsort(hashes)
    by_hash = hashes[order]
    same = by_hash[1:] == by_hash[:-1]
    if not same.any():
        return None
    repeated = np.zeros(len(hashes), bool)
    repeated[1:] |= same
    repeated[:-1] |= same
    suspects = np.sort(order[repeated])
    sort = ([] if global_keys else [(PARTITION, "ascending")]) + [(RECORD_KEY, "ascending")]
    if ordering_field:
        sort.append((ordering_field, "descending"))
    if ARRIVAL_FILE in rows.column_names:
        sort.append((ARRIVAL_FILE, "descending"))
    sort.append((ARRIVAL, "descending"))
    candidates = rows.select([name for name, _ in sort]).take(pa.array(suspects))
    ranked = pc.sort_indices(candidates, sort_keys=sort).to_numpy()
    first = first_of_each_key(candidates.take(pa.array(ranked)), global_keys)
    keep = np.ones(rows.num_rows, bool)
    keep[suspects[ranked[~first]]] = False
    return keep


def first_of_each_key(ordered: pa.Table, global_keys: bool) -> np.ndarray:
    """Where each run of one (partition, key), or of one key when keys are global, starts in rows sorted by them."""
    return first_of_each_run(ordered, [RECORD_KEY] if global_keys else [RECORD_KEY, PARTITION])


def first_of_each_run(rows: pa.Table, columns: list[str]) -> np.ndarray:
    """Which rows start a run of equal values of ``columns`` (each compared with the row before)."""
    n = rows.num_rows
    first = np.ones(n, dtype=bool)
    if n < 2:
        return first
    changed = [pc.not_equal(c.slice(1), c.slice(0, n - 1)) for c in (rows[name].combine_chunks() for name in columns)]
    first[1:] = (changed[0] if len(changed) == 1 else pc.or_(*changed)).to_numpy(zero_copy_only=False)
    return first
