"""Kafka records whose values are the rows themselves (JSON, no envelope), decoded on the driver into the declared
columns with pyarrow's JSON reader: the rows a Spark-decoded micro-batch has (``spark.change_feed.with_record_origin``),
for a micro-batch the driver read itself (``kafka.offsets``).

Only where the result is the one Spark's ``from_json`` gives: every declared column of a type the JSON reader reads
as Spark does (integers, floats, strings, booleans, decimals of the declared scale; Spark reads any JSON token as a
string's text, which the reader refuses), and every value one JSON object of those types. Timestamps and dates are
read as their text and cast where the text has the ISO forms both read alike (``TEMPORAL_TEXT``): a timestamp without
a zone is in the session's time zone, as Spark takes it (an hour the clocks skip is left to Spark, an hour they repeat
is its earlier instant, as ``java.time`` resolves it), and Spark's other forms (epoch seconds, one-digit months,
nanoseconds) are left to it. Otherwise ``None``, and Spark decodes the micro-batch under its own rules, a bad record
going to quarantine with its reason.
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
    pa.types.is_decimal,  # the number's text at the declared scale, or an error (Spark rounds: left to it)
)
_DATE = r"\d{4}-\d{2}-\d{2}"
_TIME = r"[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?"
# the texts a temporal column is cast from on the driver: ISO 8601's, as Python's ``isoformat``, JavaScript's
# ``toISOString`` and Jackson write them; a zone only after a time
TEMPORAL_TEXT = {
    "date": f"^{_DATE}$",
    "local": f"^{_DATE}({_TIME})?$",
    "zoned": f"^{_DATE}{_TIME}(Z|[+-]\\d{{2}}:\\d{{2}})$",
}


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
    if not all(_temporal(f.type) or any(check(f.type) for check in _READ_AS_SPARK) for f in declared):
        return None
    records = records.filter(pc.is_valid(records["value"]))
    as_text = pa.schema([f.with_type(pa.string()) if _temporal(f.type) else f for f in declared])
    values = read_all(unframed(records["value"].combine_chunks()), as_text)
    if values is None:
        return None
    columns = {f.name: values[f.name].combine_chunks() for f in declared}
    for f in declared:
        if _temporal(f.type):
            cast = _temporal_from_text(columns[f.name], f.type)
            if cast is None:
                return None
            columns[f.name] = cast
    origin, offsets = record_origin(records)
    nothing = pa.nulls(records.num_rows, pa.string())
    columns = {
        **columns,
        DECODE_REASON: nothing,
        CORRUPT: nothing,
        SOURCE_FILE: origin,
        SOURCE_OFFSET: offsets,
    }
    return pa.table([columns[f.name].cast(f.type) for f in schema], schema=schema)


def _temporal(kind: pa.DataType) -> bool:
    return pa.types.is_timestamp(kind) or pa.types.is_date32(kind)


def _temporal_from_text(text: pa.Array, kind: pa.DataType) -> pa.Array | None:
    """``text`` as ``kind`` (a date, or a timestamp with the session's zone or none) where every value has a form of
    ``TEMPORAL_TEXT`` that Spark reads alike; ``None`` otherwise."""
    given = text.drop_null()

    def all_match(form: str) -> bool:
        return pc.all(pc.match_substring_regex(given, TEMPORAL_TEXT[form])).as_py() is not False

    try:
        if pa.types.is_date32(kind):
            return text.cast(kind) if all_match("date") else None
        assert isinstance(kind, pa.TimestampType), "only dates and timestamps are temporal here"
        if all_match("local"):
            local = text.cast(pa.timestamp(kind.unit))
            if kind.tz is None:  # Spark's TIMESTAMP_NTZ
                return local
            return pc.assume_timezone(local, kind.tz, ambiguous="earliest", nonexistent="raise")
        if kind.tz is not None and all_match("zoned"):
            return text.cast(pa.timestamp(kind.unit, "UTC")).cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # a day that is not (02-30), an hour the clocks skip
        return None
    return None
