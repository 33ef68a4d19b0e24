"""Writing one Hudi base file: meta columns first, rows sorted by record key, Hudi's footer.

The footer carries what Hudi's Spark writer puts there: the bloom filter of
the file's keys, the min and max record key and the Avro schema, so that
Hudi's BLOOM index (and ours) can prune the file by key.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from laketide.index.bloom import FOOTER_BLOOM, FOOTER_BLOOM_TYPE, FOOTER_MAX_KEY, FOOTER_MIN_KEY, BloomFilter
from laketide.table.files import PARTITION_METADATA, partition_metadata
from laketide.table.io import FileIO
from laketide.table.schema import RECORD_KEY

# Marks files whose rows laketide wrote in record-key order, so a merge may stream them.
SORTED_MARKER = "laketide.sorted.by"


@dataclass(frozen=True)
class BaseFileResult:
    path: str
    num_rows: int
    size: int
    min_key: str | None
    max_key: str | None


class BaseFileWriter:
    """Streams sorted record batches into one parquet base file."""

    def __init__(
        self,
        io: FileIO,
        path: str,
        schema: pa.Schema,
        avro_schema: str,
        bloom_kind: str = "DYNAMIC_V0",
        row_group_rows: int = 128 * 1024,
    ):
        self.io = io
        self.path = path
        self.schema = schema
        self.avro_schema = avro_schema
        self.bloom = BloomFilter.empty(bloom_kind)
        self.row_group_rows = row_group_rows
        self.num_rows = 0
        self.min_key: str | None = None
        self.max_key: str | None = None
        self._sink = io.open_output(path)
        self._writer = pq.ParquetWriter(self._sink, schema, compression="snappy", store_schema=False)

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        keys = batch.column(RECORD_KEY)
        first, last = keys[0].as_py(), keys[-1].as_py()
        if self.max_key is not None and first < self.max_key:
            raise ValueError(f"rows of {self.path} must arrive sorted by record key ({first!r} after {self.max_key!r})")
        self.bloom.add_many(keys)
        self.min_key = first if self.min_key is None else self.min_key
        self.max_key = last
        self.num_rows += batch.num_rows
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        self._writer.write_table(table.cast(self.schema), row_group_size=self.row_group_rows)

    @property
    def bytes_written(self) -> int:
        """Bytes flushed so far: each ``write`` ends in whole row groups."""
        return self._sink.tell()

    def close(self) -> BaseFileResult:
        footer = {
            "parquet.avro.schema": self.avro_schema,
            "writer.model.name": "avro",
            FOOTER_BLOOM: self.bloom.serialize(),
            FOOTER_BLOOM_TYPE: self.bloom.kind,
            SORTED_MARKER: RECORD_KEY,
        }
        if self.min_key is not None:
            footer[FOOTER_MIN_KEY] = self.min_key
            footer[FOOTER_MAX_KEY] = self.max_key
        self._writer.add_key_value_metadata(footer)
        self._writer.close()
        self._sink.close()
        return BaseFileResult(self.path, self.num_rows, self.io.size(self.path), self.min_key, self.max_key)

    def abort(self) -> None:
        """Close and delete a file that will not be committed."""
        try:
            self._writer.close()
            self._sink.close()
        finally:
            self.io.delete(self.path)


def ensure_partition_metadata(io: FileIO, partition: str, instant_time: str, depth: int) -> None:
    """Write ``.hoodie_partition_metadata`` the first time a partition is written."""
    path = posixpath.join(partition, PARTITION_METADATA) if partition else PARTITION_METADATA
    if not io.exists(path):
        io.write_atomic(path, partition_metadata(instant_time, depth), overwrite=True)
