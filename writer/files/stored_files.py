"""What the write stages read of the table's stored files: the record keys of a data file, columns of a base file
and a base file's footer, each naming a damaged file (``reading_data_file``)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from laketide.table.format.damage import reading_data_file
from laketide.table.format.files import LogFile, parse_data_file
from laketide.table.format.keygen import VirtualKeys
from laketide.table.format.schema import RECORD_KEY
from laketide.table.reading.slice_reader import log_file_keys
from laketide.table.storage.io import FileIO


def key_reader(io: FileIO, virtual: VirtualKeys | None) -> Callable[[str], pa.Array]:
    """Reads the record keys of a data file: a base file's key column (made from the key fields where the table has
    no meta columns), or every key in a log file's data blocks."""
    read_columns = column_reader(io, virtual)

    def read(path: str) -> pa.Array:
        if isinstance(parse_data_file(*posixpath.split(path)), LogFile):
            return log_file_keys(io, path)
        return read_columns(path, [RECORD_KEY])[RECORD_KEY].combine_chunks()

    return read


def column_reader(io: FileIO, virtual: VirtualKeys | None) -> Callable[[str, list[str]], pa.Table]:
    """Reads columns of a base file; ``virtual``: the record key is made from the key fields (no meta columns)."""

    def read(path: str, columns: list[str]) -> pa.Table:
        with reading_data_file(io, path), io.open_input(path) as f:
            if virtual is None:
                return pq.read_table(f, columns=columns)
            return virtual.keyed(pq.read_table(f, columns=virtual.columns(columns)), columns)

    return read


def footer_reader(io: FileIO) -> Callable[[str], dict]:
    """Reads a base file's footer key-value metadata (bloom filter, key range), naming a damaged file."""

    def read(path: str) -> dict:
        with reading_data_file(io, path), io.open_input(path) as f:
            return pq.read_metadata(f).metadata or {}

    return read
