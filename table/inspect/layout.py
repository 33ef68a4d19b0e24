"""The table's layout as an operator reads it: partitions and file groups by size, small files, and how much
of what is on storage is live.

Part of ``table.inspect`` (``InspectTable.layout`` and ``InspectTable.file_group_page``). Both come from one
listing (the file-system view); only the file groups of the page asked for have their footers read, so a
table of 10,000 file groups answers as fast as one of ten.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from laketide.table.format.view import FileSlice

if TYPE_CHECKING:
    from laketide.table.table import Table

GroupOrder = Literal["partition", "size"]


class FileGroupInfo(BaseModel):
    """A file group's latest slice: ``records`` counts its base file's rows (logs are merged at read time)."""

    partition: str
    file_id: str
    base_instant: str
    base_file: str | None
    size_bytes: int
    records: int
    log_files: int = 0


class PartitionLayout(BaseModel):
    partition: str
    file_groups: int
    live_bytes: int
    small_files: int = Field(description="file groups under the small-file limit")
    log_files: int


class TableLayout(BaseModel):
    table_type: str
    partitions: list[PartitionLayout] = Field(description="one page of partitions, in partition order")
    partition_count: int
    file_groups: int
    small_files: int
    small_file_bytes: int = Field(description="the limit a file group counts as small under (write.small_file_limit)")
    live_bytes: int = Field(description="bytes of the latest file slices: what a snapshot read opens")
    total_bytes: int = Field(
        description="bytes of every data file on storage: older versions and uncommitted files too"
    )
    log_files: int


class FileGroupPage(BaseModel):
    items: list[FileGroupInfo]
    total: int
    offset: int
    limit: int


def _partition_layouts(slices: list[FileSlice], small_file_bytes: int) -> list[PartitionLayout]:
    counts: dict[str, list[int]] = {}  # partition -> [file groups, live bytes, small files, log files]
    for s in slices:
        size = s.size
        c = counts.setdefault(s.partition, [0, 0, 0, 0])
        c[0] += 1
        c[1] += size
        c[2] += size < small_file_bytes
        c[3] += len(s.log_files)
    return [
        PartitionLayout(partition=p, file_groups=c[0], live_bytes=c[1], small_files=c[2], log_files=c[3])
        for p, c in sorted(counts.items())
    ]


def layout(table: Table, small_file_bytes: int, offset: int = 0, limit: int = 100) -> TableLayout:
    """Partitions (``limit`` of them from ``offset``) and the table's totals."""
    view = table.file_system_view()
    slices = view.latest_slices()
    partitions = _partition_layouts(slices, small_file_bytes)
    on_storage = sum(f.size for g in view.groups.values() for f in [*g.base_files, *g.log_files])
    return TableLayout(
        table_type=table.config.table_type,
        partitions=partitions[offset : offset + limit],
        partition_count=len(partitions),
        file_groups=len(slices),
        small_files=sum(p.small_files for p in partitions),
        small_file_bytes=small_file_bytes,
        live_bytes=sum(p.live_bytes for p in partitions),
        total_bytes=on_storage,
        log_files=sum(p.log_files for p in partitions),
    )


def file_group_infos(table: Table, slices: list[FileSlice]) -> list[FileGroupInfo]:
    """Each slice's file group, its base file's rows read from the footer."""
    out = []
    for s in slices:
        records = 0
        if s.base_file is not None:
            with table.io.open_input(s.base_file.path) as f:
                records = pq.read_metadata(f).num_rows
        out.append(
            FileGroupInfo(
                partition=s.partition,
                file_id=s.file_id,
                base_instant=s.base_instant,
                base_file=s.base_file.name if s.base_file else None,
                size_bytes=s.size,
                records=records,
                log_files=len(s.log_files),
            )
        )
    return out


def file_group_page(
    table: Table, partition: str | None, offset: int, limit: int, order: GroupOrder = "partition"
) -> FileGroupPage:
    """``limit`` file groups from ``offset``, by partition and id, or smallest first (``order="size"``)."""
    slices = table.file_system_view().latest_slices(partition=partition)
    if order == "size":
        slices.sort(key=lambda s: (s.size, s.partition, s.file_id))
    return FileGroupPage(
        items=file_group_infos(table, slices[offset : offset + limit]), total=len(slices), offset=offset, limit=limit
    )
