"""How a slice's log records merge over its stored rows: the rule Hudi's merged log record scanner follows.

Blocks apply in order. A data block upserts its records: the later record wins, unless event-time ordering
keeps a stored record with a higher ordering value. A delete block removes its keys; under event-time
ordering, a delete with an ordering value removes only a record whose value is not higher (one without,
Hudi's natural order, always removes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.table.format.schema import RECORD_KEY

# The ordering value Hudi writes in a delete block when a delete has none: remove whatever is there.
NATURAL_ORDER = 0
ORDERING = "_lt_ordering"


@dataclass(frozen=True)
class MergeRule:
    ordering_field: str | None = None  # set under event-time ordering


def rows_of_keys(keys: pa.ChunkedArray | pa.Array, among: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Where each of ``keys`` is in ``among`` (-1 where it is not), both holding a key at most once.

    The hash set is built of the smaller side and the larger one probed: a merge looks a few incoming
    keys up among a whole file's, and building a set of every stored key cost ten times the lookup
    (18 ms against 1.6 for 4,000 keys among 77,000), a tenth of a copy-on-write micro-batch."""
    at = np.full(len(keys), -1, dtype=np.int64)
    if not len(keys) or not len(among):
        return at
    if len(among) <= len(keys):
        return pc.fill_null(pc.index_in(keys, value_set=among), -1).to_numpy().astype(np.int64)
    key_of = pc.fill_null(pc.index_in(among, value_set=keys), -1).to_numpy().astype(np.int64)
    found = np.flatnonzero(key_of >= 0)
    at[key_of[found]] = found
    return at


def _upsert(current: pa.Table, incoming: pa.Table, rule: MergeRule) -> pa.Table:
    """``incoming`` records over ``current``: the later record wins, unless event-time ordering keeps a higher stored
    one."""
    incoming = _last_of_each_key(incoming)
    if current.num_rows == 0:
        return incoming
    field = rule.ordering_field
    if field and field in current.column_names and field in incoming.column_names:
        at = rows_of_keys(incoming[RECORD_KEY], current[RECORD_KEY])
        stored = current[field].take(pa.array(at, mask=at < 0))
        kind = stored.type
        late = pc.fill_null(pc.greater(stored, incoming[field].cast(kind)), False)
        incoming = incoming.filter(pc.invert(late))
    replaced = pc.is_in(current[RECORD_KEY], value_set=incoming[RECORD_KEY])
    return pa.concat_tables([current.filter(pc.invert(replaced)), incoming], promote_options="permissive")


def _last_of_each_key(rows: pa.Table) -> pa.Table:
    """One record per key within a block: the last one written."""
    if pc.count_distinct(rows[RECORD_KEY]).as_py() == rows.num_rows:
        return rows
    return _winners(rows, None)


def _winners(rows: pa.Table, field: str | None) -> pa.Table:
    """Of each key's records, the one of highest ``field``, the latest of equal ones (without ``field``, the
    latest); the records in the order they came."""
    arrival = np.arange(rows.num_rows)
    ranking = {"key": _key_codes(rows), "arrival": arrival}
    if field is not None:
        ranking["ordering"] = rows[field]
    ranked = pa.table(ranking).sort_by(
        [("key", "ascending"), *([("ordering", "descending")] if field else []), ("arrival", "descending")]
    )
    keys = ranked["key"].to_numpy()
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    return rows.take(np.sort(ranked["arrival"].to_numpy()[first]))


def _delete(current: pa.Table, deletes: pa.Table, rule: MergeRule) -> pa.Table:
    """``deletes`` (``RECORD_KEY``, ``ORDERING``) applied to ``current``."""
    if deletes.num_rows == 0 or current.num_rows == 0:
        return current
    keys = deletes[RECORD_KEY].combine_chunks()
    field = rule.ordering_field
    if field and field in current.column_names:
        stored = current[field].combine_chunks().take(pc.index_in(keys, value_set=current[RECORD_KEY]))
        # a delete in natural order (no ordering value) removes whatever is stored
        values = [None if v == NATURAL_ORDER else v for v in deletes[ORDERING].to_pylist()]
        newer = pc.fill_null(pc.greater(stored, _ordering_values(values, stored.type)), False)
        keys = keys.filter(pc.invert(newer))
    return current.filter(pc.invert(pc.is_in(current[RECORD_KEY], value_set=keys)))


def _ordering_values(values: list, kind: pa.DataType) -> pa.Array:
    """A delete block's ordering values in the stored column's type (dates and timestamps travel as numbers)."""
    if pa.types.is_date(kind):
        return pa.array(values, pa.int32()).cast(pa.date32()).cast(kind)
    if pa.types.is_timestamp(kind):
        return pa.array(values, pa.int64()).cast(pa.timestamp("us", kind.tz)).cast(kind)
    return pa.array(values).cast(kind)


@dataclass(frozen=True)
class LogOp:
    """One counted block, parsed once: the records it upserts, or the keys (and ordering values) it deletes."""

    upserts: pa.Table | None = None
    deletes: pa.Table | None = None

    def within(self, lower: str | None, upper: str | None) -> LogOp:
        """The part of this block whose keys fall in ``(lower, upper]`` (``None``: unbounded)."""
        rows = self.rows
        keys = rows[RECORD_KEY]
        mask = None
        if lower is not None:
            mask = pc.greater(keys, lower)
        if upper is not None:
            below = pc.less_equal(keys, upper)
            mask = below if mask is None else pc.and_(mask, below)
        return self._with(rows if mask is None else rows.filter(mask))

    @property
    def rows(self) -> pa.Table:
        return self.upserts if self.upserts is not None else self.deletes

    def _with(self, rows: pa.Table) -> LogOp:
        return LogOp(rows, None) if self.upserts is not None else LogOp(None, rows)


def apply_ops(current: pa.Table, ops: list[LogOp], rule: MergeRule) -> pa.Table:
    """``ops`` applied in order to ``current`` (rows of one key range at most once each)."""
    for op in ops:
        if op.upserts is not None and op.upserts.num_rows:
            current = _upsert(current, op.upserts, rule)
        elif op.deletes is not None:
            current = _delete(current, op.deletes, rule)
    return current


def folded(ops: list[LogOp], rule: MergeRule) -> list[LogOp]:
    """``ops`` with each run of data blocks folded into one block, which merges over any stored rows exactly as the
    run does block by block: each key's record of highest ordering value, the later of equal ones (or the last,
    without ordering), where it stood. A slice's stored rows then go through one hash lookup, filter and copy,
    not one for each of its blocks: a compaction of five logs a slice spent half its time there.

    Blocks are folded only where comparing them decides as comparing each with the stored row did: ordering
    values of one type, none null or NaN (a comparison with those is never true, and the order they came in
    would decide)."""
    runs: list[list[LogOp]] = []
    for op in ops:
        if runs and _foldable(runs[-1][-1], op, rule):
            runs[-1].append(op)
        else:
            runs.append([op])
    return [run[0] if len(run) == 1 else LogOp(upserts=_fold(run, rule.ordering_field)) for run in runs]


def _key_codes(rows: pa.Table) -> pa.Array:
    """A code per record key (a null key one of its own): sorting codes groups keys as sorting the strings does."""
    return rows[RECORD_KEY].combine_chunks().dictionary_encode(null_encoding="encode").indices


def _fold(run: list[LogOp], field: str | None) -> pa.Table:
    """One block of a run of data blocks: ``_winners`` of their records, each block counting its last record of
    a key, as it does alone."""
    rows = pa.concat_tables([_last_of_each_key(op.rows) for op in run], promote_options="permissive")
    return _winners(rows, field)


def _foldable(earlier: LogOp, later: LogOp, rule: MergeRule) -> bool:
    if earlier.upserts is None or later.upserts is None:
        return False
    field = rule.ordering_field
    if field is None:
        return True
    columns = [rows[field] for rows in (earlier.upserts, later.upserts) if field in rows.column_names]
    return len(columns) == 2 and columns[0].type == columns[1].type and not any(map(_undecided, columns))


def _undecided(values: pa.ChunkedArray) -> bool:
    """Whether any ordering value compares false with everything: a null, or a floating NaN."""
    if values.null_count:
        return True
    return pa.types.is_floating(values.type) and bool(pc.any(pc.is_nan(values)).as_py())
