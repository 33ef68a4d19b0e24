"""Rows moved between Spark's tasks as Arrow parts: one Spark row per part, its rows in an Arrow IPC stream.

Shuffling a micro-batch as Spark rows converts every value twice, Arrow to Spark's rows on the way out of
a Python task and back to Arrow on the way into the next, and the JVM sorts and serializes each row: for
a 1M-row, 15-column micro-batch that was most of its time on the tasks path. A part carries its rows as
bytes the JVM only moves, with the few numbers the driver needs about it, so shuffles, the local
checkpoint and the counts touch a handful of Spark rows per task.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from laketide.index.columns import REASON

# the task a part goes to, its rows and bad rows, a sample of its range keys, and the rows themselves
PART_SCHEMA = pa.schema(
    [("task", pa.int32()), ("rows", pa.int64()), ("bad", pa.int64()), ("sample", pa.list_(pa.string())), ("sample_weight", pa.float64()), ("arrow", pa.binary())]
)
# a part's rows at most, encoded: a Spark binary value and an Arrow batch between the JVM and Python stay
# far from their 2 GB limits, and parts of 4 to 16 MB moved through a local checkpoint fastest (64 MB
# ones took 1.7 times as long)
PART_BYTES = 16 * 2**20
# lz4 inside the stream: the JVM copies, shuffles and checkpoints about half the bytes (a 1M-row micro-batch
# on the tasks path took 3.3 s against 3.9), for less than the copies cost it to compress them
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def _encoded(rows: pa.Table) -> pa.Array:
    """``rows`` as one binary value: an Arrow IPC stream, wrapped without a copy."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema, options=_IPC_OPTIONS) as stream:
        stream.write_table(rows)
    data = sink.getvalue()
    return pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(np.array([0, data.size], np.int32).tobytes()), data])


def pack(task: int, rows: pa.Table, sample: tuple[list[str], float] = ([], 0.0)) -> Iterator[pa.RecordBatch]:
    """``rows`` as parts for ``task``, each under ``PART_BYTES``; the first carries the sample."""
    if not rows.num_rows:
        return
    per_part = max(1, int(rows.num_rows * PART_BYTES / max(rows.nbytes, 1)))
    for start in range(0, rows.num_rows, per_part):
        part = rows.slice(start, per_part)
        bad = int(pc.sum(pc.is_valid(part[REASON])).as_py() or 0) if REASON in part.column_names else 0
        keys, weight = sample if start == 0 else ([], 0.0)
        numbers = [pa.array([value], field.type) for value, field in zip((task, part.num_rows, bad, keys, weight), PART_SCHEMA)]
        yield pa.RecordBatch.from_arrays([*numbers, _encoded(part)], schema=PART_SCHEMA)


def pack_all(parts: Iterable[tuple[int, pa.Table]]) -> Iterator[pa.RecordBatch]:
    """Each (task, rows) packed."""
    for task, rows in parts:
        yield from pack(task, rows)


def unpack(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.Table]:
    """The rows of each part, in the order the parts came."""
    for batch in batches:
        for encoded in batch.column("arrow"):
            with pa.ipc.open_stream(encoded.as_buffer()) as stream:
                yield stream.read_all()


def unpacked(batches: Iterable[pa.RecordBatch]) -> pa.Table | None:
    """The rows of every part as one table; ``None`` for no rows."""
    tables = [t for t in unpack(batches) if t.num_rows]
    return pa.concat_tables(tables) if tables else None
