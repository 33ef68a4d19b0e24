"""The bucket writer: merge one file group's current slice with its incoming records.

Copy-on-write: the result is a new base file for the file group. Both sides
are sorted by record key, so the merge streams the old base file batch by
batch and memory stays bounded by the batch size plus the incoming records,
whatever the size of the file group.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import flag_mask
from laketide.index.key_order import key_order
from laketide.table.format.commit import NULL_COMMIT, WriteStat
from laketide.table.format.encoding import ONE_PER_FILE, repeated_runs
from laketide.table.format.files import BaseFile
from laketide.table.format.schema import (
    COMMIT_SEQNO,
    COMMIT_TIME,
    FILE_NAME,
    IS_DELETED,
    PARTITION_PATH,
    RECORD_KEY,
    with_meta_schema,
)
from laketide.table.reading.log_merge import rows_of_keys
from laketide.table.reading.slice_reader import key_ordered_batches
from laketide.table.reading.unchanged import fill_from_stored
from laketide.table.storage.io import FileIO
from laketide.writer.files.base_file import BaseFileWriter, FileLayout, MetaColumns, encoded_text
from laketide.writer.files.settings import FileSettings, SequenceNumbers, TaskFiles


@dataclass(frozen=True)
class FileGroupTarget:
    """Where one file group's new slice goes, and the slice it replaces."""

    partition: str
    file_id: str
    current: BaseFile | None = None


@dataclass
class _Counts:
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    late: int = 0  # incoming records older than the stored row, which event-time ordering keeps


def conform(rows: pa.Table, schema: pa.Schema, meta: dict[str, pa.Array]) -> pa.Table:
    """``rows`` in ``schema``'s column order and types: ``meta`` columns first, missing columns null."""
    n = rows.num_rows
    # by name, once: ``Table.column_names`` builds a new list at every call, which per field per file was most of this
    columns = dict(zip(rows.column_names, rows.columns))
    arrays = []
    for field in schema:
        if field.name in meta:
            arrays.append(meta[field.name])
        elif field.name in columns:
            column = columns[field.name]
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def stamp_meta_columns(
    rows: pa.Table,
    schema: pa.Schema,
    instant_time: str,
    seqnos: SequenceNumbers,
    partition: str,
    file_name: str | None,
    encoded: bool = False,
) -> pa.Table:
    """Incoming records with this instant's meta columns, numbered on from ``seqnos``; ``encoded``: those of one
    value as dictionaries (``encoding.repeated_runs``), for a file of new records alone (``append_inserts``).
    ``file_name`` None: without ``_hoodie_file_name``, which a base file's writer adds (``BaseFileWriter``)."""
    n = rows.num_rows

    def one_value(value: str) -> pa.Array:
        return repeated_runs([value], [n]) if encoded else pa.repeat(pa.scalar(value, pa.string()), n)

    meta = {
        COMMIT_TIME: one_value(instant_time),
        COMMIT_SEQNO: seqnos.next(n),
        RECORD_KEY: rows[RECORD_KEY],
        PARTITION_PATH: one_value(partition),
    }
    if file_name is None:
        schema = without_file_name(schema)
    else:
        meta[FILE_NAME] = one_value(file_name)
    return conform(rows, encoded_text(schema, ONE_PER_FILE) if encoded else schema, meta)


def without_file_name(schema: pa.Schema) -> pa.Schema:
    """``schema`` without ``_hoodie_file_name``: the columns of rows a ``BaseFileWriter`` takes, which adds it."""
    at = schema.get_field_index(FILE_NAME)
    return schema if at < 0 else schema.remove(at)


class BucketWriter:
    """Writes the new slice of one file group for one instant."""

    def __init__(
        self,
        io: FileIO,
        target: FileGroupTarget,
        settings: FileSettings,
        task: TaskFiles,
    ):
        """A file group's new base file, written by ``task`` with the plan's ``settings``."""
        self.io = io
        self.target = target
        self.instant_time = task.instant_time
        self.schema = with_meta_schema(settings.table_schema)
        self.new_file = BaseFile(target.partition, target.file_id, task.write_token, task.instant_time)
        self.avro_schema = settings.avro_schema
        self.bloom = settings.bloom
        self.ordering_field = settings.ordering_field
        self.counts = _Counts()
        self.seqnos = task.seqnos
        self.dictionary = task.dictionary
        self.compression = settings.compression
        self.placeholder = settings.placeholder
        self.virtual_keys = settings.virtual_keys

    def _stamp(self, rows: pa.Table, encoded: bool = False) -> pa.Table:
        partition = self.target.partition
        return stamp_meta_columns(rows, self.schema, self.instant_time, self.seqnos, partition, None, encoded)

    def _keep_old(self, rows: pa.Table) -> pa.Table:
        """Rows copied from the old slice keep their commit time and sequence number (``conform`` takes every column
        the rows have); the new file's name is added as it is written."""
        return conform(rows, without_file_name(self.schema), {})

    def _late(self, old: pa.Table, incoming: pa.Table, at: np.ndarray) -> np.ndarray | None:
        """Which incoming records (upserts and deletes) have an ordering value below the stored row's;
        ``at`` is each one's stored row, or -1. None when none is late.

        A tie goes to the incoming record, and so does a stored row without an
        ordering value, as in Hudi's ``DefaultHoodieRecordPayload``.
        """
        if self.ordering_field is None or self.ordering_field not in old.column_names or not (at >= 0).any():
            return None
        kind = self.schema.field(self.ordering_field).type
        stored = old[self.ordering_field].cast(kind).take(pa.array(at, mask=at < 0))
        late = pc.fill_null(pc.greater(stored, incoming[self.ordering_field].cast(kind)), False).to_numpy(
            zero_copy_only=False
        )
        return late if late.any() else None

    def _merge_chunk(self, old: pa.Table, incoming: pa.Table) -> tuple[pa.Table, pa.ChunkedArray | None]:
        """The merged rows sorted by key, and the keys it inserts.

        One hash lookup says which stored row each incoming key replaces; the result is then taken once
        from the stored rows and the stamped incoming ones, in key order. Only inserts need a sort to find
        their place among the stored keys: updates take their stored row's.
        """
        at = rows_of_keys(incoming[RECORD_KEY], old[RECORD_KEY])
        late = self._late(old, incoming, at)
        if late is not None:
            self.counts.late += int(late.sum())
            incoming, at = incoming.filter(pa.array(~late)), at[~late]
        if incoming.num_rows == 0:
            return self._keep_old(old), None
        existed = at >= 0
        deleted = flag_mask(incoming, IS_DELETED)
        incoming = fill_from_stored(incoming, at, old, self.placeholder, deleted)
        inserting = ~deleted & ~existed
        self.counts.deletes += int((deleted & existed).sum())
        self.counts.updates += int((~deleted & existed).sum())
        self.counts.inserts += int(inserting.sum())
        upserts = incoming if not deleted.any() else incoming.filter(pa.array(~deleted))
        order = self._merged_order(old, upserts, at, deleted)
        # one chunk first: a take across the two chunks cost a third more than joining them and taking
        merged = pa.concat_tables([self._keep_old(old), self._stamp(upserts)]).combine_chunks().take(order)
        return merged, incoming[RECORD_KEY].filter(pa.array(inserting))

    @staticmethod
    def _merged_order(old: pa.Table, upserts: pa.Table, at: np.ndarray, deleted: np.ndarray) -> pa.Array:
        """Row numbers into ``old`` followed by ``upserts`` that list the merged rows in key order."""
        n_old = old.num_rows
        slot = np.arange(
            n_old, dtype=np.int64
        )  # what takes each stored row's place: itself, an upsert, or nothing (-1)
        slot[at[deleted & (at >= 0)]] = -1
        upsert_at = at[~deleted]
        updates = upsert_at >= 0
        slot[upsert_at[updates]] = n_old + np.flatnonzero(updates)
        rows = slot[slot >= 0]
        if updates.all():
            return pa.array(rows)
        rows = np.concatenate([rows, n_old + np.flatnonzero(~updates)])
        keys = pa.chunked_array(old[RECORD_KEY].chunks + upserts[RECORD_KEY].chunks).take(pa.array(rows))
        return pa.array(rows[key_order(keys)])

    def write(self, incoming: pa.Table) -> WriteStat:
        """Merge ``incoming`` (one row per key, sorted by ``_hoodie_record_key``) into a new base file."""
        current = self.target.current
        if current is None:
            self.start(keys=incoming.num_rows)
        else:
            self.start(FileLayout.of(self.io, current.path, self.bloom.kind))
        try:
            keys = incoming[RECORD_KEY]
            pos = 0
            if current is not None:
                for old in key_ordered_batches(self.io, current.path, virtual=self.virtual_keys):
                    if old.num_rows == 0:
                        continue
                    # incoming keys up to the last key of this batch of stored rows merge with it
                    end = pos + (pc.sum(pc.less_equal(keys.slice(pos), old[RECORD_KEY][-1])).as_py() or 0)
                    self._file.write(*self._merge_chunk(old, incoming.slice(pos, end - pos)))
                    pos = end
            self._file.write(*self._merge_chunk(self.schema.empty_table(), incoming.slice(pos)))
        except BaseException:
            self._file.abort()
            raise
        return self.finish()

    def start(self, carried: FileLayout | None = None, keys: int | None = None, inserts_only: bool = False) -> None:
        """Open the new base file; ``keys``: how many it will hold, when that is known before its rows come;
        ``inserts_only``: its rows come by ``append_inserts`` alone."""
        if self.dictionary is not None and (carried is None or carried.dictionary is None):
            carried = replace(carried, dictionary=self.dictionary) if carried else FileLayout(None, self.dictionary)
        bloom = self.bloom if keys is None else self.bloom.at_most(keys)
        meta = MetaColumns.ENCODED if inserts_only else MetaColumns.WRITTEN
        if self.virtual_keys is not None:
            meta = MetaColumns.BLANK
        self._file = BaseFileWriter(
            self.io,
            self.new_file.path,
            self.schema,
            self.avro_schema,
            bloom,
            carried=carried,
            compression=self.compression,
            meta=meta,
        )

    def append_inserts(self, rows: pa.Table) -> None:
        """Write new records into a new file group, as they come (bulk insert): sorted by key, nothing to merge."""
        try:
            self.counts.inserts += rows.num_rows
            self._file.write(self._stamp(rows, encoded=self._file.meta is MetaColumns.ENCODED))
        except BaseException:
            self._file.abort()
            raise

    @property
    def bytes_written(self) -> int:
        """Bytes of the rows flushed so far (``rows_flushed``); the rest are buffered."""
        return self._file.bytes_written

    @property
    def rows_flushed(self) -> int:
        return self._file.rows_flushed

    def flush(self) -> None:
        """Write out the buffered rows now, so that their size is known."""
        self._file.flush()

    def abort(self) -> None:
        self._file.abort()

    def finish(self) -> WriteStat:
        try:
            result = self._file.close()
        except BaseException:
            self._file.abort()
            raise
        return WriteStat(
            file_id=self.target.file_id,
            path=self.new_file.path,
            partition_path=self.target.partition,
            prev_commit=self.target.current.instant_time if self.target.current else NULL_COMMIT,
            num_writes=result.num_rows,
            num_inserts=self.counts.inserts,
            num_update_writes=self.counts.updates,
            num_deletes=self.counts.deletes,
            total_write_bytes=result.size,
            file_size_in_bytes=result.size,
        )
