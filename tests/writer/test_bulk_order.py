"""A bulk insert's order (``bulk_stage.bulk_order``): one row per key, the winner of each repeated key, in
(partition, key) order, as one sort on every ``bulk_sort_keys`` column gives them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from laketide.index.columns import ARRIVAL, ARRIVAL_FILE, KEY_HASH, PARTITION
from laketide.index.dedupe import first_of_each_key
from laketide.index.hashing import index_keys
from laketide.table.format.encoding import repeated_runs
from laketide.table.format.schema import RECORD_KEY
from laketide.writer import bulk_stage
from laketide.writer.slots import present, split_by


def _rows(global_keys: bool, ordering: bool, n: int = 20_000, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = pc.cast(pa.array(rng.integers(0, n // 2, n)), pa.string())  # about a third of the keys repeat
    partitions = pa.array(np.array(["b", "a", "a/b", "c=1", ""])[rng.integers(0, 5, n)])
    columns = {
        RECORD_KEY: keys,
        PARTITION: partitions,
        ARRIVAL_FILE: pa.array(np.array(["", "f1", "f2"])[rng.integers(0, 3, n)]),
        ARRIVAL: pa.array(rng.permutation(n)),
        KEY_HASH: pa.array(index_keys(partitions, keys, global_keys), pa.uint64()),
    }
    if ordering:  # a tenth without a value: those lose to any value, as in one sort with nulls last
        columns["ts"] = pa.array(rng.integers(0, 4, n), pa.int64(), mask=rng.random(n) < 0.1)
    return pa.table(columns)


def _one_sort(rows: pa.Table, ordering_field: str | None, global_keys: bool) -> np.ndarray:
    order = bulk_stage.bulk_sort_keys(ordering_field, global_keys)
    ranked = pc.sort_indices(rows.select([name for name, _ in order]), sort_keys=order)
    return ranked.to_numpy()[first_of_each_key(rows.take(ranked), global_keys)]


@pytest.mark.parametrize("global_keys", [False, True])
@pytest.mark.parametrize("ordering", [True, False])
def test_bulk_order_picks_and_orders_as_one_sort_on_every_sort_key(global_keys, ordering):
    rows = _rows(global_keys, ordering)
    field = "ts" if ordering else None
    expected = _one_sort(rows, field, global_keys)
    assert len(expected) < rows.num_rows, "the rows repeat keys"
    assert np.array_equal(bulk_stage.bulk_order(rows, field, global_keys), expected)
    at = np.sort(np.random.default_rng(1).choice(rows.num_rows, rows.num_rows // 2, replace=False))
    assert np.array_equal(
        bulk_stage.bulk_order(rows, field, global_keys, at), at[_one_sort(rows.take(pa.array(at)), field, global_keys)]
    )


def test_repeated_runs_are_each_value_its_count_dictionary_encoded():
    runs = repeated_runs(["p", "q", "p"], [2, 1, 3])
    assert pa.types.is_dictionary(runs.type)
    assert runs.cast(pa.string()).to_pylist() == ["p", "p", "q", "p", "p", "p"]


def test_small_codes_are_found_and_grouped_as_a_sort_groups_them():
    codes = np.random.default_rng(2).integers(0, 7, 5000).astype(np.int32)
    codes[codes == 3] = 6
    assert present(codes) == [0, 1, 2, 4, 5, 6] and present(np.zeros(0, np.int32)) == []
    rows = pa.table({"i": np.arange(len(codes))})
    for code, part in split_by(rows, codes):
        assert part["i"].to_pylist() == np.flatnonzero(codes == code).tolist()
