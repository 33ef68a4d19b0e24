"""Reading one file slice of a merge-on-read table: its base file merged with its log blocks.

As Hudi's merged log record scanner does it, blocks are applied in order:
base rows first, then each log file's blocks by version. A block counts when
its instant is a completed write visible as of the read (or older than the
timeline, so archived); a rollback command block removes the earlier blocks
of its target instant. A data block upserts its records, a delete block
removes its keys. Under event-time ordering, a stored record with a higher
ordering value stays, and a delete with an ordering value only removes a
record whose value is not higher (a delete without one, Hudi's natural
order, always removes).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from laketide.table.errors import UnsupportedTableError
from laketide.table.format.damage import reading_data_file
from laketide.table.format.encoding import SORTED_MARKER
from laketide.table.format.keygen import VirtualKeys
from laketide.table.format.logfile import (
    DATA_BLOCKS,
    BlockType,
    CorruptLog,
    Header,
    LogBlock,
    data_block_rows,
    deleted_records,
    read_blocks,
)
from laketide.table.format.schema import RECORD_KEY
from laketide.table.format.view import FileSlice
from laketide.table.reading.log_merge import ORDERING, LogOp, MergeRule, apply_ops, folded
from laketide.table.reading.ordering_bounds import block_may_exceed, file_bound, footer_max, log_max, may_exceed
from laketide.table.storage.io import FileIO

log = logging.getLogger("laketide.table")
MERGE_BATCH_ROWS = 64 * 1024


def log_blocks(io: FileIO, fs: FileSlice, visible: Callable[[str], bool]) -> list[LogBlock]:
    """The blocks of a slice's log files that count, in the order they apply."""
    blocks: list[LogBlock] = []
    for log_file in sorted(fs.log_files, key=lambda lf: lf.order):
        try:
            # one at a time: the blocks before a torn one count, and a torn block raises as it is read
            for block in read_blocks(io.read_bytes(log_file.path)):
                blocks.append(block)  # noqa: PERF402
        except CorruptLog as torn:
            # only a write that never committed can leave a torn block: its blocks do not count anyway
            log.warning("%s: %s; the blocks before it are read", log_file.path, torn)
    counted: list[LogBlock] = []
    for block in blocks:
        instant = block.header.get(Header.INSTANT_TIME)
        if instant is None or not visible(instant):
            continue
        if block.block_type == BlockType.COMMAND_BLOCK:
            target = block.header.get(Header.TARGET_INSTANT_TIME)
            counted = [b for b in counted if b.header.get(Header.INSTANT_TIME) != target]
            continue
        counted.append(block)
    return counted


def _log_ops(
    io: FileIO,
    fs: FileSlice,
    visible: Callable[[str], bool],
    columns: list[str] | None = None,
    above: tuple[str, pa.Scalar] | None = None,
) -> list[LogOp]:
    """The slice's log blocks that count, in order, decoded. ``above`` (field, value): only the data blocks that can
    hold a value of that field above it are decoded (the late check asks nothing of the others)."""
    ops = []
    for block in log_blocks(io, fs, visible):
        if block.block_type in DATA_BLOCKS:
            if above is None or block_may_exceed(block, *above):
                ops.append(LogOp(upserts=data_block_rows(block, columns)))
        elif block.block_type == BlockType.DELETE_BLOCK:
            deletes = deleted_records(block)
            keys = pa.array([k for k, _, _ in deletes], pa.string())
            ops.append(LogOp(deletes=pa.table({RECORD_KEY: keys, ORDERING: pa.array([v for _, _, v in deletes])})))
        else:
            raise UnsupportedTableError(
                f"{fs.file_id}: log blocks of type {BlockType(block.block_type).name} are not read by laketide"
            )
    return ops


def key_ordered_batches(
    io: FileIO,
    path: str,
    batch_rows: int = MERGE_BATCH_ROWS,
    columns: list[str] | None = None,
    virtual: VirtualKeys | None = None,
) -> Iterator[pa.Table]:
    """The rows of a base file in key order, a batch at a time.

    Files laketide wrote are sorted (``SORTED_MARKER``), and stream. A file
    another writer wrote carries no order guarantee; it is read whole and
    sorted once. An empty file yields one empty batch of its schema.
    ``virtual``: the table has no meta columns, and each row's key is made from its key fields.
    """
    with reading_data_file(io, path), io.open_input(path) as f:
        parquet = pq.ParquetFile(f)
        meta = parquet.schema_arrow.metadata or {}
        if columns is not None:
            columns = [c for c in columns if c in parquet.schema_arrow.names]
        read = columns if virtual is None else virtual.columns(columns)  # the key fields stand for the key

        def keyed(rows: pa.Table) -> pa.Table:
            return rows if virtual is None else virtual.keyed(rows, columns)

        if meta.get(SORTED_MARKER.encode()) != RECORD_KEY.encode():
            yield keyed(parquet.read(columns=read)).sort_by(RECORD_KEY)
            return
        empty = True
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=read):
            empty = False
            yield keyed(pa.Table.from_batches([batch]))
        if empty:
            schema = parquet.schema_arrow
            yield (schema if columns is None else pa.schema([schema.field(c) for c in columns])).empty_table()


def _base_batches(io: FileIO, fs: FileSlice, batch_rows: int, columns: list[str] | None = None) -> Iterator[pa.Table]:
    if fs.base_file is None:
        return iter([pa.table({RECORD_KEY: pa.array([], pa.string())})])
    return key_ordered_batches(io, fs.base_file.path, batch_rows, columns)


def merge_slice_batches(
    io: FileIO,
    fs: FileSlice,
    visible: Callable[[str], bool],
    rule: MergeRule,
    batch_rows: int = MERGE_BATCH_ROWS,
    columns: list[str] | None = None,
) -> Iterator[pa.Table]:
    """The records of one file slice, a key range at a time: memory holds the slice's logs and one base batch.

    Each batch of the key-sorted base file takes the log records and deletes of
    its key range, applied block by block as for the whole slice; the last one
    takes every key above it. ``columns`` (the key and the ordering field among
    them) reads only those.
    """
    return _merged(io, fs, _log_ops(io, fs, visible, columns), rule, batch_rows, columns)


def _merged(
    io: FileIO,
    fs: FileSlice,
    ops: list[LogOp],
    rule: MergeRule,
    batch_rows: int,
    columns: list[str] | None,
    keys: pa.Array | None = None,
) -> Iterator[pa.Table]:
    """The slice's rows, a base batch's key range at a time; only those of ``keys``, when given."""
    if keys is not None:
        ops = _ops_of_keys(ops, keys)
    ops = folded(ops, rule)
    lower: str | None = None
    batches = _base_batches(io, fs, batch_rows, columns)
    current = next(batches)
    for following in batches:
        upper = current[RECORD_KEY][-1].as_py() if current.num_rows else lower
        yield apply_ops(_of_keys(current, keys), [op.within(lower, upper) for op in ops], rule)
        lower, current = upper, following
    yield apply_ops(_of_keys(current, keys), [op.within(lower, None) for op in ops], rule)


def _ops_of_keys(ops: list[LogOp], keys: pa.Array) -> list[LogOp]:
    """The part of each block whose keys are among ``keys``, found in one lookup: ``pc.is_in`` builds its
    hash set of ``keys`` at every call, and a call per block was a fifth of a late-event check."""
    if not ops:
        return ops
    rows = [op.rows for op in ops]
    among = pc.is_in(
        pa.chunked_array([c for r in rows for c in r[RECORD_KEY].cast(keys.type).chunks], keys.type), value_set=keys
    )
    parts, at = [], 0
    for op, r in zip(ops, rows):
        parts.append(op._with(r.filter(among.slice(at, r.num_rows))))
        at += r.num_rows
    return parts


def _of_keys(rows: pa.Table, keys: pa.Array | None) -> pa.Table:
    return rows if keys is None or not rows.num_rows else rows.filter(pc.is_in(rows[RECORD_KEY], value_set=keys))


def stored_ordering(
    io: FileIO,
    fs: FileSlice,
    visible: Callable[[str], bool],
    rule: MergeRule,
    lowest: pa.Scalar,
    keys: pa.Array | None = None,
) -> pa.Table | None:
    """For every key (of ``keys``, when given) whose stored ordering value can be above ``lowest``, its key
    and a value that is above ``lowest`` exactly where the stored row's is; ``None`` when no stored row can
    be newer than ``lowest``. Only the records of ``keys`` are merged: the merge is per key.

    The base file's footer statistics and the logs' records bound what each file holds, so a stream whose
    events arrive in order reads no row of the slice. Late events newer than every row of the base file
    (late by less than the time since the last compaction, the common case) read the slice's logs only:
    a base row cannot be above ``lowest``, and under event-time ordering no base row changes which log
    record wins, so the logs merged alone answer the same; a whole base file is read only for events
    older than some of its rows. Each file's bound is read once per process (``ordering_bounds.FILE_BOUNDS``): files
    never change once written, so a later micro-batch reads only new logs."""
    field = _ordering_field(rule)
    bounds = [file_bound(io, lf.path, lf.size, field, lambda lf=lf: log_max(io, lf.path, field)) for lf in fs.log_files]
    if fs.base_file is None and not fs.log_files:
        return None  # nothing stored
    base_may_exceed = False
    if fs.base_file is not None:
        path = fs.base_file.path
        base = file_bound(
            io, path, fs.base_file.size, field, lambda: footer_max(io, path, field)
        )  # None: no statistics
        base_may_exceed = base is None or may_exceed([base], lowest)
    if not base_may_exceed and None not in bounds and not may_exceed(bounds, lowest):
        return None
    columns = [RECORD_KEY, field]
    # a data block whose every value is at most ``lowest`` cannot hold a stored row newer than an incoming one,
    # and leaving its rows out cannot make another block's row win: under event-time ordering a key's row is its
    # highest record, and its deletes and rollbacks are all still applied. A stream whose partitions run a little
    # apart (Kafka) reads the last block or two of a slice, not every block since its compaction.
    ops = _log_ops(io, fs, visible, columns, above=(field, lowest))
    if not base_may_exceed:
        fs = dataclasses.replace(fs, base_file=None)
    return pa.concat_tables(
        list(_merged(io, fs, ops, rule, MERGE_BATCH_ROWS, columns, keys)), promote_options="permissive"
    )


def stored_rows(
    io: FileIO, fs: FileSlice, visible: Callable[[str], bool], rule: MergeRule, keys: pa.Array, columns: list[str]
) -> pa.Table:
    """The stored rows of ``keys`` (their key and ``columns``): the slice merged for those keys alone."""
    ordering: list[str] = [rule.ordering_field] if rule.ordering_field else []
    wanted = list(dict.fromkeys([RECORD_KEY, *columns, *ordering]))
    if fs.base_file is None and not fs.log_files:
        return pa.table({RECORD_KEY: pa.array([], pa.string())})
    ops = _log_ops(io, fs, visible, wanted)
    return pa.concat_tables(
        list(_merged(io, fs, ops, rule, MERGE_BATCH_ROWS, wanted, keys)), promote_options="permissive"
    )


def merge_slice(io: FileIO, fs: FileSlice, visible: Callable[[str], bool], rule: MergeRule) -> pa.Table:
    """The records of one file slice: its base file with every counted log block applied in order."""
    return pa.concat_tables(list(merge_slice_batches(io, fs, visible, rule)), promote_options="permissive")


def log_file_keys(io: FileIO, path: str) -> pa.Array:
    """The record keys in a log file's data blocks, whatever their instant (an index over-approximates safely)."""
    arrays: list[pa.Array] = []
    data = (b for b in read_blocks(io.read_bytes(path)) if b.block_type in DATA_BLOCKS)
    try:
        # ``extend`` keeps the blocks it took before a torn one raises
        arrays.extend(data_block_rows(block, [RECORD_KEY])[RECORD_KEY].combine_chunks() for block in data)
    except CorruptLog as torn:
        log.warning("%s: %s; the keys before it are read", path, torn)
    return pa.concat_arrays([a.cast(pa.string()) for a in arrays]) if arrays else pa.array([], pa.string())


def _ordering_field(rule: MergeRule) -> str:
    """The ordering field a merge by ordering values needs."""
    if rule.ordering_field is None:
        raise ValueError("stored ordering values are asked of a table with no ordering field")
    return rule.ordering_field
