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
from laketide.index.columns import EXISTED
from laketide.table.commit import WriteStat
from laketide.table.encoding import LOG_BLOCK_CODEC
from laketide.table.files import LogFile, log_write_token
from laketide.table.io import FileIO
from laketide.table.logfile import Header, delete_block, parquet_data_block
from laketide.table.schema import IS_DELETED, RECORD_KEY
from laketide.table.slice_reader import MergeRule, remember_log_bound, rows_of_keys, stored_ordering
from laketide.table.view import FileSlice
from laketide.writer.bucket_writer import stamp_meta_columns


@dataclass(frozen=True)
class LogTarget:
    """Where one file group's log file goes: its current slice and the next free version there."""

    version: int
    file_slice: FileSlice  # the group's latest committed slice, as the plan's view listed it

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


class LogWriter:
    def __init__(
        self,
        io: FileIO,
        target: LogTarget,
        instant_time: str,
        task_partition: int,
        schema: pa.Schema,
        avro_schema: str,
        token: str,
        ordering_field: str | None = None,
        first_seqno: int = 0,
        dictionary: list[str] | None = None,
        compression: str = LOG_BLOCK_CODEC,
    ):
        """``schema`` includes the meta columns. ``ordering_field`` is set under event-time
        ordering; a delete then carries its ordering value, so a reader keeps a newer stored row.
        ``dictionary``: the columns to dictionary-encode, decided for the whole task."""
        self.io = io
        self.target = target
        self.instant_time = instant_time
        self.task_partition = task_partition
        self.schema = schema
        self.avro_schema = avro_schema
        self.ordering_field = ordering_field
        self.seqno = first_seqno
        self.dictionary = dictionary
        self.compression = compression
        self.log_file = LogFile(target.partition, target.file_id, target.base_instant, target.version, log_write_token(token, instant_time))

    def drop_late(self, incoming: pa.Table) -> tuple[pa.Table, int]:
        """Incoming records (upserts and deletes) older than the row the slice stores, and how many.

        Every reader's merge would keep the stored row anyway (event-time ordering); dropping them here
        counts them as copy-on-write counts them, and keeps them out of the log. Only the key and
        ordering columns of the slice are read, and only when a stored row can be newer than an
        incoming one (``stored_ordering``).
        """
        field = self.ordering_field
        if field is None or not incoming.num_rows or field not in incoming.column_names:
            return incoming, 0
        existed = pc.fill_null(incoming[EXISTED], False) if EXISTED in incoming.column_names else None
        kind = self.schema.field(field).type
        values = incoming[field].cast(kind)
        candidates = values.filter(existed) if existed is not None else values
        lowest = pc.min(candidates)
        if not lowest.is_valid:
            return incoming, 0
        visible = lambda instant: instant < self.instant_time  # noqa: E731  (one writer: every earlier log block is committed)
        stored = stored_ordering(self.io, self.target.file_slice, visible, MergeRule(field), lowest)
        if stored is None or not stored.num_rows:
            return incoming, 0
        at = rows_of_keys(incoming[RECORD_KEY], stored[RECORD_KEY])
        late = pc.fill_null(pc.greater(stored[field].cast(kind).take(pa.array(at, mask=at < 0)), values), False)
        count = pc.sum(late).as_py() or 0
        return (incoming.filter(pc.invert(late)), count) if count else (incoming, 0)

    def write(self, incoming: pa.Table, existed: pa.Array) -> WriteStat:
        """Append ``incoming`` (one row per key); ``existed`` tells which keys the group already holds."""
        n = incoming.num_rows
        deleted = pc.fill_null(incoming[IS_DELETED], False).to_numpy(zero_copy_only=False) if IS_DELETED in incoming.column_names else np.zeros(n, bool)
        existed = pc.fill_null(existed, False).to_numpy(zero_copy_only=False)
        if deleted.any():
            upserts, deletes = incoming.filter(pa.array(~deleted)), incoming.filter(pa.array(deleted))
        else:  # the common case: no copy
            upserts, deletes = incoming, incoming.slice(0, 0)
        header = {Header.INSTANT_TIME: self.instant_time, Header.SCHEMA: self.avro_schema}
        blocks = []
        if upserts.num_rows:
            rows, self.seqno = stamp_meta_columns(
                upserts, self.schema, self.instant_time, self.task_partition, self.seqno, self.target.partition, self.target.file_id
            )
            blocks.append(parquet_data_block(rows, header, self.dictionary, self.compression, self.ordering_field))
        if deletes.num_rows:
            field = self.ordering_field
            values = deletes[field].to_pylist() if field and field in deletes.column_names else [None] * deletes.num_rows
            kind = self.schema.field(field).type if field and field in self.schema.names else None
            keys = deletes[RECORD_KEY].to_pylist()
            blocks.append(delete_block(keys, [self.target.partition] * len(keys), values, kind, {Header.INSTANT_TIME: self.instant_time}))
        data = b"".join(b.to_bytes() for b in blocks)
        self.io.write_bytes(self.log_file.path, data)
        if self.ordering_field in upserts.column_names and upserts.num_rows:
            remember_log_bound(self.io, self.log_file.path, len(data), self.ordering_field, pc.max(upserts[self.ordering_field]))
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
            total_write_bytes=len(data),
            file_size_in_bytes=len(data),
            base_file=self.target.base_file or "",
            log_files=[self.log_file.name],
            log_version=self.target.version,
            log_offset=0,
        )
