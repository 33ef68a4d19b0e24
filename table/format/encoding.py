"""Parquet encodings chosen from the data, for base files and log blocks alike."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.table.format.schema import COMMIT_TIME, FILE_NAME, PARTITION_PATH, RECORD_KEY

DICTIONARY_SAMPLE_ROWS = 16 * 1024
# In the footers of base files laketide writes: their rows are sorted by record key, so merges may stream them.
SORTED_MARKER = "laketide.sorted.by"
# The codecs of new files, unless ``write.parquet_compression`` / ``write.log_compression`` say otherwise.
# Base files: zstd's are a third smaller than snappy's at the same batch times. Log blocks live until the
# next compaction, and zstd's fixed cost per column chunk (about 0.05 ms) is half again a small block's write.
BASE_FILE_CODEC = "zstd"
LOG_BLOCK_CODEC = "snappy"


def dictionary_columns(rows: pa.Table) -> list[str]:
    """Columns worth dictionary encoding: those with at most one distinct value in two rows.

    Trying a dictionary on a column of unique values (record keys, sequence
    numbers) and falling back to plain costs about twice the whole write and
    makes the file larger. The first rows decide, as parquet-mr decides on its
    first page. Nested columns are written plain.
    """
    sample = rows.slice(0, DICTIONARY_SAMPLE_ROWS)
    # a column with more than half as many distinct values as the sample's rows among its first half and
    # one has more among all of them: counting those first decides the unique columns, the costliest to
    # count, at half the cost, and the same way
    head = sample.slice(0, sample.num_rows // 2 + 1)
    return [
        field.name
        for field in sample.schema
        if pa.types.is_dictionary(field.type)  # rows that come encoded are written so (``repeated_runs``)
        or (
            not pa.types.is_nested(field.type)
            and _distinct(head, field.name) * 2 <= sample.num_rows
            and _distinct(sample, field.name) * 2 <= sample.num_rows
        )
    ]


def _distinct(rows: pa.Table, column: str) -> int:
    return pc.count_distinct(rows[column], mode="all").as_py()


# the meta columns with one value in a whole file (the others, sequence number and key, are unique per row)
ONE_PER_FILE = (COMMIT_TIME, PARTITION_PATH, FILE_NAME)


def records_dictionary_columns(rows: pa.Table) -> list[str]:
    """``dictionary_columns`` decided once for every file of one write task, from its incoming records
    (their first rows), with the meta columns that hold one value per file.

    Each file group's log block would otherwise decide for itself: counting the distinct values of
    every column of every block took a fifth of a merge-on-read micro-batch's write time. The records of
    one task share their columns' nature (a status column repeats in every group), so one decision holds.
    """
    records = rows.select([c for c in rows.column_names if not c.startswith("_lt_") and c != RECORD_KEY])
    return dictionary_columns(records) + list(ONE_PER_FILE)


def repeated_runs(values: list[str], counts: list[int]) -> pa.DictionaryArray:
    """Each of ``values`` repeated its count, one after the other, dictionary-encoded: what parquet and an index run
    (``index.shard_run``) keep as a dictionary anyway. A bulk insert's partition and file id of every key, and a
    file's one-value meta columns, were one string per row (100 MB for a 1M-row load), hashed back into one."""
    codes = {value: code for code, value in enumerate(dict.fromkeys(values))}
    indices = np.repeat(np.fromiter((codes[v] for v in values), np.int32, len(values)), counts)
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(list(codes), pa.string()))
