"""What a table reads as: rows through hudi-rs, the reference reader, in an order two reads compare in, and the
bytes of its files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa


def hudi_read(path: Path | str, as_of: str | None = None, start: str | None = None, end: str | None = None) -> pa.Table:
    """Read a table with hudi-rs, the reference reader."""
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(str(Path(path).resolve())).build()
    options = HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    if start is not None or end is not None:
        options = options.with_query_type(HudiQueryType.Incremental)
        if start is not None:
            options = options.with_start_timestamp(start)
        if end is not None:
            options = options.with_end_timestamp(end)
    batches = table.read(options)
    return pa.Table.from_batches(batches) if batches else pa.table({})


def rows(table: pa.Table, key: str, columns: list[str] | None = None) -> list[dict]:
    """Rows as dicts sorted by ``key``, for row-by-row comparison.

    Ties (one key in two partitions of a non-global index) are broken by the whole row, so two reads of the
    same rows always compare equal whatever order the reader returned them in.
    """
    if table.num_rows == 0:
        return []
    if columns is not None:
        table = table.select(columns)
    return sorted(table.to_pylist(), key=lambda r: (r[key], repr(sorted(r.items()))))


def tree_digest(path: Path) -> dict[str, str]:
    """Every file under ``path`` with a hash of its bytes: equal digests mean the table did not change."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }
