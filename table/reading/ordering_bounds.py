"""The highest ordering value each data file of a slice can hold: what the late check of a merge-on-read
write compares incoming records with before it reads any row (``slice_reader.stored_ordering``).

A base file's bound comes from its footer's statistics; a log file's from its data blocks (their parquet
footers where laketide wrote them, else their decoded values), or from what this process wrote.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from laketide.table.format.damage import reading_data_file
from laketide.table.format.logfile import DATA_BLOCKS, BlockType, CorruptLog, LogBlock, data_block_rows, read_blocks
from laketide.table.lru import LruCache
from laketide.table.storage.io import FileIO

# The highest ordering values of data files, by (table, path, size, field): one per process, shared by the
# driver's threads and a Spark worker's tasks (see ``LruCache``). A value covers every data block of a log
# file, committed or not, so it bounds what a reader can see; ``None`` means no bound (no statistics, a
# torn log), and the slice is read.
FILE_BOUNDS: LruCache[pa.Array] = LruCache(20_000)
_NO_BOUND = pa.nulls(
    0
)  # (not pa.array: its first call imports pandas) kept for a file with no bound, so it is not read again


def file_bound(io: FileIO, path: str, size: int, field: str, read: Callable[[], pa.Array | None]) -> pa.Array | None:
    key = _bound_key(io, path, size, field)
    found = FILE_BOUNDS.get(key)
    if found is None:
        found = read()
        FILE_BOUNDS.put(key, _NO_BOUND if found is None else found)
    return None if found is _NO_BOUND else found


def remember_log_bound(io: FileIO, path: str, size: int, field: str, highest: pa.Scalar) -> None:
    """The bound of a log file this process just wrote, so the next micro-batch need not read it back."""
    FILE_BOUNDS.put(_bound_key(io, path, size, field), pa.array([highest.as_py()], highest.type))


def _bound_key(io: FileIO, path: str, size: int, field: str) -> tuple:
    return (io.base_path, path, size, field)


def log_max(io: FileIO, path: str, field: str) -> pa.Array | None:
    """The highest ordering value of each data block of one log file, rolled back or not: from a parquet
    block's footer statistics where it has them (laketide writes them), else from its decoded values."""
    maxima = []
    try:
        for block in read_blocks(io.read_bytes(path)):
            if block.block_type not in DATA_BLOCKS:
                continue
            found = _block_stats_max(block, field)
            if found is None:
                rows = data_block_rows(block, [field])
                found = pc.max(rows[field]) if field in rows.column_names and rows.num_rows else None
            if found is not None and found.is_valid:
                maxima.append(found)
    except CorruptLog:
        return None
    return pa.array([m.as_py() for m in maxima], maxima[0].type) if maxima else pa.array([], pa.null())


def block_may_exceed(block: LogBlock, field: str, lowest: pa.Scalar) -> bool:
    """Whether a data block can hold a value of ``field`` above ``lowest``: by its parquet footer's statistics (no
    row decoded); an Avro block, or one without statistics, may."""
    found = _block_stats_max(block, field)
    return found is None or not found.is_valid or may_exceed([pa.array([found.as_py()], found.type)], lowest)


def _block_stats_max(block: LogBlock, field: str) -> pa.Scalar | None:
    """``field``'s maximum over a parquet data block from its footer's statistics; ``None`` for an Avro block or
    one without statistics."""
    if block.block_type != BlockType.PARQUET_DATA_BLOCK:
        return None
    return _stats_max(pq.read_metadata(pa.BufferReader(block.content)), field)


def may_exceed(bounds: list[pa.Array], lowest: pa.Scalar) -> bool:
    """Whether any value of ``bounds`` is above ``lowest``; values that do not compare may be."""
    kind = lowest.type
    if all(b.type == kind for b in bounds) and _orders_in_python(kind):
        # one type that Python orders as Arrow does: compared as Python values, without building arrays for each
        # file group of each micro-batch
        values = [v for b in bounds for v in b.to_pylist() if v is not None]
        return bool(values) and max(values) > lowest.as_py()
    try:
        newest = pc.max(pa.chunked_array([b.cast(lowest.type) for b in bounds], lowest.type))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return True
    return newest.is_valid and pc.greater(newest, lowest).as_py()


def _orders_in_python(kind: pa.DataType) -> bool:
    """Types whose Python values (``as_py``) order exactly as Arrow orders them: not floats (NaN), not
    nanosecond timestamps (``datetime`` drops the nanoseconds), not intervals."""
    exact_timestamp = pa.types.is_timestamp(kind) and kind.unit != "ns"
    return pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_date(kind) or exact_timestamp


def footer_max(io: FileIO, path: str, field: str) -> pa.Array | None:
    """The row groups' maximum of ``field`` from a parquet footer; ``None`` where a row group has no statistics."""
    with reading_data_file(io, path), io.open_input(path) as f:
        meta = pq.read_metadata(f)
    return _row_group_maxima(meta, field)


def _row_group_maxima(meta: pq.FileMetaData, field: str) -> pa.Array | None:
    """Each row group's maximum of ``field`` from its statistics; ``None`` where a row group has none."""
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    if field not in names:
        return None
    at = names.index(field)
    maxima = []
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(at).statistics
        if stats is None or not stats.has_min_max:
            return None
        maxima.append(stats.max)
    try:
        return pa.array(maxima, meta.schema.to_arrow_schema().field(field).type)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


def _stats_max(meta: pq.FileMetaData, field: str) -> pa.Scalar | None:
    """``field``'s maximum over a parquet file from its footer; ``None`` where a row group lacks statistics."""
    maxima = _row_group_maxima(meta, field)
    if maxima is None:
        return None
    return pc.max(maxima) if len(maxima) else pa.scalar(None, maxima.type)
