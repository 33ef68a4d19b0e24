"""Folding a slice's runs of data blocks into one before they merge over the stored rows (``log_merge.folded``)
changes nothing a reader sees: the same rows, in the same order, as applying every block in turn."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from laketide.table.reading.log_merge import ORDERING, LogOp, MergeRule, apply_ops, folded

KEY = "_hoodie_record_key"


def _block(rng: np.random.Generator, keys: int, kind: str, undecided: float) -> pa.Table:
    """Upserts of random keys, each with an ordering value from a small range (so ties are common) and a
    value that tells the blocks apart; ``undecided``: the share of null (or NaN) ordering values."""
    chosen = rng.choice(keys, rng.integers(1, keys), replace=False)
    ts = rng.integers(0, 6, len(chosen))
    gaps = rng.random(len(chosen)) < undecided
    if kind == "double":
        ordering = pa.array(np.where(gaps, np.nan, ts.astype(float)))
    else:
        ordering = pa.array(ts, pa.int64(), mask=gaps)
    return pa.table(
        {KEY: pa.array([f"k{k}" for k in chosen]), "ts": ordering, "v": pa.array(rng.integers(0, 10**9, len(chosen)))}
    )


def _ops(rng: np.random.Generator, keys: int, kind: str, undecided: float) -> list[LogOp]:
    ops = []
    for _ in range(rng.integers(1, 9)):
        if rng.random() < 0.2:
            chosen = rng.choice(keys, rng.integers(1, keys // 2), replace=False)
            values = rng.integers(0, 6, len(chosen))  # 0 is Hudi's natural order: removes whatever is stored
            ops.append(LogOp(deletes=pa.table({KEY: pa.array([f"k{k}" for k in chosen]), ORDERING: values})))
        else:
            ops.append(LogOp(upserts=_block(rng, keys, kind, undecided)))
    return ops


@pytest.mark.parametrize("ordering_field", ["ts", None])
@pytest.mark.parametrize(("kind", "undecided"), [("int", 0.0), ("int", 0.1), ("double", 0.0), ("double", 0.1)])
def test_folded_blocks_merge_as_every_block_in_turn(ordering_field, kind, undecided):
    rng = np.random.default_rng(11)
    rule = MergeRule(ordering_field)
    for _ in range(300):
        stored = _block(rng, 40, kind, undecided)
        ops = _ops(rng, 40, kind, undecided)
        assert _rows(apply_ops(stored, folded(ops, rule), rule)) == _rows(apply_ops(stored, ops, rule))


def _rows(table: pa.Table) -> list[dict]:
    """The rows in order, a NaN as a string (NaN equals nothing, itself included)."""
    return [{k: "NaN" if v != v else v for k, v in row.items()} for row in table.to_pylist()]


def test_runs_of_data_blocks_fold_and_deletes_and_undecided_values_stay_apart():
    rule = MergeRule("ts")

    def upserts(ts: list) -> LogOp:
        return LogOp(upserts=pa.table({KEY: [f"k{i}" for i in range(len(ts))], "ts": pa.array(ts, pa.int64())}))

    delete = LogOp(deletes=pa.table({KEY: ["k0"], ORDERING: [3]}))
    ops = [upserts([1, 2]), upserts([2, 1]), delete, upserts([5]), upserts([None]), upserts([4])]
    shapes = [(op.upserts is not None, op.rows.num_rows) for op in folded(ops, rule)]
    assert shapes == [(True, 2), (False, 1), (True, 1), (True, 1), (True, 1)]
