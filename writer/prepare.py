"""Validation and keying of incoming rows, before any shuffle.

Every row leaves with its record key, partition path, index shard and
arrival order, or with the reason it goes to quarantine and its raw form.
Nothing is dropped here.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import (
    CORRUPT,
    DECODE_REASON,
    EVENT_KIND,
    EVENT_POSITION,
    LANDED_COLUMNS,
    PREPARED_FIELDS,
    SOURCE_BLOCK,
    SOURCE_FILE,
    SOURCE_MTIME,
    SOURCE_OFFSET,
    SOURCE_TABLE,
    flag_mask,
)
from laketide.index.hashing import index_keys
from laketide.index.state import shard_of
from laketide.table.format.keygen import first_reason, partition_paths, record_keys
from laketide.table.format.schema import IS_DELETED
from laketide.table.reading.unchanged import fill_from_earlier_events
from laketide.writer.changes.tally import TRUNCATE, Tally
from laketide.writer.quarantine import sources_of


@dataclass(frozen=True, kw_only=True)
class PrepareSpec:
    record_key: tuple[str, ...]
    partition_by: tuple[str, ...]
    hive_style: bool
    urlencode: bool
    ordering_field: str | None
    shards: int
    source_format: str = "json"
    complex_key: bool = False  # the table's key generator is ComplexKeyGenerator
    global_keys: bool = False  # the index hashes keys alone, so a key's shard does not depend on its partition
    # a change feed's stand-in for a value it did not send (``table.unchanged``): filled from the key's earlier
    # event of the micro-batch before prepare, else from the stored row when written
    placeholder: str | None = None


def with_earlier_values(rows: pa.Table, spec: PrepareSpec) -> pa.Table:
    """``rows`` whose cells hold the change feed's placeholder filled from the newest earlier event of their key
    among ``rows`` (``table.unchanged``): those events are gone once a micro-batch keeps one row per key."""
    if spec.placeholder is None:
        return rows
    order = [c for c in (spec.ordering_field, SOURCE_FILE, SOURCE_OFFSET) if c and c in rows.column_names]
    return fill_from_earlier_events(rows, list(spec.record_key), order, flag_mask(rows, IS_DELETED), spec.placeholder)


def set_aside(rows: pa.Table) -> tuple[pa.Table, Tally]:
    """``rows`` without the messages that are not rows (``EVENT_KIND``), and what they were."""
    tally = Tally()
    if EVENT_KIND in rows.column_names and rows[EVENT_KIND].null_count < rows.num_rows:
        kinds = rows[EVENT_KIND]
        tally.skipped = Counter({c["values"]: c["counts"] for c in pc.value_counts(kinds.drop_null()).to_pylist()})
        if tally.skipped.get(TRUNCATE) and EVENT_POSITION in rows.column_names:
            tally.truncated_at = pc.max(
                rows[EVENT_POSITION].filter(pc.fill_null(pc.equal(kinds, TRUNCATE), False))
            ).as_py()
        rows = rows.filter(pc.is_null(kinds))
    if SOURCE_TABLE in rows.column_names:
        tally.source_tables = {t for t in pc.unique(rows[SOURCE_TABLE]).to_pylist() if t is not None}
    return rows, tally


class ArrivalCounter:
    """Numbers the rows of one task in arrival order: by landing file and block, then line.

    A task reads each file block front to back, so the n-th row of a block
    seen by the task is the n-th line of that block. Rows of other sources
    are numbered in task order under ``task_base``.
    """

    def __init__(self, task_base: int):
        self.next_row = task_base
        self._seen: dict[str, int] = {}

    def order(self, rows: pa.Table) -> tuple[pa.Array, pa.Array]:
        n = rows.num_rows
        if SOURCE_OFFSET in rows.column_names:
            return record_offsets(rows)
        if SOURCE_FILE not in rows.column_names:
            start, self.next_row = self.next_row, self.next_row + n
            return pa.repeat(pa.scalar("", pa.string()), n), pa.array(np.arange(start, start + n, dtype=np.int64))
        names, codes, lines = _landing_blocks(rows)
        seen = np.array([self._seen.get(name, 0) for name in names], np.int64)
        for name, total in zip(names, (seen + np.bincount(codes, minlength=len(names))).tolist()):
            self._seen[name] = total
        return pa.array(names, pa.string()).take(pa.array(codes)), pa.array(seen[codes] + lines)


def batch_arrival(rows: pa.Table) -> tuple[pa.Array, pa.Array]:
    """The arrival order of a whole micro-batch held in one place: an empty arrival file, and one
    number per row that orders rows as (landing block, line) does, without a block name per row."""
    n = rows.num_rows
    if SOURCE_OFFSET in rows.column_names:
        return record_offsets(rows)
    if SOURCE_FILE not in rows.column_names:
        return pa.repeat(pa.scalar("", pa.string()), n), pa.array(np.arange(n, dtype=np.int64))
    names, codes, lines = _landing_blocks(rows)
    rank = np.empty(len(names), np.int64)
    rank[np.argsort(np.array(names, dtype=object), kind="stable")] = np.arange(len(names))
    return pa.repeat(pa.scalar("", pa.string()), n), pa.array((rank[codes] << 40) + lines)


def record_offsets(rows: pa.Table) -> tuple[pa.Array, pa.Array]:
    """A Kafka record's arrival: its topic-partition, then its offset there. One key's events share a
    partition when the producer keys by it, as Debezium does, so the later offset is the later event."""
    return rows[SOURCE_FILE].combine_chunks().cast(pa.string()), pc.fill_null(
        rows[SOURCE_OFFSET].combine_chunks().cast(pa.int64()), 0
    )


def _landing_blocks(rows: pa.Table) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The name of each landing block the rows came from (modification time, file, block start,
    which sort in arrival order), each row's block as a code into them, and its line in its block."""
    n = rows.num_rows
    parts = [
        pc.cast(pc.cast(rows[SOURCE_MTIME], pa.timestamp("us")), pa.int64()).combine_chunks().dictionary_encode(),
        rows[SOURCE_FILE].combine_chunks().dictionary_encode(),
        rows[SOURCE_BLOCK].combine_chunks().dictionary_encode(),
    ]
    mtimes, paths, blocks = (part.dictionary.to_pylist() for part in parts)
    # a micro-batch has few blocks: each block's name is built once, and rows take it by code
    origin = (parts[0].indices.to_numpy().astype(np.int64) * len(paths) + parts[1].indices.to_numpy()) * len(
        blocks
    ) + parts[2].indices.to_numpy()
    encoded = pa.array(origin).dictionary_encode()
    codes = encoded.indices.to_numpy().astype(np.int64)
    names = []
    for code in encoded.dictionary.to_pylist():
        rest, block = divmod(code, len(blocks))
        mtime, path = divmod(rest, len(paths))
        names.append(f"{mtimes[mtime]:020d}\x00{paths[path]}\x00{blocks[block]:020d}")
    if len(names) <= 1:
        return names, codes, np.arange(n, dtype=np.int64)
    counts = np.bincount(codes, minlength=len(names))
    by_block = np.argsort(codes, kind="stable")
    lines = np.empty(n, np.int64)
    lines[by_block] = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    return names, codes, lines


def _source(rows: pa.Table, bad: np.ndarray) -> pa.Array:
    """Where each bad row came from (``quarantine.sources_of``); null for the good ones."""
    if not bad.any():
        return pa.nulls(rows.num_rows, pa.string())  # the common case, on every micro-batch: no list of a None a row
    out: list[str | None] = [None] * rows.num_rows
    where = np.nonzero(bad)[0]
    for i, place in zip(where.tolist(), sources_of(rows.take(pa.array(where))).to_pylist()):
        out[i] = place
    return pa.array(out, pa.string())


def _raw(rows: pa.Table, bad: np.ndarray) -> pa.Array:
    if not bad.any():
        return pa.nulls(rows.num_rows, pa.string())
    corrupt = rows[CORRUPT].to_pylist() if CORRUPT in rows.column_names else None
    records = rows.drop_columns([c for c in LANDED_COLUMNS if c in rows.column_names])
    out: list[str | None] = [None] * rows.num_rows
    for i in np.nonzero(bad)[0]:
        if corrupt and corrupt[i] is not None:
            out[i] = corrupt[i]
            continue
        record = records.slice(i, 1).to_pylist()[0]
        out[i] = json.dumps(
            {**_record_origin(rows, int(i)), "row": record} if SOURCE_OFFSET in rows.column_names else record,
            default=str,
        )
    return pa.array(out, pa.string())


def _record_origin(rows: pa.Table, i: int) -> dict:
    """Where the Kafka record of row ``i`` came from (topic, partition, offset), for its raw form in quarantine."""
    topic, partition = rows[SOURCE_FILE][i].as_py().rsplit("/", 1)
    return {"topic": topic, "partition": int(partition), "offset": rows[SOURCE_OFFSET][i].as_py()}


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def _corrupt_reasons(rows: pa.Table, source_format: str) -> tuple[pa.Array, pa.Array]:
    """(malformed, mismatched) reasons from Spark's malformed-record column.

    A JSON line that parses was rejected for a field's type: a mismatch, which
    a more specific reason (the key, the ordering field) may explain better.
    """
    n = rows.num_rows
    if CORRUPT not in rows.column_names:
        return pa.nulls(n, pa.string()), pa.nulls(n, pa.string())
    check = _is_json if source_format == "json" else (lambda raw: True)
    parses = pa.array([None if raw is None else check(raw) for raw in rows[CORRUPT].to_pylist()], pa.bool_())
    text = "malformed record (not valid JSON)" if source_format == "json" else "malformed record"
    malformed = first_reason([(pc.fill_null(pc.invert(parses), False), text)], n)
    mismatched = first_reason([(pc.fill_null(parses, False), "a field does not match the source schema")], n)
    return malformed, mismatched


def prepare(rows: pa.Table, spec: PrepareSpec, arrival: ArrivalCounter) -> pa.Table:
    return prepare_in_order(rows, spec, *arrival.order(rows))


def prepare_in_order(rows: pa.Table, spec: PrepareSpec, arrival_file: pa.Array, arrival_row: pa.Array) -> pa.Table:
    """``prepare`` of rows whose arrival order is known: row by row, so any slice of rows prepares on its own."""
    n = rows.num_rows
    keys, key_reason = record_keys(rows, spec.record_key, spec.complex_key)
    partitions, partition_reason = partition_paths(rows, spec.partition_by, spec.hive_style, spec.urlencode)
    malformed, mismatched = _corrupt_reasons(rows, spec.source_format)
    # the first reason that applies, in this order
    reasons = [malformed, key_reason]
    if DECODE_REASON in rows.column_names:  # a Kafka record or change event, which says itself what is wrong
        reasons = [rows[DECODE_REASON].combine_chunks().cast(pa.string()), key_reason]
    if spec.ordering_field:
        kind = rows.schema.field(spec.ordering_field).type
        missing = (
            pc.is_null(rows[spec.ordering_field]),
            f"ordering field '{spec.ordering_field}' is missing or not a valid {kind}",
        )
        reasons.append(first_reason([missing], n))
    reasons += [partition_reason, mismatched]
    reason = pc.coalesce(*reasons)
    bad = pc.is_valid(reason).to_numpy(zero_copy_only=False) if n else np.zeros(0, bool)
    safe_keys = pc.fill_null(keys, "")
    safe_partitions = pc.fill_null(partitions, "")
    hashes = index_keys(safe_partitions, safe_keys, spec.global_keys)
    data = rows.drop_columns([c for c in LANDED_COLUMNS if c in rows.column_names])
    columns = [
        safe_keys,
        safe_partitions,
        pa.array(shard_of(hashes, spec.shards), pa.int32()),
        pa.array(hashes, pa.uint64()),
        arrival_file,
        arrival_row,
        reason,
        _raw(rows, bad),
        _source(rows, bad),
    ]
    for prepared, column in zip(PREPARED_FIELDS, columns):
        data = data.append_column(prepared, column)
    return data
