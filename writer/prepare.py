"""Validation and keying of incoming rows, before any shuffle.

Every row leaves with its record key, partition path, index shard and
arrival number, or with the reason it goes to quarantine and its raw form.
Nothing is dropped here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.assigner import ARRIVAL, PARTITION
from laketide.index.state import index_keys, shard_of
from laketide.table.files import RESERVED_TOP_DIRS
from laketide.table.schema import RECORD_KEY
from laketide.writer.records import partition_path_column, record_key_column

SHARD = "_lt_shard"
REASON = "_lt_reason"
RAW = "_lt_raw"
# The column Spark's JSON and CSV readers fill with the text of a malformed record.
CORRUPT = "_corrupt_record"

PREPARED_FIELDS = [
    pa.field(RECORD_KEY, pa.string()),
    pa.field(PARTITION, pa.string()),
    pa.field(SHARD, pa.int32()),
    pa.field(ARRIVAL, pa.int64()),
    pa.field(REASON, pa.string()),
    pa.field(RAW, pa.string()),
]


@dataclass(frozen=True)
class PrepareSpec:
    record_key: tuple[str, ...]
    partition_by: tuple[str, ...]
    hive_style: bool
    ordering_field: str | None
    shards: int
    source_format: str = "json"


def _first_reason(reasons: list[tuple[pa.Array, str]], n: int) -> pa.Array:
    out = pa.nulls(n, pa.string())
    for failed, text in reversed(reasons):
        out = pc.if_else(pc.fill_null(failed, True), pa.scalar(text), out)
    return out


def _raw(rows: pa.Table, bad: np.ndarray) -> pa.Array:
    corrupt = rows[CORRUPT].to_pylist() if CORRUPT in rows.column_names else None
    records = rows.drop_columns([CORRUPT]) if corrupt is not None else rows
    out: list[str | None] = [None] * rows.num_rows
    for i in np.nonzero(bad)[0]:
        out[i] = corrupt[i] if corrupt and corrupt[i] is not None else json.dumps(records.slice(i, 1).to_pylist()[0], default=str)
    return pa.array(out, pa.string())


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def prepare(rows: pa.Table, spec: PrepareSpec, arrival_base: int) -> pa.Table:
    n = rows.num_rows
    reasons: list[tuple[pa.Array, str]] = []
    mismatch = None
    if CORRUPT in rows.column_names:
        # A JSON line that parses was rejected for a field's type; a CSV line always has the right shape.
        check = _is_json if spec.source_format == "json" else (lambda raw: True)
        parses = pa.array([None if raw is None else check(raw) for raw in rows[CORRUPT].to_pylist()], pa.bool_())
        reasons.append((pc.fill_null(pc.invert(parses), False), "malformed record (not valid JSON)"))
        mismatch = (pc.fill_null(parses, False), "a field does not match the source schema")
    for field in spec.record_key:
        reasons.append((pc.is_null(rows[field]), f"record key field '{field}' is null"))
    if spec.ordering_field:
        kind = rows.schema.field(spec.ordering_field).type
        reasons.append((pc.is_null(rows[spec.ordering_field]), f"ordering field '{spec.ordering_field}' is missing or not a valid {kind}"))
    for field in spec.partition_by:
        text = pc.cast(rows[field], pa.string())
        reasons.append((pc.fill_null(pc.match_substring(text, "/"), False), f"partition field '{field}' contains '/'"))
    keys = pc.fill_null(record_key_column(rows, spec.record_key), "")
    partitions = partition_path_column(rows, spec.partition_by, spec.hive_style)
    top = pc.list_element(pc.split_pattern(partitions, "/"), 0) if spec.partition_by else pa.array([""] * n)
    reasons.append((pc.is_in(top, value_set=pa.array(sorted(RESERVED_TOP_DIRS))), "partition path starts with a name readers never list"))
    if mismatch is not None:
        reasons.append(mismatch)
    reason = _first_reason(reasons, n) if n else pa.array([], pa.string())
    bad = pc.is_valid(reason).to_numpy(zero_copy_only=False) if n else np.zeros(0, bool)
    hashes = index_keys(partitions, keys)
    data = rows.drop_columns([CORRUPT]) if CORRUPT in rows.column_names else rows
    columns = [
        keys,
        partitions,
        pa.array(shard_of(hashes, spec.shards), pa.int32()),
        pa.array(np.arange(arrival_base, arrival_base + n, dtype=np.int64)),
        reason,
        _raw(rows, bad),
    ]
    for field, column in zip(PREPARED_FIELDS, columns):
        data = data.append_column(field, column)
    return data
