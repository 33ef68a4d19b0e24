"""Snapshot and incremental reads of file slices into Arrow tables."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from laketide.table.errors import UnsupportedTableError
from laketide.table.format.damage import reading_data_file
from laketide.table.format.instant import Instant
from laketide.table.format.properties import TableConfig
from laketide.table.format.schema import COMMIT_TIME, META_COLUMNS
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSlice, FileSystemView, Visibility
from laketide.table.reading.log_merge import MergeRule
from laketide.table.reading.slice_reader import merge_slice
from laketide.table.storage.io import FileIO


def read_base_file(io: FileIO, path: str, columns: list[str] | None = None) -> pa.Table:
    with reading_data_file(io, path), io.open_input(path) as f:
        return pq.read_table(f, columns=columns)


def read_slices(
    io: FileIO,
    slices: Iterable[FileSlice],
    keep_meta: bool = True,
    visible: Callable[[str], bool] | None = None,
    rule: MergeRule = MergeRule(),
) -> pa.Table:
    """The rows of ``slices``: a slice with log files merged (blocks of instants ``visible`` accepts),
    and without ``visible`` (the read-optimized view) its base file alone."""
    tables = []
    for fs in slices:
        if fs.log_files and visible is not None:
            tables.append(merge_slice(io, fs, visible, rule))
        elif fs.base_file is not None:
            tables.append(read_base_file(io, fs.base_file.path))
    tables = [t for t in tables if t.num_rows or t.num_columns > 1]
    if not tables:
        return pa.table({})
    table = pa.concat_tables(tables, promote_options="permissive")
    if not keep_meta:
        table = table.drop_columns([c for c in META_COLUMNS if c in table.column_names])
    return table


def snapshot(
    io: FileIO, view: FileSystemView, as_of: str | None, keep_meta: bool, rule: MergeRule = MergeRule()
) -> pa.Table:
    return read_slices(io, view.latest_slices(as_of), keep_meta, view.visibility(as_of), rule)


def read_optimized(io: FileIO, view: FileSystemView, as_of: str | None, keep_meta: bool) -> pa.Table:
    """Base files only: for merge-on-read, the rows as of each slice's last compaction."""
    return read_slices(io, view.latest_slices(as_of), keep_meta)


def commits_in_window(timeline: Timeline, start: str | None, end: str | None) -> list[Instant]:
    """Completed writes whose visible time lies in ``(start, end]``.

    Version 6 compares instant times, version 8 completion times, as Hudi does.
    """
    return [
        i
        for i in timeline.completed_writes()
        if (start is None or timeline.visible_time(i) > start) and (end is None or timeline.visible_time(i) <= end)
    ]


def slices_up_to(view: FileSystemView, end: str | None) -> tuple[list[FileSlice], Visibility]:
    """The latest slices, and what counts in them, up to an incremental read's ``end``: the writes whose visible
    time is at most ``end`` (``commits_in_window``), so by instant time on version 6 and by completion time on 8,
    where a write that began before ``end`` and completed after it is not in it."""
    if end is not None and view.timeline.config.version >= 8:
        return view.latest_slices_completed_by(end)
    return view.latest_slices(end), view.visibility(end)


def check_incremental(config: TableConfig, uri: str) -> None:
    """Refuse an incremental read of a table without meta columns, as Hudi does (``IncrementalRelation``): no
    row there says which commit wrote it, so a window's rows cannot be told from the file group's others."""
    if not config.populate_meta_fields:
        raise UnsupportedTableError(
            f"{uri} has no meta columns (hoodie.populate.meta.fields = false): no row says which commit wrote it, "
            "so it has no incremental reads; read a snapshot, or one as of an instant, instead"
        )


def incremental(
    io: FileIO, view: FileSystemView, start: str | None, end: str | None, rule: MergeRule = MergeRule()
) -> pa.Table:
    """Rows written by the commits in ``(start, end]``, from the file groups they touched (``check_incremental``
    first)."""
    timeline = view.timeline
    admitted = commits_in_window(timeline, start, end)
    if not admitted:
        return read_slices(io, [])
    touched = set().union(*(timeline.commit_metadata(i).file_ids() for i in admitted))
    latest, visibility = slices_up_to(view, end)
    slices = [s for s in latest if (s.partition, s.file_id) in touched]
    table = read_slices(io, slices, True, visibility, rule)
    if COMMIT_TIME not in table.column_names:
        return table
    times = pa.array(sorted(i.timestamp for i in admitted), pa.string())
    return table.filter(pc.is_in(table[COMMIT_TIME], value_set=times))
