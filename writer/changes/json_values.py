"""Many JSON values (one per Kafka record) parsed into Arrow at once, with pyarrow's JSON reader.

The values are joined into one newline-delimited buffer and parsed in one call. A value that does not
parse, or does not parse under the given schema, is found by halving the values that failed until it is
alone, so one bad record among many costs a few parses, not one per record; it gets a null row and the
parser's reason. Every value yields exactly one row, in order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from laketide.table.errors import first_line

MIN_BLOCK = 1 << 20


def parse_values(values: pa.Array, schema: pa.Schema | None = None) -> tuple[pa.Table, dict[int, str]]:
    """One row per value of ``values`` (binary or text, no nulls), and ``{row: reason}`` for those that are
    not one JSON object (of ``schema``, whose other fields are ignored; inferred when ``schema`` is None)."""
    values = _one_line_each(values)
    pieces, bad = _parsed(values, schema, 0)
    if not pieces:
        empty = schema.empty_table() if schema is not None else pa.table({})
        return empty.take(pa.nulls(len(values), pa.int64())), bad
    table = pa.concat_tables([t for _, t in pieces], promote_options="permissive") if len(pieces) > 1 else pieces[0][1]
    if not bad:
        return table, bad
    # the rows that parsed, in order; a null index where a value did not
    at, taken = [], 0
    for i in range(len(values)):
        if i in bad:
            at.append(None)
        else:
            at.append(taken)
            taken += 1
    return table.take(pa.array(at, pa.int64())), bad


def read_all(values: pa.Array, schema: pa.Schema) -> pa.Table | None:
    """One row of ``schema`` per value of ``values`` (binary or text, no nulls), or ``None`` when any value is not
    one JSON object of ``schema``'s types: for a caller that then decodes them another way, with no search for the
    bad ones."""
    try:
        return _read(_one_line_each(values), schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, _Misaligned):
        return None


def _one_line_each(values: pa.Array) -> pa.Array:
    values = values.cast(pa.binary())
    # a newline inside a value is whitespace between its tokens (JSON strings cannot hold one): it must not
    # end the value's line. Connectors write one line a value, so the bytes are looked at first (a tenth of the
    # time of the two replaces that are then not needed)
    data = values.buffers()[2]
    if data is None or not _has_line_break(np.frombuffer(data, np.uint8)):
        return values
    return pc.replace_substring(pc.replace_substring(values, b"\n", b" "), b"\r", b" ")


def _has_line_break(data: np.ndarray) -> bool:
    return bool((data == ord("\n")).any() or (data == ord("\r")).any())


def _parsed(
    values: pa.Array, schema: pa.Schema | None, start: int
) -> tuple[list[tuple[int, pa.Table]], dict[int, str]]:
    try:
        return [(start, _read(values, schema))], {}
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, _Misaligned) as error:
        if len(values) == 1:
            return [], {start: _reason(error)}
    half = len(values) // 2
    left, left_bad = _parsed(values.slice(0, half), schema, start)
    right, right_bad = _parsed(values.slice(half), schema, start + half)
    return left + right, {**left_bad, **right_bad}


class _Misaligned(Exception):
    """The values gave another number of rows than there are values: one was blank, or held two objects."""


class _NotObject(_Misaligned):
    """A value is not a JSON object (``null``, a number, an array), or not JSON."""


def _read(values: pa.Array, schema: pa.Schema | None) -> pa.Table:
    if len(values) == 0:
        return (schema or pa.schema([])).empty_table()
    # pyarrow's reader takes a bare ``null`` line for a row of nulls, and crashes the process (pyarrow 26) when the
    # first line is one: only objects are handed to it
    if not pc.all(pc.match_substring_regex(values, r"^\s*\{")).as_py():
        raise _NotObject("a value is not a JSON object")
    lines = pc.binary_join_element_wise(values, pa.scalar(b"", pa.binary()), pa.scalar(b"\n", pa.binary()))
    offsets = lines.buffers()[1]
    first, last = (
        int.from_bytes(offsets[4 * i : 4 * i + 4], "little", signed=True)
        for i in (lines.offset, lines.offset + len(lines))
    )
    data = lines.buffers()[2][first:last]
    options = pj.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="ignore" if schema is not None else "infer"
    )
    table = pj.read_json(
        pa.BufferReader(data),
        read_options=pj.ReadOptions(block_size=_block_size(values, data, schema)),
        parse_options=options,
    )
    if table.num_rows != len(values):
        raise _Misaligned(f"{len(values)} values gave {table.num_rows} JSON objects")
    return table


def _block_size(values: pa.Array, data: pa.Buffer, schema: pa.Schema | None) -> int:
    """What the reader parses at a time (its blocks are parsed side by side): a block must hold the longest value;
    values whose types are inferred are one block, as the reader infers each block's types on its own and cannot
    always reconcile them (a struct field inferred null in one block and holding values in another: "JSON
    conversion to struct<id: int64, region: null> is not supported", a Debezium delete's ``before`` under
    REPLICA IDENTITY DEFAULT), and one batch's types should not depend on where its blocks fell."""
    if schema is None:
        return max(MIN_BLOCK, data.size + 1)
    return max(MIN_BLOCK, 2 * (pc.max(pc.binary_length(values)).as_py() or 0) + 2)


def _reason(error: Exception) -> str:
    text = first_line(error) or type(error).__name__
    if isinstance(error, _NotObject):
        return "the value is not an object: JSON of another kind (null, a number, an array), blank, or not JSON"
    if isinstance(error, _Misaligned):
        return "the value is not one JSON object (it is blank, or holds more than one)"
    if "changed from object to" in text or "Column() changed" in text:
        return "the value is JSON but not an object"
    if "Column(/" in text:
        return f"the value does not have the types its event says ({text.removeprefix('JSON parse error: ')})"
    return f"the value is not valid JSON ({text.removeprefix('JSON parse error: ')})"
