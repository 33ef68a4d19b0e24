"""Parquet encodings chosen from the data, for base files and log blocks alike."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

DICTIONARY_SAMPLE_ROWS = 16 * 1024
# In the footers of base files laketide writes: their rows are sorted by record key, so merges may stream them.
SORTED_MARKER = "laketide.sorted.by"


def dictionary_columns(rows: pa.Table) -> list[str]:
    """Columns worth dictionary encoding: those with at most one distinct value in two rows.

    Trying a dictionary on a column of unique values (record keys, sequence
    numbers) and falling back to plain costs about twice the whole write and
    makes the file larger. The first rows decide, as parquet-mr decides on its
    first page. Nested columns are written plain.
    """
    sample = rows.slice(0, DICTIONARY_SAMPLE_ROWS)
    return [
        field.name
        for field in sample.schema
        if not pa.types.is_nested(field.type) and pc.count_distinct(sample[field.name], mode="all").as_py() * 2 <= sample.num_rows
    ]
