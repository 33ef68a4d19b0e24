"""Quarantine: the rows that cannot be written, with the reason, kept aside as parquet.

One file per micro-batch and writer, ``<quarantine>/writer=<id>/batch_id=<n>/part-00000.snappy.parquet``, in one
schema whichever path wrote it (the driver's threads or Spark's tasks): ``QUARANTINE_SCHEMA``. A replayed
micro-batch replaces what an earlier attempt wrote there, so each bad row is kept once.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from laketide.table.io import FileIO

QUARANTINE_SCHEMA = pa.schema(
    [("instant", pa.string()), ("reason", pa.string()), ("raw", pa.string()), ("quarantined_at", pa.timestamp("us", tz="UTC"))]
)


def quarantine_rows(instant: str, reasons: pa.Array, raws: pa.Array) -> pa.Table:
    n = len(reasons)
    now = pa.scalar(datetime.now(timezone.utc), pa.timestamp("us", tz="UTC"))
    return pa.table([pa.repeat(pa.scalar(instant, pa.string()), n), reasons, raws, pa.repeat(now, n)], schema=QUARANTINE_SCHEMA)


def clear(target: str, options: dict[str, str] | None = None) -> None:
    """Remove what an earlier attempt of the micro-batch wrote under ``target``."""
    FileIO.for_uri(target, options).delete_dir("")


def write_part(target: str, rows: pa.Table, part: int = 0, options: dict[str, str] | None = None) -> None:
    with FileIO.for_uri(target, options).open_output(f"part-{part:05d}.snappy.parquet") as f:
        pq.write_table(rows, f, compression="snappy")
