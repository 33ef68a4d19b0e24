"""Kafka records whose values are the rows themselves (JSON, no envelope), decoded on the driver into the declared
columns with pyarrow's JSON reader: the rows a Spark-decoded micro-batch has (``spark.change_feed.with_record_origin``),
for a micro-batch the driver read itself (``kafka.offsets``).

Only where the result is the one Spark's ``from_json`` gives: every declared column of a type the JSON reader reads
as Spark does (integers, floats, strings, booleans; Spark reads a timestamp without a zone in the session's, and
any JSON token as a string's text), and every value one JSON object of those types. Otherwise ``None``, and Spark
decodes the micro-batch under its own rules, a bad record going to quarantine with its reason.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import CORRUPT, DECODE_REASON, SOURCE_FILE, SOURCE_OFFSET
from laketide.writer.changes.json_values import read_all
from laketide.writer.changes.schema_registry import unframed

_READ_AS_SPARK = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_boolean,
)


def record_origin(records: pa.Table) -> tuple[pa.Array, pa.Array]:
    """Where each Kafka record came from: ``SOURCE_FILE`` (``topic/partition``, the partition zero-padded, so that
    the text orders as the numbers) and ``SOURCE_OFFSET``."""
    partition = pc.utf8_lpad(records["partition"].combine_chunks().cast(pa.string()), 10, "0")
    origin = pc.binary_join_element_wise(records["topic"].combine_chunks(), partition, "/")
    return origin, records["offset"].combine_chunks().cast(pa.int64())


def plain_rows(records: pa.Table, schema: pa.Schema) -> pa.Table | None:
    """``records`` (Spark's Kafka columns) as rows of ``schema``: the declared columns, then ``DECODE_REASON``,
    ``CORRUPT``, ``SOURCE_FILE`` and ``SOURCE_OFFSET``, in ``schema``'s order; tombstones left out. ``None`` where
    Spark must decode them (see the module)."""
    own = (DECODE_REASON, CORRUPT, SOURCE_FILE, SOURCE_OFFSET)
    declared = pa.schema([f for f in schema if f.name not in own])
    if not all(any(check(f.type) for check in _READ_AS_SPARK) for f in declared):
        return None
    records = records.filter(pc.is_valid(records["value"]))
    values = read_all(unframed(records["value"].combine_chunks()), declared)
    if values is None:
        return None
    origin, offsets = record_origin(records)
    nothing = pa.nulls(records.num_rows, pa.string())
    columns = {
        **{f.name: values[f.name] for f in declared},
        DECODE_REASON: nothing,
        CORRUPT: nothing,
        SOURCE_FILE: origin,
        SOURCE_OFFSET: offsets,
    }
    return pa.table([columns[f.name].cast(f.type) for f in schema], schema=schema)
