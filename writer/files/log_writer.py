"""The log writer: one deltacommit's records for one file group of a merge-on-read table.

Upserts and deletes go into a new log file on the group's current slice (a
Parquet data block, then a delete block), so a deltacommit never reads the
base file, and each deltacommit's blocks live in files of their own: a
rollback deletes them, and a reader that skips uncommitted blocks
never meets a torn one on a committed file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import EXISTED, as_mask, flag_mask
from laketide.table.format.commit import WriteStat
from laketide.table.format.files import LogFile, log_write_token
from laketide.table.format.logfile import Header, delete_block, parquet_data_block
from laketide.table.format.schema import IS_DELETED, RECORD_KEY
from laketide.table.format.view import FileSlice
from laketide.table.reading.log_merge import MergeRule, rows_of_keys
from laketide.table.reading.ordering_bounds import remember_log_bound
from laketide.table.reading.slice_reader import stored_ordering, stored_rows
from laketide.table.reading.unchanged import fill_from_stored_rows
from laketide.table.storage.io import FileIO
from laketide.writer.files.bucket_writer import stamp_meta_columns
from laketide.writer.files.settings import FileSettings, TaskFiles


@dataclass(frozen=True)
class LogTarget:
    """Where one file group's log file goes: its current slice and the next free version there."""

    version: int
    file_slice: FileSlice  # the group's latest committed slice, as the plan's view listed it
    # the instant the log file is named by: version 8's deltacommit writing it; None, version 6's slice base instant
    log_instant: str | None = None

    @property
    def partition(self) -> str:
        return self.file_slice.partition

    @property
    def file_id(self) -> str:
        return self.file_slice.file_id

    @property
    def base_instant(self) -> str:
        return self.file_slice.base_instant

    @property
    def base_file(self) -> str | None:
        """The slice's base file name."""
        return self.file_slice.base_file.name if self.file_slice.base_file else None

    @property
    def slice_paths(self) -> list[str]:
        """The slice's base and log files, whose keys index a group the index did not cover."""
        return [f.path for f in self.file_slice.files]


@dataclass(frozen=True)
class OrderingSpan:
    """One file group's incoming records under event-time ordering: the lowest ordering value among those
    whose key the group holds (only a stored row newer than that can make one late) and the highest among
    its upserts (the new log file's bound, ``remember_log_bound``). Null when there is none."""

    lowest: pa.Scalar
    highest: pa.Scalar

    @classmethod
    def of(cls, incoming: pa.Table, field: str, kind: pa.DataType) -> OrderingSpan:
        """The span of one file group's records."""
        values = incoming[field].cast(kind)
        existed = values.filter(pc.fill_null(incoming[EXISTED], False)) if EXISTED in incoming.column_names else values
        upserts = (
            values.filter(pc.invert(pc.fill_null(incoming[IS_DELETED], False)))
            if IS_DELETED in incoming.column_names
            else values
        )
        return cls(pc.min(existed), pc.max(upserts))


def ordering_spans(rows: pa.Table, starts: np.ndarray, field: str, kind: pa.DataType) -> list[OrderingSpan] | None:
    """The ``OrderingSpan`` of each file group of a write task's rows (sorted by group, each group's first
    row at ``starts``) in one aggregation: taken group by group, its Arrow calls were a tenth of a small log
    file's write. ``None`` for an ordering type Arrow cannot aggregate by group (``OrderingSpan.of`` then)."""
    n = rows.num_rows
    values = rows[field].cast(kind)
    nulls = pa.nulls(n, kind)
    lowest = pc.if_else(pc.fill_null(rows[EXISTED], False), values, nulls) if EXISTED in rows.column_names else values
    highest = (
        pc.if_else(pc.fill_null(rows[IS_DELETED], False), nulls, values) if IS_DELETED in rows.column_names else values
    )
    group = np.repeat(np.arange(len(starts), dtype=np.int32), np.diff(np.append(starts, n)))
    try:
        found = (
            pa.table({"g": group, "lo": lowest, "hi": highest})
            .group_by("g", use_threads=False)
            .aggregate([("lo", "min"), ("hi", "max")])
        )
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    at = np.empty(len(starts), np.int64)
    at[found["g"].to_numpy()] = np.arange(found.num_rows)
    lows, highs = found["lo_min"].take(at), found["hi_max"].take(at)
    return [OrderingSpan(lows[i], highs[i]) for i in range(len(starts))]


class LogWriter:
    def __init__(
        self,
        io: FileIO,
        target: LogTarget,
        settings: FileSettings,
        task: TaskFiles,
        schema: pa.Schema,
    ):
        """A log file on a group's slice, written by ``task`` with the plan's ``settings``; ``schema``: its blocks',
        the meta columns included."""
        self.io = io
        self.target = target
        self.instant_time = instant_time = task.instant_time
        self.schema = schema
        self.avro_schema = settings.avro_schema
        self.ordering_field = settings.ordering_field
        self.seqnos = task.seqnos
        self.dictionary = task.dictionary
        self.compression = settings.log_compression
        self.placeholder = settings.placeholder
        token = task.write_token
        self.log_file = LogFile(
            target.partition,
            target.file_id,
            target.log_instant or target.base_instant,
            target.version,
            log_write_token(token, instant_time),
        )

    def drop_late(self, incoming: pa.Table, span: OrderingSpan | None = None) -> tuple[pa.Table, int]:
        """Incoming records (upserts and deletes) older than the row the slice stores, and how many.

        Every reader's merge would keep the stored row anyway (event-time ordering); dropping them here
        counts them as copy-on-write counts them, and keeps them out of the log. Only the key and
        ordering columns of the slice are read, and only when a stored row can be newer than an
        incoming one (``stored_ordering``). ``span``: the records' ``OrderingSpan``, when the caller has it.
        """
        field = self.ordering_field
        if field is None or not incoming.num_rows or field not in incoming.column_names:
            return incoming, 0
        kind = self.schema.field(field).type
        lowest = (span or OrderingSpan.of(incoming, field, kind)).lowest
        if not lowest.is_valid:
            return incoming, 0
        stored = stored_ordering(
            self.io,
            self.target.file_slice,
            self._visible,
            MergeRule(field),
            lowest,
            incoming[RECORD_KEY].combine_chunks(),
        )
        if stored is None or not stored.num_rows:
            return incoming, 0
        at = rows_of_keys(incoming[RECORD_KEY], stored[RECORD_KEY])
        late = pc.fill_null(
            pc.greater(stored[field].cast(kind).take(pa.array(at, mask=at < 0)), incoming[field].cast(kind)), False
        )
        count = pc.sum(late).as_py() or 0
        return (incoming.filter(pc.invert(late)), count) if count else (incoming, 0)

    def _visible(self, instant: str) -> bool:
        return instant < self.instant_time  # one writer: every earlier log block is committed

    def _stored(self, keys: pa.Array, columns: list[str]) -> pa.Table:
        return stored_rows(
            self.io, self.target.file_slice, self._visible, MergeRule(self.ordering_field), keys, columns
        )

    def write(self, incoming: pa.Table, existed: pa.Array, highest: pa.Scalar | None = None) -> WriteStat:
        """Append ``incoming`` (one row per key); ``existed`` tells which keys the group already holds.
        ``highest``: an upper bound of the upserts' ordering values, when the caller has it (``OrderingSpan``)."""
        deleted, existed = flag_mask(incoming, IS_DELETED), as_mask(existed)
        incoming = fill_from_stored_rows(incoming, existed, deleted, self.placeholder, self._stored, RECORD_KEY)
        if deleted.any():
            upserts, deletes = incoming.filter(pa.array(~deleted)), incoming.filter(pa.array(deleted))
        else:  # the common case: no copy
            upserts, deletes = incoming, incoming.slice(0, 0)
        header = {Header.INSTANT_TIME: self.instant_time, Header.SCHEMA: self.avro_schema}
        blocks = []
        if upserts.num_rows:
            # the one-value meta columns as dictionaries: parquet then hashes no string of theirs
            rows = stamp_meta_columns(
                upserts,
                self.schema,
                self.instant_time,
                self.seqnos,
                self.target.partition,
                self.target.file_id,
                encoded=True,
            )
            blocks.append(parquet_data_block(rows, header, self.dictionary, self.compression, self.ordering_field))
        if deletes.num_rows:
            field = self.ordering_field
            values = (
                deletes[field].to_pylist() if field and field in deletes.column_names else [None] * deletes.num_rows
            )
            kind = self.schema.field(field).type if field and field in self.schema.names else None
            keys = deletes[RECORD_KEY].to_pylist()
            blocks.append(
                delete_block(
                    keys, [self.target.partition] * len(keys), values, kind, {Header.INSTANT_TIME: self.instant_time}
                )
            )
        size = self.io.write_parts(self.log_file.path, [part for block in blocks for part in block.pieces()])
        if self.ordering_field is not None and self.ordering_field in upserts.column_names and upserts.num_rows:
            bound = highest if highest is not None and highest.is_valid else pc.max(upserts[self.ordering_field])
            remember_log_bound(self.io, self.log_file.path, size, self.ordering_field, bound)
        existed_upserts = int((~deleted & existed).sum())
        return WriteStat(
            file_id=self.target.file_id,
            path=self.log_file.path,
            partition_path=self.target.partition,
            prev_commit=self.target.base_instant,
            num_writes=upserts.num_rows,
            num_inserts=upserts.num_rows - existed_upserts,
            num_update_writes=existed_upserts,
            num_deletes=int((deleted & existed).sum()),
            total_write_bytes=size,
            file_size_in_bytes=size,
            base_file=self.target.base_file or "",
            log_files=[self.log_file.name],
            log_version=self.target.version,
            log_offset=0,
        )
