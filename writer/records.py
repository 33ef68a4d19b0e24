"""Record keys and partition paths of incoming rows, as Hudi's key generators derive them."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _as_text(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    return pc.cast(column, pa.string())


def record_key_column(rows: pa.Table, fields: Sequence[str]) -> pa.ChunkedArray | pa.Array:
    """``SimpleKeyGenerator`` (one field: its value) or ``ComplexKeyGenerator`` (``f1:v1,f2:v2``).

    A row with a null key field gets a null key; validation quarantines it.
    """
    if len(fields) == 1:
        return _as_text(rows[fields[0]])
    parts = []
    for i, field in enumerate(fields):
        parts += [("," if i else "") + f"{field}:", _as_text(rows[field])]
    return pc.binary_join_element_wise(*parts, "")


def partition_path_column(
    rows: pa.Table, fields: Sequence[str], hive_style: bool = False, urlencode: bool = False
) -> pa.ChunkedArray | pa.Array:
    if not fields:
        return pa.array([""] * rows.num_rows, pa.string())
    parts = []
    for i, field in enumerate(fields):
        text = pc.fill_null(_as_text(rows[field]), DEFAULT_PARTITION)
        text = pc.if_else(pc.equal(text, ""), DEFAULT_PARTITION, text)
        if urlencode:
            text = pa.array([urllib.parse.quote(v, safe="") for v in text.to_pylist()], pa.string())
        prefix = ("/" if i else "") + (f"{field}=" if hive_style else "")
        parts += [prefix, text]
    return pc.binary_join_element_wise(*parts, "")
