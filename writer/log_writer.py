"""The log writer: one deltacommit's records for one file group of a merge-on-read table.

Upserts and deletes go into a new log file on the group's current slice (a
Parquet data block, then a delete block), so a deltacommit never reads the
base file, and each deltacommit's blocks live in files of their own: a
rollback deletes them, and a reader that skips uncommitted blocks
never meets a torn one on a committed file.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from laketide.table.commit import WriteStat
from laketide.table.files import LogFile
from laketide.table.io import FileIO
from laketide.table.logfile import Header, delete_block, parquet_data_block
from laketide.table.schema import IS_DELETED, RECORD_KEY
from laketide.writer.bucket_writer import stamp_meta_columns


@dataclass(frozen=True)
class LogTarget:
    """Where one file group's log file goes: its current slice and the next free version there."""

    partition: str
    file_id: str
    base_instant: str
    base_file: str | None  # the slice's base file name
    version: int
    slice_paths: tuple[str, ...] = ()  # the slice's base and log files, whose keys index a group the index did not cover


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
    ):
        """``schema`` includes the meta columns. ``ordering_field`` is set under event-time
        ordering; a delete then carries its ordering value, so a reader keeps a newer stored row."""
        self.io = io
        self.target = target
        self.instant_time = instant_time
        self.task_partition = task_partition
        self.schema = schema
        self.avro_schema = avro_schema
        self.ordering_field = ordering_field
        self.seqno = first_seqno
        self.log_file = LogFile(target.partition, target.file_id, target.base_instant, target.version, token)

    def write(self, incoming: pa.Table, existed: pa.Array) -> WriteStat:
        """Append ``incoming`` (one row per key); ``existed`` tells which keys the group already holds."""
        deleted = pc.fill_null(incoming[IS_DELETED], False) if IS_DELETED in incoming.column_names else pa.repeat(pa.scalar(False), incoming.num_rows)
        upserts, deletes = incoming.filter(pc.invert(deleted)), incoming.filter(deleted)
        header = {Header.INSTANT_TIME: self.instant_time, Header.SCHEMA: self.avro_schema}
        blocks = []
        if upserts.num_rows:
            rows, self.seqno = stamp_meta_columns(
                upserts, self.schema, self.instant_time, self.task_partition, self.seqno, self.target.partition, self.target.file_id
            )
            blocks.append(parquet_data_block(rows, header))
        if deletes.num_rows:
            field = self.ordering_field
            values = deletes[field].to_pylist() if field and field in deletes.column_names else [None] * deletes.num_rows
            kind = self.schema.field(field).type if field and field in self.schema.names else None
            keys = deletes[RECORD_KEY].to_pylist()
            blocks.append(delete_block(keys, [self.target.partition] * len(keys), values, kind, {Header.INSTANT_TIME: self.instant_time}))
        data = b"".join(b.to_bytes() for b in blocks)
        self.io.write_bytes(self.log_file.path, data)
        existed_upserts = pc.sum(pc.and_(pc.invert(deleted), existed)).as_py() or 0
        return WriteStat(
            file_id=self.target.file_id,
            path=self.log_file.path,
            partition_path=self.target.partition,
            prev_commit=self.target.base_instant,
            num_writes=upserts.num_rows,
            num_inserts=upserts.num_rows - existed_upserts,
            num_update_writes=existed_upserts,
            num_deletes=pc.sum(pc.and_(deleted, existed)).as_py() or 0,
            total_write_bytes=len(data),
            file_size_in_bytes=len(data),
            base_file=self.target.base_file or "",
            log_files=[self.log_file.name],
            log_version=self.target.version,
            log_offset=0,
        )
