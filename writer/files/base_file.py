"""Writing one Hudi base file: meta columns first, rows sorted by record key, Hudi's footer.

The footer carries what Hudi's Spark writer puts there: the bloom filter of
the file's keys, the min and max record key and the Avro schema, so that
Hudi's BLOOM index (and ours) can prune the file by key.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from enum import Enum

import pyarrow as pa
import pyarrow.parquet as pq

from laketide.index.bloom import (
    FOOTER_BLOOM,
    FOOTER_BLOOM_TYPE,
    FOOTER_MAX_KEY,
    FOOTER_MIN_KEY,
    BloomFilter,
    BloomSpec,
)
from laketide.table.format.damage import reading_data_file
from laketide.table.format.encoding import (
    BASE_FILE_CODEC,
    ONE_PER_FILE,
    SORTED_MARKER,
    dictionary_columns,
    repeated_runs,
)
from laketide.table.format.files import PARTITION_METADATA, partition_metadata
from laketide.table.format.keygen import VirtualKeys
from laketide.table.format.schema import FILE_NAME, RECORD_KEY
from laketide.table.storage.io import FileIO


@dataclass(frozen=True)
class BaseFileResult:
    path: str
    num_rows: int
    size: int
    min_key: str | None
    max_key: str | None


class MetaColumns(Enum):
    """How a base file's rows carry Hudi's meta columns."""

    # as strings, a value a row
    WRITTEN = "written"
    # the table has none (``hoodie.populate.meta.fields = false``): rows come with their keys, for the bloom filter
    # and the key range, and are written with every meta column null (``VirtualKeys.blank``)
    BLANK = "blank"
    # rows come with the meta columns of one value per file (``ONE_PER_FILE``) as dictionaries
    # (``encoding.repeated_runs``), which parquet writes as they are, where a column of strings is hashed back into one
    ENCODED = "encoded"


# rows buffered into a row group before it is written, or its Arrow bytes, whichever comes first: callers hand over
# batches of any size, and readers get row groups worth skipping by
ROW_GROUP_ROWS = 128 * 1024
ROW_GROUP_BYTES = 64 * 2**20

# a carried bloom filter that has counted more keys than this many times its file's rows (a fifth of its entries
# keys the file no longer holds) is built again: about 10 ms for 25,000 keys, once in several hundred merges under
# 2% deletes
BLOOM_REBUILD_RATIO = 1.25


@dataclass(frozen=True)
class FileLayout:
    """What a merge carries over from the base file it replaces.

    Its bloom filter: a filter may keep the keys of deleted rows (they only
    add false positives, which are confirmed against the file's keys), so the
    new file's filter is the old one plus the inserted keys, not a rebuild
    from every key (Hudi's merge handle rebuilds it). Until it has counted more
    than ``BLOOM_REBUILD_RATIO`` times the file's rows: deleted keys inserted
    again count twice, so under deletes a carried filter kept growing (a row
    of the dynamic filter at a time, up to 100,000 entries: 30 rows of 1,000
    for a file of 24,500 rows after 600 micro-batches of the soak, a third of
    the file's bytes); then the merge builds a new one, of the same row size,
    from the keys it writes.
    And the columns it dictionary-encodes, so that a file group keeps its
    encodings without sampling its rows again; only from files laketide wrote,
    since another writer may have tried a dictionary and fallen back to plain,
    which the column's encodings do not tell apart.
    """

    bloom: BloomFilter | None
    dictionary: list[str] | None
    # ``bloom`` is an empty filter of the old one's geometry, which every key written goes into
    fresh_bloom: bool = False

    @classmethod
    def of(cls, io: FileIO, path: str, bloom_kind: str) -> FileLayout:
        with reading_data_file(io, path), io.open_input(path) as f:
            meta = pq.read_metadata(f)
        bloom = BloomFilter.from_footer(meta.metadata)
        top_level = {f.name for f in meta.schema.to_arrow_schema() if not pa.types.is_nested(f.type)}
        dictionary = None
        if meta.num_row_groups and SORTED_MARKER.encode() in (meta.metadata or {}):
            group = meta.row_group(0)
            columns = (group.column(i) for i in range(group.num_columns))
            dictionary = [
                c.path_in_schema
                for c in columns
                if c.path_in_schema in top_level and any("DICTIONARY" in e for e in c.encodings)
            ]
        if bloom is None or bloom.kind != bloom_kind:
            return cls(None, dictionary)
        if bloom.count > BLOOM_REBUILD_RATIO * max(meta.num_rows, bloom.row_capacity):
            # rows of the same size, so the new filter grows by as fine steps as the old one did
            return cls(BloomFilter.empty(bloom.kind, bloom.row_capacity), dictionary, fresh_bloom=True)
        return cls(bloom, dictionary)


class BaseFileWriter:
    """Streams sorted record batches into one parquet base file, a row group at a time (``ROW_GROUP_ROWS``)."""

    def __init__(
        self,
        io: FileIO,
        path: str,
        schema: pa.Schema,
        avro_schema: str,
        bloom: BloomSpec = BloomSpec(),
        carried: FileLayout | None = None,
        compression: str = BASE_FILE_CODEC,
        meta: MetaColumns = MetaColumns.WRITTEN,
    ):
        """``carried`` is what a merge takes over from the base file it replaces: its
        bloom filter, to which ``write`` then adds only the ``inserted`` keys it is given
        (every key, into a filter built again: ``FileLayout.fresh_bloom``), and its
        dictionary-encoded columns."""
        self.io = io
        self.meta = meta
        self.path = path
        self.schema = schema
        # the Arrow schema rows are written in: the same columns and parquet types as ``schema``; the file's own
        # name is always one dictionary value (``_with_file_name``)
        self.written_schema = (
            schema
            if self.meta is MetaColumns.BLANK
            else encoded_text(schema, ONE_PER_FILE if meta is MetaColumns.ENCODED else (FILE_NAME,))
        )
        self.file_name = posixpath.basename(path)
        self.avro_schema = avro_schema
        carried_bloom = carried.bloom if carried is not None else None
        self.incremental_bloom = carried is not None and carried_bloom is not None and not carried.fresh_bloom
        self.bloom = carried_bloom if carried_bloom is not None else bloom.empty()
        self._dictionary = (
            [c for c in carried.dictionary if c in schema.names] if carried and carried.dictionary is not None else None
        )
        self.compression = compression
        self.num_rows = 0
        self.rows_flushed = 0
        self.min_key: str | None = None
        self.max_key: str | None = None
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._sink = io.open_output(path)
        self._writer: pq.ParquetWriter | None = None  # opened at the first row group, whose values choose the encodings

    def write(self, batch: pa.RecordBatch | pa.Table, inserted: pa.Array | pa.ChunkedArray | None = None) -> None:
        """Append rows sorted by key; with a carried bloom filter, ``inserted`` are the keys it does not hold yet."""
        if batch.num_rows == 0:
            return
        keys = batch.column(RECORD_KEY)
        first, last = keys[0].as_py(), keys[-1].as_py()
        if self.max_key is not None and first < self.max_key:
            raise ValueError(f"rows of {self.path} must arrive sorted by record key ({first!r} after {self.max_key!r})")
        if not self.incremental_bloom:
            self.bloom.add_many(keys)
        elif inserted is not None and len(inserted):
            self.bloom.add_many(inserted)
        self.min_key = first if self.min_key is None else self.min_key
        self.max_key = last
        self.num_rows += batch.num_rows
        table = self._with_file_name(batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch]))
        if self.meta is MetaColumns.BLANK:
            table = VirtualKeys.blank(table)
        self._pending.append(table.cast(self.written_schema))
        self._pending_rows += table.num_rows
        self._pending_bytes += table.nbytes
        if self._pending_rows >= ROW_GROUP_ROWS or self._pending_bytes >= ROW_GROUP_BYTES:
            self._flush(final=False)

    def _with_file_name(self, rows: pa.Table) -> pa.Table:
        """``rows`` with ``_hoodie_file_name``, this file's name, where the schema has it and they do not: written as
        one dictionary value, where a string a row (75 bytes) was copied through every merge and hashed back into one
        by parquet."""
        at = self.written_schema.get_field_index(FILE_NAME)
        if at < 0 or FILE_NAME in rows.schema.names:
            return rows
        field = self.written_schema.field(at)
        n = rows.num_rows
        name = pa.nulls(n, field.type) if self.meta is MetaColumns.BLANK else repeated_runs([self.file_name], [n])
        return rows.add_column(at, field, name)

    def flush(self) -> None:
        if self._pending:
            self._flush(final=True)

    def _flush(self, final: bool) -> None:
        """Write the buffered rows as whole row groups; unless ``final``, a partial last group stays buffered."""
        rows = pa.concat_tables(self._pending)
        whole = (
            rows.num_rows
            if final or self._pending_bytes >= ROW_GROUP_BYTES
            else rows.num_rows - rows.num_rows % ROW_GROUP_ROWS
        )
        if whole:
            self._parquet(rows).write_table(rows.slice(0, whole), row_group_size=ROW_GROUP_ROWS)
        rest = rows.slice(whole)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows
        self._pending_bytes = rest.nbytes if rest.num_rows else 0
        self.rows_flushed += whole

    def _parquet(self, first: pa.Table) -> pq.ParquetWriter:
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self._sink,
                self.written_schema,
                compression=self.compression,
                store_schema=False,
                # a list of columns, as pyarrow documents it, where its unannotated default says bool
                use_dictionary=self._dictionary  # pyright: ignore[reportArgumentType]
                if self._dictionary is not None
                else dictionary_columns(first),
            )
        return self._writer

    @property
    def bytes_written(self) -> int:
        """Bytes flushed so far, for the ``rows_flushed`` rows."""
        return self._sink.tell()

    def close(self) -> BaseFileResult:
        self.flush()
        footer = {
            "parquet.avro.schema": self.avro_schema,
            "writer.model.name": "avro",
            FOOTER_BLOOM: self.bloom.serialize(),
            FOOTER_BLOOM_TYPE: self.bloom.kind,
            SORTED_MARKER: RECORD_KEY,
        }
        if self.min_key is not None and self.max_key is not None:
            footer[FOOTER_MIN_KEY] = self.min_key
            footer[FOOTER_MAX_KEY] = self.max_key
        writer = self._parquet(self.written_schema.empty_table())
        writer.add_key_value_metadata(footer)
        writer.close()
        self._sink.close()
        return BaseFileResult(self.path, self.num_rows, self.io.size(self.path), self.min_key, self.max_key)

    def abort(self) -> None:
        """Close and delete a file that will not be committed. On an object store it never appears (closing it
        would complete the upload): a writer that lost its lease must not show a file even for a moment."""
        discard = getattr(self._sink, "discard", None)
        if discard is not None:
            discard()
        try:
            if self._writer is not None:
                self._writer.close()
            self._sink.close()
        finally:
            self.io.delete(self.path)


def encoded_text(schema: pa.Schema, names: tuple[str, ...]) -> pa.Schema:
    """``schema`` with the string columns ``names`` as dictionaries of strings (``encoding.repeated_runs``'s type);
    parquet writes either as the same strings."""
    for name in names:
        at = schema.get_field_index(name)
        if at >= 0 and not pa.types.is_dictionary(schema.field(at).type):
            schema = schema.set(at, schema.field(at).with_type(pa.dictionary(pa.int32(), pa.string())))
    return schema


def ensure_partition_metadata(
    io: FileIO, partition: str, instant_time: str, depth: int, ensured: set[str] | None = None
) -> None:
    """Write ``.hoodie_partition_metadata`` the first time a partition is written. ``ensured`` holds the
    partitions a task has seen to already: one request per partition, not one per file group."""
    if ensured is not None and partition in ensured:
        return
    path = posixpath.join(partition, PARTITION_METADATA) if partition else PARTITION_METADATA
    if not io.is_file(path):
        io.write_atomic(path, partition_metadata(instant_time, depth), overwrite=True)
    if ensured is not None:
        ensured.add(partition)
