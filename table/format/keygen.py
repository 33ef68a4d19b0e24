"""Record keys and partition paths, derived from a row as Hudi's key generators derive them.

Values become text as Hudi's Avro key generators make it
(``HoodieAvroUtils.getNestedFieldValAsString`` with its default
``consistent.logical.timestamp.enabled=false``): Java's ``toString`` of the
value, dates as ``yyyy-MM-dd``, timestamps as their raw epoch microseconds,
decimals as ``BigDecimal.toString``. Partition values are escaped as
``PartitionPathEncodeUtils.escapePathName`` escapes them when
``hoodie.datasource.write.partitionpath.urlencode`` is on.

A row whose key or partition path cannot be made gets a reason instead of a
value; the caller quarantines it.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.table.format.files import RESERVED_TOP_DIRS
from laketide.table.format.schema import META_COLUMNS, RECORD_KEY

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
NULL_KEY_PART = "__null__"
EMPTY_KEY_PART = "__empty__"
MAX_SEGMENT_BYTES = 255

# Hive's FileUtils.escapePathName set, as Hudi copies it: control characters and "#%'*/:=?\{[]^ and DEL.
_ESCAPED = set(range(0x20)) | {ord(c) for c in "\"#%'*/:=?\\{[]^"} | {0x7F}
_NEEDS_ESCAPE = "[" + re.escape("".join(chr(c) for c in sorted(_ESCAPED))) + "]"


def escape_path_name(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if ord(c) in _ESCAPED else c for c in value)


def _java_float_text(digits: str, exponent: int, negative: bool) -> str:
    """Java's ``Double.toString`` layout of the shortest digits ``d.ddd x 10^exponent``."""
    sign = "-" if negative else ""
    if -3 <= exponent < 7:
        if exponent >= 0:
            whole, frac = digits[: exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1 :]
        else:
            whole, frac = "0", "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def _as_float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def _shortest_digits(value: float, single: bool) -> tuple[str, int]:
    """The fewest significant digits that read back as ``|value|`` (as a float32 if ``single``), and the exponent."""
    magnitude = _as_float32(abs(value)) if single else abs(value)
    text = format(magnitude, ".16e")  # 17 significant digits read any double back
    for precision in range(1, 17):
        shorter = format(magnitude, f".{precision - 1}e")
        back = float(shorter)
        if (_as_float32(back) if single else back) == magnitude:
            text = shorter
            break
    mantissa, exponent = text.split("e")
    return mantissa.replace(".", "").rstrip("0") or "0", int(exponent)


def java_float_to_string(value: float, single: bool = False) -> str:
    """``Float.toString`` / ``Double.toString``: shortest round-trip digits in Java's layout."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    digits, exponent = _shortest_digits(value, single)
    return _java_float_text(digits, exponent, value < 0)


def _per_value(column: pa.Array, text) -> pa.Array:
    return pa.array([None if v is None else text(v) for v in column.to_pylist()], pa.string())


def value_text(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each value as the text Hudi's key generators make of it (null stays null)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    dtype = column.type
    if pa.types.is_timestamp(dtype):
        micros = (
            column.cast(pa.timestamp("us", dtype.tz)).view(pa.int64())
            if dtype.unit != "us"
            else column.view(pa.int64())
        )
        return pc.cast(micros, pa.string())
    if pa.types.is_floating(dtype):
        return _per_value(column, lambda v: java_float_to_string(v, single=pa.types.is_float32(dtype)))
    if pa.types.is_decimal(dtype):
        # Python's Decimal and Java's BigDecimal share the "to-scientific-string" rules.
        return _per_value(column, lambda v: str(Decimal(v)))
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype) or pa.types.is_nested(dtype):
        raise TypeError(f"a {dtype} value cannot be a record key or partition value")
    return pc.cast(column, pa.string())


def _withheld(values: pa.Array, missing: pa.Array, reason: str) -> tuple[pa.Array, pa.Array]:
    """(values, reasons): null values and ``reason`` where ``missing``, the value and no reason elsewhere."""
    nulls = pa.nulls(len(values), pa.string())
    if not pc.any(missing).as_py():  # every row has one: its values as they are, not copied (a 1M-row load's keys)
        return values, nulls
    return pc.if_else(missing, nulls, values), pc.if_else(missing, pa.scalar(reason), nulls)


def record_keys(rows: pa.Table, fields: Sequence[str], complex_key: bool = False) -> tuple[pa.Array, pa.Array]:
    """(record key, reason) per row: ``SimpleKeyGenerator`` for one field, ``ComplexKeyGenerator`` for more.

    A simple key may not be null or empty; a complex key writes ``__null__`` or
    ``__empty__`` for such a part, and may not have every part null or empty.
    ``complex_key`` marks a table whose key generator is ``ComplexKeyGenerator``
    (two or more partition fields make it so): its keys are ``field:value``
    even with one key field, as Hudi writes them by default
    (``hoodie.write.complex.keygen.new.encoding=false``; the bare value of
    Hudi 0.14.1 to 1.0.2 is HUDI-7001, which Hudi reverted).
    """
    n = rows.num_rows
    if len(fields) == 1 and not complex_key:
        keys = value_text(rows[fields[0]])
        return _withheld(
            keys, pc.fill_null(pc.equal(keys, ""), True), f"record key field '{fields[0]}' is null or empty"
        )
    parts, blank_mask = [], pa.repeat(pa.scalar(True), n)
    for i, field in enumerate(fields):
        text = value_text(rows[field])
        is_null = pc.is_null(text)
        is_empty = pc.fill_null(pc.equal(text, ""), False)
        blank_mask = pc.and_(blank_mask, pc.or_(is_null, is_empty))
        text = pc.if_else(is_null, NULL_KEY_PART, pc.if_else(is_empty, EMPTY_KEY_PART, text))
        parts += [("," if i else "") + f"{field}:", text]
    keys = pc.binary_join_element_wise(*parts, "")
    return _withheld(keys, blank_mask, f"every record key field ({', '.join(fields)}) is null or empty")


def _escape_column(text: pa.Array) -> pa.Array:
    needs = pc.fill_null(pc.match_substring_regex(text, _NEEDS_ESCAPE), False)
    if not pc.any(needs).as_py():
        return text
    values = text.to_pylist()
    flags = needs.to_pylist()
    return pa.array([escape_path_name(v) if flag else v for v, flag in zip(values, flags)], pa.string())


def _segment_reasons(field: str, segment: pa.Array, hive_style: bool) -> list[tuple[pa.Array, str]]:
    """Why a path segment cannot be a directory of the table, per row (null where it can)."""
    size = pc.binary_length(pc.cast(segment, pa.binary()))
    checks = [
        (
            pc.is_in(segment, value_set=pa.array([".", ".."])),
            f"partition value of '{field}' would be the directory '.' or '..'",
        ),
        (
            pc.greater(size, MAX_SEGMENT_BYTES),
            f"partition value of '{field}' makes a directory name over {MAX_SEGMENT_BYTES} bytes",
        ),
    ]
    if not hive_style:
        hidden = pc.or_(pc.starts_with(segment, "."), pc.starts_with(segment, "_"))
        hidden = pc.and_(hidden, pc.not_equal(segment, DEFAULT_PARTITION))
        checks.append(
            (hidden, f"partition value of '{field}' starts with '.' or '_', a directory Hadoop-style readers skip")
        )
    return checks


def partition_paths(
    rows: pa.Table, fields: Sequence[str], hive_style: bool = False, urlencode: bool = False
) -> tuple[pa.Array, pa.Array]:
    """(partition path, reason) per row, as ``KeyGenUtils.getRecordPartitionPath`` makes the path.

    Without ``urlencode`` a value holding '/' would nest directories; it gets a reason.
    A micro-batch holds a few partitions: the path is made once per distinct value and taken for each
    row, where that is exact (``_distinct_values``).
    """
    n = rows.num_rows
    if not fields:
        return pa.repeat(pa.scalar("", pa.string()), n), pa.nulls(n, pa.string())
    distinct = _distinct_values(rows, fields)
    if distinct is not None:
        values, of_row = distinct
        paths, reasons = _partition_paths(values, fields, hive_style, urlencode)
        return paths.take(of_row), reasons.take(of_row)
    return _partition_paths(rows, fields, hive_style, urlencode)


def _distinct_values(rows: pa.Table, fields: Sequence[str]) -> tuple[pa.Table, pa.Array] | None:
    """The distinct combinations of ``fields`` and the one of each row; None where hashing could merge values
    that print differently (floats: 0.0 and -0.0) or the combinations could be too many to number."""
    columns = [rows[f].combine_chunks() for f in fields]
    if rows.num_rows < 2 or any(pa.types.is_floating(c.type) for c in columns):
        return None
    encoded = [c.dictionary_encode(null_encoding="encode") for c in columns]
    if len(encoded) == 1:
        return pa.table({fields[0]: encoded[0].dictionary}), encoded[0].indices
    code = np.zeros(rows.num_rows, np.int64)
    room = 1
    for e in encoded:
        room *= max(1, len(e.dictionary))
        if room >= 2**62:
            return None
        code = code * len(e.dictionary) + e.indices.to_numpy(zero_copy_only=False)
    _, first, of_row = np.unique(code, return_index=True, return_inverse=True)
    at = pa.array(first)
    return pa.table({f: c.take(at) for f, c in zip(fields, columns)}), pa.array(of_row.astype(np.int32))


def _partition_paths(
    rows: pa.Table, fields: Sequence[str], hive_style: bool, urlencode: bool
) -> tuple[pa.Array, pa.Array]:
    n = rows.num_rows
    parts, checks = [], []
    for i, field in enumerate(fields):
        text = value_text(rows[field])
        missing = pc.fill_null(pc.equal(text, ""), True)
        if urlencode:
            text = _escape_column(pc.fill_null(text, ""))
        else:
            checks.append(
                (pc.fill_null(pc.match_substring(text, "/"), False), f"partition value of '{field}' contains '/'")
            )
        text = pc.if_else(missing, DEFAULT_PARTITION, text)
        segment = pc.binary_join_element_wise(f"{field}=", text, "") if hive_style else text
        checks += _segment_reasons(field, segment, hive_style)
        if i == 0:
            checks.append(
                (
                    pc.is_in(segment, value_set=pa.array(sorted(RESERVED_TOP_DIRS))),
                    "partition path starts with a directory name readers never list",
                )
            )
        parts += ["/" if i else "", segment]
    paths = pc.binary_join_element_wise(*parts, "")
    return paths, first_reason(checks, n)


def first_reason(checks: list[tuple[pa.Array, str]], n: int) -> pa.Array:
    """Per row, the text of the first check that failed (null when none did)."""
    out = pa.nulls(n, pa.string())
    for failed, text in reversed(checks):
        out = pc.if_else(pc.fill_null(failed, True), pa.scalar(text), out)
    return out


@dataclass(frozen=True)
class VirtualKeys:
    """How the stored rows of a table without Hudi's meta columns (``hoodie.populate.meta.fields = false``,
    Hudi's "virtual keys") get their record key: made from the key fields as ``record_keys`` makes an incoming
    record's, since the ``_hoodie_record_key`` column holds nulls there. Files read for a merge or a key probe
    pass through ``keyed``; files written pass through ``blank``, as Hudi leaves the meta columns null."""

    fields: tuple[str, ...]
    complex_key: bool = False

    def columns(self, wanted: Sequence[str] | None) -> list[str] | None:
        """The columns to read for ``wanted`` (every one when None): the key fields stand for the record key."""
        if wanted is None:
            return None
        extra = self.fields if RECORD_KEY in wanted else ()
        return list(dict.fromkeys([*wanted, *extra]))

    def keyed(self, rows: pa.Table, wanted: Sequence[str] | None = None) -> pa.Table:
        """``rows`` with their record keys made from the key fields; only the ``wanted`` columns, when given."""
        keys, _ = record_keys(rows, self.fields, self.complex_key)
        at = rows.schema.get_field_index(RECORD_KEY)
        rows = rows.set_column(at, RECORD_KEY, keys) if at >= 0 else rows.append_column(RECORD_KEY, keys)
        return rows if wanted is None else rows.select(list(wanted))

    @staticmethod
    def blank(rows: pa.Table) -> pa.Table:
        """``rows`` with every meta column null, as Hudi writes a table without meta columns."""
        for name in META_COLUMNS:
            at = rows.schema.get_field_index(name)
            if at >= 0:
                field = rows.schema.field(at)
                rows = rows.set_column(at, field, pa.nulls(rows.num_rows, field.type))
        return rows
