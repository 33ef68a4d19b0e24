"""Column values a change event did not carry, which keep the value stored before.

Postgres does not hand logical decoding the value of an unchanged TOASTed column (a value stored out of
line) unless it is part of the table's REPLICA IDENTITY; Debezium then sends a placeholder in its place,
``__debezium_unavailable_value`` unless the connector's ``unavailable.value.placeholder`` says otherwise
(UTF-8 bytes of it in a bytes column). A text or bytes cell that holds the placeholder keeps the value the
key had: that of the newest earlier event of the key in the micro-batch, else the stored row's, as Hudi's
``PostgresDebeziumAvroPayload.mergeToastedValuesIfPresent`` does with the stored row
(hudi-common/src/main/java/org/apache/hudi/common/model/debezium/PostgresDebeziumAvroPayload.java).

The merge is done when the micro-batch is written, not left to readers: a log block of a merge-on-read
table holds the value, so hudi-rs, which cannot merge placeholders, reads it. A cell whose key has no
earlier value anywhere (its row was never seen) keeps the placeholder, as Hudi keeps it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.table.reading.log_merge import rows_of_keys

PLACEHOLDER = "__debezium_unavailable_value"


def placeholder_cells(rows: pa.Table, placeholder: str | None) -> dict[str, np.ndarray]:
    """The text and bytes columns of ``rows`` holding the placeholder somewhere, each with its mask."""
    if placeholder is None or not rows.num_rows:
        return {}
    out = {}
    for field in rows.schema:
        kind = field.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            value = pa.scalar(placeholder, kind)
        elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            value = pa.scalar(placeholder.encode(), kind)
        else:
            continue
        mask = pc.fill_null(pc.equal(rows[field.name], value), False).to_numpy(zero_copy_only=False)
        if mask.any():
            out[field.name] = mask
    return out


def with_cells(rows: pa.Table, column: str, at: np.ndarray, donors: pa.Array) -> pa.Table:
    """``rows`` with the cells of ``column`` at rows ``at`` replaced by ``donors`` (one each)."""
    values = rows[column].combine_chunks()
    position = np.arange(rows.num_rows, dtype=np.int64)
    position[at] = rows.num_rows + np.arange(len(at))
    merged = pa.concat_arrays([values, donors.cast(values.type)]).take(pa.array(position))
    return rows.set_column(rows.schema.get_field_index(column), rows.schema.field(column), merged)


def fill_from_stored(
    incoming: pa.Table, at: np.ndarray, stored: pa.Table, placeholder: str | None, deleted: np.ndarray
) -> pa.Table:
    """``incoming`` with each placeholder cell of an upsert whose key is stored (``at``: its stored row, or -1)
    replaced by the stored value."""
    cells = placeholder_cells(incoming, placeholder)
    for column, mask in cells.items():
        if column not in stored.column_names:
            continue
        take = mask & (at >= 0) & ~deleted
        if take.any():
            rows = np.nonzero(take)[0]
            incoming = with_cells(incoming, column, rows, stored[column].take(pa.array(at[rows])).combine_chunks())
    return incoming


def fill_from_stored_rows(
    incoming: pa.Table,
    existed: np.ndarray,
    deleted: np.ndarray,
    placeholder: str | None,
    read_stored: Callable[[pa.Array, list[str]], pa.Table],
    key_column: str,
) -> pa.Table:
    """``fill_from_stored`` for rows whose stored values must be read first: only the keys with a placeholder
    cell are read, and only their placeholder columns (``read_stored(keys, columns)``)."""
    cells = placeholder_cells(incoming, placeholder)
    if not cells:
        return incoming
    needed = np.zeros(incoming.num_rows, bool)
    for mask in cells.values():
        needed |= mask
    needed &= existed & ~deleted
    if not needed.any():
        return incoming
    keys = incoming[key_column].combine_chunks().filter(pa.array(needed))
    stored = read_stored(keys, sorted(cells))
    if not stored.num_rows:
        return incoming
    at = np.full(incoming.num_rows, -1, np.int64)
    at[needed] = rows_of_keys(keys, stored[key_column])
    return fill_from_stored(incoming, at, stored, placeholder, deleted)


def fill_from_earlier_events(
    rows: pa.Table, key: list[str], order: list[str], deleted: np.ndarray, placeholder: str | None
) -> pa.Table:
    """``rows`` (the events of a micro-batch, or of a part holding every event of its keys) with each placeholder
    cell filled from the newest earlier event of its key that holds a value (``fill_from_older``). Events
    of a key are ordered by the ``order`` columns, the newest last in each."""
    cells = placeholder_cells(rows, placeholder)
    if not cells:
        return rows
    sort = [(name, "ascending") for name in key] + [(name, "descending") for name in order]
    ranked = pc.sort_indices(rows.select([name for name, _ in sort]), sort_keys=sort).to_numpy()
    keys = rows.select(key).take(pa.array(ranked))
    same = np.ones(len(ranked), bool)
    for name in key:
        column = keys[name].combine_chunks()
        same[1:] &= pc.fill_null(pc.equal(column.slice(1), column.slice(0, len(column) - 1)), False).to_numpy(
            zero_copy_only=False
        )
    same[0] = False
    runs = [run for run in np.split(ranked, np.flatnonzero(~same)[1:]) if len(run) > 1]
    return fill_from_older(rows, runs, deleted, placeholder) if runs else rows


def fill_from_older(rows: pa.Table, runs: list[np.ndarray], deleted: np.ndarray, placeholder: str | None) -> pa.Table:
    """``rows`` with each placeholder cell of a key's newest event filled from the newest older event of the
    key that holds a value, up to the key's last delete. ``runs``: each repeated key's rows, newest first."""
    cells = placeholder_cells(rows, placeholder)
    for column, mask in cells.items():
        winners, donors = [], []
        for run in runs:
            if not mask[run[0]] or deleted[run[0]]:
                continue
            for older in run[1:]:
                if deleted[older]:
                    break
                if not mask[older]:
                    winners.append(run[0])
                    donors.append(older)
                    break
        if winners:
            rows = with_cells(rows, column, np.array(winners), rows[column].take(pa.array(donors)).combine_chunks())
    return rows
