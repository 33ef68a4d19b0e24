"""Hudi's log file format: a sequence of blocks, each framed so a reader can skip or verify it.

One block, as ``HoodieLogFormatWriter.appendBlock`` writes it (big-endian)::

    "#HUDI#"                        magic
    long   block length             everything after this field, the trailing long included
    int    log format version       1
    int    block type               HoodieLogBlockType ordinal
    header                          int count, then per entry: int key, int length, UTF-8 value
    long   content length
    bytes  content
    footer                          as the header
    long   total block size         magic included, this field excluded (a reverse pointer)

An Avro data block's content (``HoodieAvroDataBlock``) is: int block version
(3), int record count, then per record an int length and the record in Avro
binary, written with the schema in the SCHEMA header.
"""

from __future__ import annotations

import datetime
import json
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from laketide.table.errors import LaketideError
from laketide.table.format import avro_models
from laketide.table.format.encoding import LOG_BLOCK_CODEC, dictionary_columns
from laketide.table.format.schema import RECORD_KEY, schema_from_avro, storage_schema

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
AVRO_BLOCK_VERSION = 3
DELETE_BLOCK_VERSION = 3


class BlockType(IntEnum):
    """``HoodieLogBlock.HoodieLogBlockType``, by ordinal."""

    COMMAND_BLOCK = 0
    DELETE_BLOCK = 1
    CORRUPT_BLOCK = 2
    AVRO_DATA_BLOCK = 3
    HFILE_DATA_BLOCK = 4
    PARQUET_DATA_BLOCK = 5
    CDC_DATA_BLOCK = 6


# the blocks of records laketide reads (``data_block_rows``)
DATA_BLOCKS = (BlockType.PARQUET_DATA_BLOCK, BlockType.AVRO_DATA_BLOCK)


class Header(IntEnum):
    """``HoodieLogBlock.HeaderMetadataType``, by ordinal."""

    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4


class CorruptLog(LaketideError, ValueError):
    pass


@dataclass(frozen=True)
class LogBlock:
    block_type: int
    header: dict[int, str] = field(default_factory=dict)
    content: bytes | pa.Buffer = b""
    footer: dict[int, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return b"".join(self.pieces())

    def pieces(self) -> list[bytes | pa.Buffer]:
        """The block as a log file holds it, in pieces to write one after another: the framing is made
        around the content, which is not copied (a parquet block's content is its writer's own buffer,
        a third of a megabyte for a few thousand rows; joining it into one ``bytes`` copied it twice more)."""
        header, footer = _metadata_bytes(self.header), _metadata_bytes(self.footer)
        length = 4 + 4 + len(header) + 8 + len(self.content) + len(footer) + 8
        prefix = b"".join(
            [
                MAGIC,
                struct.pack(">q", length),
                struct.pack(">ii", LOG_FORMAT_VERSION, self.block_type),
                header,
                struct.pack(">q", len(self.content)),
            ]
        )
        framed = len(prefix) + len(self.content) + len(footer)
        return [prefix, self.content, footer + struct.pack(">q", framed)]


def _metadata_bytes(entries: dict[int, str]) -> bytes:
    # Readers build a map, so the order carries nothing; keeping the given order lets a block read be written back as it
    # was.
    out = [struct.pack(">i", len(entries))]
    for key, value in entries.items():
        encoded = value.encode("utf-8")
        out.append(struct.pack(">ii", int(key), len(encoded)) + encoded)
    return b"".join(out)


class _Cursor:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptLog(f"log block truncated at byte {self.pos}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def long(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def metadata(self) -> dict[int, str]:
        entries = {}
        for _ in range(self.int()):
            key = self.int()
            entries[key] = self.take(self.int()).decode("utf-8")
        return entries


def read_blocks(data: bytes) -> Iterator[LogBlock]:
    """Every block of a log file, in order. A torn last block (a crash while appending) raises ``CorruptLog``."""
    cursor = _Cursor(data)
    while cursor.pos < len(data):
        start = cursor.pos
        if cursor.take(len(MAGIC)) != MAGIC:
            raise CorruptLog(f"no log block magic at byte {start}")
        end = cursor.pos + 8 + cursor.long()
        version, block_type = cursor.int(), cursor.int()
        if version != LOG_FORMAT_VERSION:
            raise CorruptLog(
                f"log format version {version} at byte {start}; only version {LOG_FORMAT_VERSION} is known"
            )
        header = cursor.metadata()
        content = cursor.take(cursor.long())
        footer = cursor.metadata()
        if cursor.long() != cursor.pos - 8 - start or cursor.pos != end:
            raise CorruptLog(f"log block at byte {start} does not end where its length says")
        yield LogBlock(block_type, header, content, footer)


def avro_data_block(schema_name: str, records: Iterable[dict], header: dict[int, str] | None = None) -> LogBlock:
    """A ``HoodieAvroDataBlock`` of ``records``, written with a registry schema (see ``avro_models``)."""
    encoded = [avro_models.encode(schema_name, r) for r in records]
    content = struct.pack(">ii", AVRO_BLOCK_VERSION, len(encoded)) + b"".join(
        struct.pack(">i", len(e)) + e for e in encoded
    )
    return LogBlock(
        BlockType.AVRO_DATA_BLOCK, {**(header or {}), Header.SCHEMA: avro_models.schema_json(schema_name)}, content
    )


def avro_payloads(block: LogBlock) -> list[bytes]:
    """The Avro binary of each record of an Avro data block."""
    if block.block_type != BlockType.AVRO_DATA_BLOCK:
        raise ValueError(f"block type {block.block_type} is not an Avro data block")
    cursor = _Cursor(block.content)
    version = cursor.int()
    if version != AVRO_BLOCK_VERSION:
        raise CorruptLog(f"Avro data block version {version}; only version {AVRO_BLOCK_VERSION} is known")
    return [cursor.take(cursor.int()) for _ in range(cursor.int())]


def avro_records(block: LogBlock, reader_schema=None) -> list[dict]:
    """The records of an Avro data block, read with the schema in its header."""
    writer_schema = fastavro.parse_schema(json.loads(block.header[Header.SCHEMA]))
    return [avro_models.decode(payload, writer_schema, reader_schema) for payload in avro_payloads(block)]


def parquet_data_block(
    rows: pa.Table,
    header: Mapping[Header, str],
    dictionary: list[str] | None = None,
    compression: str = LOG_BLOCK_CODEC,
    ordering_field: str | None = None,
) -> LogBlock:
    """A ``HoodieParquetDataBlock``: the content is a whole parquet file of the records.

    The records carry the meta columns, ``_hoodie_file_name`` holding the file
    id, as Hudi's append handle writes them. ``dictionary``: the columns to dictionary-encode,
    when the caller decided them (``encoding.records_dictionary_columns``); else the records decide.
    ``ordering_field`` gets statistics too: a writer bounds a log's ordering values from its footers.
    """
    # an Arrow buffer, not a Python file: the parquet writer then never takes the GIL back to write a page
    sink = pa.BufferOutputStream()
    names = set(rows.column_names)  # once: the property builds a new list at every call
    encoded = [c for c in dictionary if c in names] if dictionary is not None else dictionary_columns(rows)
    # statistics for the key only: a block is read whole, and computing every column's took a sixth of its write
    statistics = [RECORD_KEY] + ([ordering_field] if ordering_field in names else [])
    # pyarrow takes a list of columns for both (documented), where its unannotated defaults say bool
    pq.write_table(
        rows,
        sink,
        compression=compression,
        store_schema=False,
        use_dictionary=encoded,  # pyright: ignore[reportArgumentType]
        write_statistics=statistics,  # pyright: ignore[reportArgumentType]
    )
    return LogBlock(BlockType.PARQUET_DATA_BLOCK, {int(key): value for key, value in header.items()}, sink.getvalue())


def data_block_rows(block: LogBlock, columns: list[str] | None = None) -> pa.Table:
    """The records of a data block (Parquet or Avro) as an Arrow table, or only ``columns`` of them."""
    if block.block_type == BlockType.PARQUET_DATA_BLOCK:
        return pq.ParquetFile(pa.BufferReader(block.content)).read(columns=columns)
    if block.block_type == BlockType.AVRO_DATA_BLOCK:
        schema = block.header[Header.SCHEMA]
        rows = pa.Table.from_pylist(avro_records(block), schema=storage_schema(schema_from_avro(schema)))
        return rows.select([c for c in columns if c in rows.column_names]) if columns else rows
    raise CorruptLog(f"block type {block.block_type} is not a data block laketide reads")


def wrap_ordering_value(value, kind: pa.DataType | None):
    """An ordering value as the branch of ``HoodieDeleteRecord.orderingVal`` that Hudi writes for its type.

    Without an ordering field Hudi writes ``IntWrapper(0)``, the natural order:
    the delete wins over whatever came before it.
    """
    if value is None or kind is None:
        return (f"{avro_models.NAMESPACE}.IntWrapper", {"value": 0})
    if pa.types.is_boolean(kind):
        branch = "Boolean"
    elif pa.types.is_integer(kind):
        branch = "Long" if kind.bit_width == 64 else "Int"
    elif pa.types.is_floating(kind):
        branch = "Double" if kind.bit_width == 64 else "Float"
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        branch = "String"
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        branch = "Bytes"
    elif pa.types.is_date(kind):
        branch, value = "Date", (value - datetime.date(1970, 1, 1)).days
    elif pa.types.is_decimal(kind):
        branch = "Decimal"
    elif pa.types.is_timestamp(kind):
        branch, value = "TimestampMicros", pa.scalar(value, kind).cast(pa.timestamp("us", kind.tz)).value
    else:
        raise ValueError(f"an ordering field of type {kind} cannot go into a delete block")
    return (f"{avro_models.NAMESPACE}.{branch}Wrapper", {"value": value})


def delete_block(
    keys: list[str],
    partitions: list[str],
    ordering_values: list,
    ordering_type: pa.DataType | None,
    header: dict[int, str],
) -> LogBlock:
    """A ``HoodieDeleteBlock`` (version 3): int version, int length, then a ``HoodieDeleteRecordList`` in Avro
    binary."""
    records = [
        {"recordKey": k, "partitionPath": p, "orderingVal": wrap_ordering_value(v, ordering_type)}
        for k, p, v in zip(keys, partitions, ordering_values)
    ]
    datum = avro_models.encode("HoodieDeleteRecordList", {"deleteRecordList": records})
    return LogBlock(BlockType.DELETE_BLOCK, header, struct.pack(">ii", DELETE_BLOCK_VERSION, len(datum)) + datum)


def deleted_records(block: LogBlock) -> list[tuple[str | None, str | None, object]]:
    """(record key, partition path, ordering value) of each record a delete block removes."""
    cursor = _Cursor(block.content)
    version = cursor.int()
    if version != DELETE_BLOCK_VERSION:
        raise CorruptLog(f"delete block version {version}; only version {DELETE_BLOCK_VERSION} is known")
    datum = cursor.take(cursor.int())
    decoded = avro_models.decode(datum, avro_models.schema("HoodieDeleteRecordList"))
    return [
        (r["recordKey"], r["partitionPath"], r["orderingVal"]["value"] if r["orderingVal"] is not None else None)
        for r in decoded["deleteRecordList"]
    ]


def first_block_instant(stream) -> str | None:
    """The instant of a log file's first block, read from its header alone: the instant that created the file."""

    def take(n: int) -> bytes:
        chunk = stream.read(n)
        if len(chunk) != n:
            raise CorruptLog("log file ends inside its first block header")
        return chunk

    if take(len(MAGIC)) != MAGIC:
        raise CorruptLog("no log block magic at the start of the file")
    take(8 + 4 + 4)
    header = {}
    for _ in range(struct.unpack(">i", take(4))[0]):
        key, length = struct.unpack(">ii", take(8))
        header[key] = take(length).decode("utf-8")
    return header.get(Header.INSTANT_TIME)
