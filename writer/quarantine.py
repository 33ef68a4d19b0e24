"""Quarantine: the rows that cannot be written, with the reason, kept aside as parquet.

One file per micro-batch and writer, ``<quarantine>/writer=<id>/batch_id=<n>/part-00000.snappy.parquet``, in one
schema whichever path wrote it (the driver's threads or Spark's tasks): ``QUARANTINE_SCHEMA``. A replayed
micro-batch replaces what an earlier attempt wrote there, so each bad row is kept once.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from laketide.index.columns import SOURCE_FILE, SOURCE_OFFSET
from laketide.table.lru import LruCache
from laketide.table.storage.io import FileEntry, FileIO

RAW_SHOWN = 2000
QUARANTINE_SCHEMA = pa.schema(
    [
        ("instant", pa.string()),
        ("reason", pa.string()),
        ("raw", pa.string()),
        ("quarantined_at", pa.timestamp("us", tz="UTC")),
        ("source", pa.string()),
    ]  # the landing file, or "topic/partition@offset"; files written before it lack the column
)
_PLACE = re.compile(r"writer=([^/]+)/batch_id=(\d+)/")


def quarantine_rows(instant: str, reasons: pa.Array, raws: pa.Array, sources: pa.Array | None = None) -> pa.Table:
    n = len(reasons)
    now = pa.scalar(datetime.now(UTC), pa.timestamp("us", tz="UTC"))
    sources = sources if sources is not None else pa.nulls(n, pa.string())
    return pa.table(
        [pa.repeat(pa.scalar(instant, pa.string()), n), reasons, raws, pa.repeat(now, n), sources],
        schema=QUARANTINE_SCHEMA,
    )


def sources_of(rows: pa.Table) -> pa.Array:
    """Where each of ``rows`` came from: its landing file, or its Kafka topic, partition and offset."""
    if SOURCE_FILE not in rows.column_names:
        return pa.nulls(rows.num_rows, pa.string())
    files = rows[SOURCE_FILE].combine_chunks().cast(pa.string())
    if SOURCE_OFFSET not in rows.column_names:
        return files
    offsets = rows[SOURCE_OFFSET].combine_chunks().to_pylist()
    places = []
    for origin, offset in zip(files.to_pylist(), offsets):
        topic, _, partition = (origin or "").rpartition("/")
        places.append(f"{topic}/{int(partition)}@{offset}" if partition.isdigit() and offset is not None else origin)
    return pa.array(places, pa.string())


def clear(target: str, options: dict[str, str] | None = None) -> None:
    """Remove what an earlier attempt of the micro-batch wrote under ``target``."""
    FileIO.for_uri(target, options).delete_dir("")


def write_part(target: str, rows: pa.Table, part: int = 0, options: dict[str, str] | None = None) -> None:
    with FileIO.for_uri(target, options).open_output(f"part-{part:05d}.snappy.parquet") as f:
        pq.write_table(rows, f, compression="snappy")


class QuarantinedRow(BaseModel):
    instant: str
    reason: str
    raw: str = Field(description=f"the row as it came, cut to {RAW_SHOWN} characters")
    quarantined_at: str
    source: str | None = Field(default=None, description="the landing file, or topic/partition@offset")
    batch_id: int | None = Field(default=None, description="the micro-batch that read it")
    writer: str | None = None


class QuarantineSummary(BaseModel):
    """What the quarantine holds: rows per reason (the most frequent), and the newest rows."""

    path: str
    total: int = 0
    files: int = 0
    reasons: dict[str, int] = Field(default_factory=dict)
    sample: list[QuarantinedRow] = Field(default_factory=list)


# rows per reason of each quarantine file, by (path, size, mtime): a replayed micro-batch rewrites its file
# (another size or time). Shared by every request of a process; ``LruCache`` guards itself.
_FILE_REASONS: LruCache[dict[str, int]] = LruCache(4096)


def _file_reasons(io: FileIO, entry: FileEntry) -> dict[str, int]:
    key = (io.full_path(entry.path), entry.size, entry.mtime_ns)
    counts = _FILE_REASONS.get(key)
    if counts is None:
        with io.open_input(entry.path) as f:
            reasons = pq.read_table(f, columns=["reason"])["reason"]
        counts = {r["values"]: r["counts"] for r in pc.value_counts(reasons).to_pylist()}
        _FILE_REASONS.put(key, counts)
    return counts


def summarize(
    target: str, options: dict[str, str] | None = None, sample: int = 10, reasons: int = 20
) -> QuarantineSummary:
    """Rows per reason (the ``reasons`` most frequent) and the ``sample`` newest rows of the quarantine at
    ``target``."""
    io = FileIO.for_uri(target, options)
    files = sorted(
        (e for e in io.walk("") if not e.is_dir and e.path.endswith(".parquet")), key=lambda e: e.mtime_ns, reverse=True
    )
    counts: Counter[str] = Counter()
    for entry in files:
        counts.update(_file_reasons(io, entry))
    rows: list[QuarantinedRow] = []
    for entry in files:
        if len(rows) >= sample:
            break
        with io.open_input(entry.path) as f:
            # the first rows only: a micro-batch of bad rows can make a large file, and this runs at every refresh
            table = pa.Table.from_batches(
                list(itertools.islice(pq.ParquetFile(f).iter_batches(batch_size=sample - len(rows)), 1))
            )
        place = _PLACE.search(entry.path)
        rows += [
            QuarantinedRow(
                instant=r["instant"],
                reason=r["reason"],
                raw=(r["raw"] or "")[:RAW_SHOWN],
                quarantined_at=r["quarantined_at"].isoformat(),
                source=r.get("source"),
                writer=place.group(1) if place else None,
                batch_id=int(place.group(2)) if place else None,
            )
            for r in table.to_pylist()
        ]
    return QuarantineSummary(
        path=io.full_path(""),
        total=sum(counts.values()),
        files=len(files),
        reasons=dict(counts.most_common(reasons)),
        sample=rows,
    )
