"""Spark's Python workers, which outlive their tasks: started and warmed ahead of the first micro-batch, and made
to give freed heap back after each piece of work.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from laketide.writer.slots import split_by

log = logging.getLogger(__name__)


def give_back_memory() -> None:
    """Return the C heap's free pages to the system: after each shard or write slot a task runs, and at the end
    of a prepare task. A Python worker outlives its tasks and its Arrow memory comes from the C library's malloc
    (``session.py``), which keeps what is freed for reuse, fragmented: after a 1M-row load, its two write tasks'
    workers held 0.43 GB each, freed but not returned, through every micro-batch the driver wrote after it; and a
    write slot began with 200 to 350 MB held by the prepare task and the slot before it, for none of its own
    Arrow buffers (the worker's peak went 370 to 280 MB). Where the C library has no ``malloc_trim`` (not glibc),
    nothing."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def warm_workers(spark: SparkSession) -> None:
    """Start a Python worker on every core, import the stage modules in it and run Arrow's parquet, IPC and
    compute code once, so that the first micro-batch on Spark's tasks does not pay for it (a 1M-row load on
    ``local[2]``: 2.4 s against 3.3; a fresh worker's first prepare of half of it 0.35 s against 0.56
    once warmed). Run at the job's start beside the query's; a failure only costs the first micro-batch that
    time again. Spark keeps an idle worker about a minute."""
    context = spark.sparkContext
    cores = max(1, context.defaultParallelism)
    try:
        context.parallelize(range(cores), cores).mapPartitions(_warmed).collect()
    except Exception:
        log.warning(
            "the Python workers of Spark's tasks could not be started ahead of the first micro-batch", exc_info=True
        )


def _warmed(numbers: Iterable[int]) -> Iterator[int]:
    """The stage modules imported, and a small table taken through what a micro-batch does to its rows."""
    import io

    import pyarrow.parquet as pq

    from laketide.index.hashing import hash64
    from laketide.writer import bulk_stage, exchange, landing, prepare  # noqa: F401

    n = 10_000
    rows = pa.table(
        {
            "n": np.arange(n),
            "key": pa.array(np.arange(n).astype(str)),
            "x": np.linspace(0, 1, n),
            "at": pa.array(np.arange(n), pa.timestamp("us", "UTC")),
        }
    )
    parquet = io.BytesIO()
    pq.write_table(rows, parquet, compression="zstd")
    parquet.seek(0)
    rows = pa.Table.from_batches(list(pq.ParquetFile(parquet).iter_batches()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, rows.schema) as ipc:
        ipc.write_table(rows)
    rows = pa.ipc.open_file(sink.getvalue()).read_all()
    hash64(rows["key"])
    split_by(rows.sort_by([("key", "ascending"), ("x", "descending"), ("n", "descending")]), rows["n"].to_numpy() % 4)
    pc.unique(rows["key"])
    yield from numbers
