"""The row images of Debezium change events (``after``, ``before`` for a delete), decoded into the declared columns.

Events are grouped by the row schema they carry (each column's Connect schema, as the converter wrote it): each
group's values are parsed in bulk once, every column read as its encoding says (``changes.connect.values``);
events without a schema are one group whose types are inferred. ``changes.events`` makes the rest of each event's
row.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import EVENT_POSITION
from laketide.table.format.schema import IS_DELETED
from laketide.writer.changes.connect.column import Decoding
from laketide.writer.changes.connect.schema import Encoding, wire_type
from laketide.writer.changes.connect.values import Column
from laketide.writer.changes.json_values import parse_values

# each column's Connect schema, as the JSON converter writes it (``schema.fields`` of a row image)
_SCALE = pa.struct([("scale", pa.string()), ("connect.decimal.precision", pa.string())])
_ITEMS = pa.struct([("type", pa.string()), ("name", pa.string()), ("parameters", _SCALE)])
COLUMN = pa.struct(
    [
        ("field", pa.string()),
        ("type", pa.string()),
        ("name", pa.string()),
        ("parameters", _SCALE),
        ("items", _ITEMS),
        (
            "fields",
            pa.list_(
                pa.struct(
                    [("field", pa.string()), ("type", pa.string()), ("name", pa.string()), ("parameters", _SCALE)]
                )
            ),
        ),
    ]
)


def row_images(
    values: pa.Array,
    schema: pa.ChunkedArray,
    changes: np.ndarray,
    deleted: pa.Array,
    columns: list[pa.Field],
    decoding: Decoding,
) -> tuple[dict[str, pa.Array], pa.Array, Counter]:
    """The declared columns of each change's row image (``after``, ``before`` for a delete), decoded from ``values``
    (each event's JSON, or its payload when the converter wrapped it); the first reason a row's column could not be;
    and the columns events carried that are not declared."""
    n = len(values)
    declared = [f for f in columns if f.name not in (IS_DELETED, EVENT_POSITION)]
    groups, representatives = schema_groups(schema.combine_chunks(), changes)
    parts: list[tuple[np.ndarray, dict[str, pa.Array], pa.Array]] = []
    unknown: Counter = Counter()
    for code, row_schema in representatives.items():
        at = np.nonzero(groups == code)[0]
        encodings = {c["field"]: Encoding.of(c) for c in row_schema} if row_schema is not None else None
        if encodings is not None:
            for name in set(encodings) - {f.name for f in declared}:
                unknown[name] += len(at)
        decoded, reasons, undeclared = _decode_group(
            values.take(pa.array(at)), pc.take(deleted, pa.array(at)), encodings, declared, decoding
        )
        unknown.update(undeclared)
        parts.append((at, decoded, reasons))
    order = np.full(n, -1, np.int64)
    stacked = np.concatenate([at for at, _, _ in parts]) if parts else np.zeros(0, np.int64)
    order[stacked] = np.arange(len(stacked))
    index = pa.array(np.where(order >= 0, order, 0), mask=order < 0)
    images: dict[str, pa.Array] = {}
    for f in declared:
        pieces = [cols[f.name] for _, cols, _ in parts]
        images[f.name] = pa.concat_arrays(pieces).take(index) if pieces else pa.nulls(n, f.type)
    reasons = pa.concat_arrays([r for _, _, r in parts]).take(index) if parts else pa.nulls(n, pa.string())
    return images, reasons, unknown


def _decode_group(
    values: pa.Array,
    deleted: pa.Array,
    encodings: dict[str, Encoding] | None,
    declared: list[pa.Field],
    decoding: Decoding,
) -> tuple[dict[str, pa.Array], pa.Array, Counter]:
    """The declared columns of events of one row schema (``encodings``; ``None``: no schema, types inferred), and
    the columns events without a schema carried that are not declared (events with a value, per column)."""
    n = len(values)
    if encodings is not None:
        parsed, bad, unreadable = _parse_described(values, encodings, declared)
    else:
        unreadable, (parsed, bad) = [], _parse_inferred(values)
    rows = _image(parsed, deleted)
    reasons = [pa.array([bad.get(i) for i in range(n)], pa.string())]
    if rows is None:  # no event carried a row
        return {f.name: pa.nulls(n, f.type) for f in declared}, reasons[0], Counter()
    undescribed = [f.name for f in declared if encodings is not None and f.name not in encodings]
    if undescribed:
        rows = _with_undescribed(rows, values, deleted, undescribed)
    columns, names = {}, {field.name for field in rows.type}
    unknown: Counter = Counter()
    if encodings is None:
        for name in names - {f.name for f in declared}:
            carried = rows.field(name).is_valid().true_count if len(rows) else 0
            if carried:
                unknown[name] += carried
    for f in declared:
        if f.name in unreadable and encodings is not None:
            what = f"column '{f.name}': its encoding ({encodings[f.name].type}) cannot be read"
            columns[f.name] = pa.nulls(n, f.type)
            reasons.append(pc.if_else(rows.is_valid(), pa.scalar(what), pa.scalar(None, pa.string())))
            continue
        if f.name not in names:
            columns[f.name] = pa.nulls(n, f.type)
            continue
        decoded = Column(f.name, encodings.get(f.name) if encodings else None, f.type, decoding).decode(
            rows.field(f.name)
        )
        columns[f.name] = decoded.values
        reasons.append(decoded.reasons)
    return columns, pc.coalesce(*reasons), unknown


def _parse_described(
    values: pa.Array, encodings: dict[str, Encoding], declared: list[pa.Field]
) -> tuple[pa.Table, dict[int, str], list[str]]:
    """Events of one row schema parsed by it: the declared columns it describes, and those it cannot be read by."""
    wires = {f.name: wire_type(encodings[f.name]) for f in declared if f.name in encodings}
    unreadable = [name for name, t in wires.items() if t is None]
    image = pa.struct([(name, t) for name, t in wires.items() if t is not None])
    parsed, bad = parse_values(
        values,
        pa.schema([("before", image), ("after", image), ("payload", pa.struct([("before", image), ("after", image)]))]),
    )
    return parsed, bad, unreadable


def _parse_inferred(values: pa.Array) -> tuple[pa.Table, dict[int, str]]:
    """Events parsed with their types inferred; the JSON reader takes ISO-8601 text for timestamps when it infers:
    read as text, it is decoded by the declared type, and a STRING column keeps the text as it came."""
    parsed, bad = parse_values(values)
    as_read = _text_for_timestamps(parsed.schema)
    return parse_values(values, as_read) if as_read != parsed.schema else (parsed, bad)


def _with_undescribed(rows: pa.StructArray, values: pa.Array, deleted: pa.Array, names: list[str]) -> pa.StructArray:
    """``rows`` with the declared columns ``names`` that the events' schema block does not describe but their
    payload carries, as the JSON has them (decoded by the declared type then). Values that do not name such a
    column at all are not parsed again (a source table without the column costs nothing)."""
    text = values.cast(pa.binary())
    named = [n for n in names if pc.any(pc.match_substring(text, f'"{n}"'.encode())).as_py()]
    if not named:
        return rows
    images = []
    for value, is_delete in zip(text.to_pylist(), deleted.to_pylist()):
        event = json.loads(value) if value is not None else {}
        event = event.get("payload", event) if isinstance(event, dict) and "payload" in event else event
        image = event.get("before" if is_delete else "after") if isinstance(event, dict) else None
        images.append({n: image.get(n) for n in named} if isinstance(image, dict) else None)
    try:
        carried = pa.array(images)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # values of several JSON types: each as its text, decoded so
        carried = pa.array(
            [None if i is None else {n: None if v is None else json.dumps(v) for n, v in i.items()} for i in images]
        )
    if not pa.types.is_struct(carried.type):
        return rows
    had = {f.name for f in rows.type}
    added = [f for f in carried.type if f.name not in had]
    children = [rows.field(f.name) for f in rows.type] + [pc.struct_field(carried, f.name) for f in added]
    return pa.StructArray.from_arrays(children, fields=[*rows.type, *added], mask=rows.is_null())


def _text_for_timestamps(schema: pa.Schema) -> pa.Schema:
    def text(kind: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
            return pa.string()
        if pa.types.is_struct(kind):
            return pa.struct([f.with_type(text(f.type)) for f in kind])
        if pa.types.is_list(kind):
            return pa.list_(text(kind.value_type))
        return kind

    return pa.schema([f.with_type(text(f.type)) for f in schema])


def _image(parsed: pa.Table, deleted: pa.Array) -> pa.StructArray | None:
    """Each event's row: ``before`` for a delete, ``after`` otherwise, from ``payload`` when wrapped."""
    if not {"before", "after"} & set(parsed.column_names) and "payload" not in parsed.column_names:
        return None
    picked = []
    for name in ("before", "after"):
        bare = parsed[name].combine_chunks() if name in parsed.column_names else None
        payload = parsed["payload"].combine_chunks() if "payload" in parsed.column_names else None
        inner = payload.field(name) if payload is not None and name in {f.name for f in payload.type} else None
        if bare is not None and inner is not None and payload is not None:
            bare, inner = _unified(bare, inner)
            picked.append(pc.if_else(payload.is_valid(), inner, bare))
        else:
            picked.append(inner if inner is not None else bare)
    before, after = picked
    if before is None or after is None:
        return before if after is None else after
    before, after = _unified(before, after)
    return pc.if_else(deleted, before, after)


def _unified(a: pa.Array, b: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Two inferred struct columns given the same type (each field as either has it), so one can stand for the other."""
    if a.type == b.type:
        return a, b
    if pa.types.is_null(a.type):
        return pa.nulls(len(a), b.type), b
    if pa.types.is_null(b.type):
        return a, pa.nulls(len(b), a.type)
    merged = pa.unify_schemas([pa.schema(list(a.type)), pa.schema(list(b.type))], promote_options="permissive")
    target = pa.struct(list(merged))
    return _conform(a, target), _conform(b, target)


def _conform(values: pa.StructArray, target: pa.StructType) -> pa.StructArray:
    names = {f.name for f in values.type}
    children = [values.field(f.name).cast(f.type) if f.name in names else pa.nulls(len(values), f.type) for f in target]
    return pa.StructArray.from_arrays(children, fields=list(target), mask=values.is_null())


def schema_groups(
    schema: pa.StructArray | pa.DictionaryArray, changes: np.ndarray
) -> tuple[np.ndarray, dict[int, list[dict] | None]]:
    """Each change's row schema as a group number, and one of each group's row schemas (its columns, as the
    converter wrote them); ``None`` is the group of changes that came without a schema. ``schema``: each message's
    converter schema, or an index into its distinct ones."""
    if pa.types.is_dictionary(schema.type):
        return _block_groups(schema, changes)
    n = len(schema)
    groups = np.full(n, -2, np.int64)  # -2: not a change
    columns = _row_columns(schema)
    has = columns.is_valid().to_numpy(zero_copy_only=False) & changes
    groups[changes & ~has] = -1
    representatives: dict[int, list[dict] | None] = {-1: None} if (changes & ~has).any() else {}
    if has.any():
        prints = _fingerprints(columns)
        _, first_at, inverse = np.unique(prints[has], return_index=True, return_inverse=True)
        rows = np.nonzero(has)[0]
        groups[rows] = inverse
        for code, at in enumerate(first_at):
            representatives[code] = columns[int(rows[at])].as_py()
    return groups, representatives


def _block_groups(schema: pa.DictionaryArray, changes: np.ndarray) -> tuple[np.ndarray, dict[int, list[dict] | None]]:
    """``schema_groups`` of each distinct schema block once, each message taking its block's group (a null index:
    no schema)."""
    codes = dictionary_codes(schema)
    # only the blocks these changes carry: a table's part of a micro-batch keeps every table's blocks
    used_blocks = np.unique(codes[changes & (codes >= 0)])
    found, representatives = schema_groups(
        schema.dictionary.take(pa.array(used_blocks, pa.int64())), np.ones(len(used_blocks), bool)
    )
    blocks = np.full(len(schema.dictionary), -1, np.int64)
    blocks[used_blocks] = found
    groups = np.where(changes, np.where(codes >= 0, blocks[np.maximum(codes, 0)], -1), -2)
    used = set(np.unique(groups[changes]).tolist())
    if -1 in used:
        representatives[-1] = None
    return groups, {code: columns for code, columns in representatives.items() if code in used}


def dictionary_codes(encoded: pa.DictionaryArray) -> np.ndarray:
    """Each value's index into its dictionary; -1 for a null."""
    return pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _row_columns(schema: pa.StructArray) -> pa.ListArray:
    """Per message, the columns of its ``after`` (else ``before``) in the converter's schema; null without one."""
    fields = schema.field("fields")
    flat, parent = fields.flatten(), pc.list_parent_indices(fields).to_numpy(zero_copy_only=False)
    n, found = len(schema), np.full(len(schema), -1, np.int64)
    for image in ("before", "after"):  # "after" wins where both are there: they are the same columns
        hits = np.nonzero(pc.fill_null(pc.equal(flat.field("field"), image), False).to_numpy(zero_copy_only=False))[0]
        found[parent[hits]] = hits
    index = pa.array(np.where(found >= 0, found, 0), mask=found < 0)
    return flat.field("fields").take(index) if len(flat) else pa.nulls(n, pa.list_(COLUMN))


_MIX = np.random.default_rng(20261128).integers(1, 2**63, size=4096, dtype=np.uint64) | np.uint64(1)


def _fingerprints(columns: pa.ListArray) -> np.ndarray:
    """A 64-bit print of each row schema (its columns' names, types, semantic names and scales, in order)."""
    flat = columns.flatten()
    described = pc.binary_join_element_wise(
        pc.fill_null(flat.field("field"), ""),
        pc.fill_null(flat.field("type"), ""),
        pc.fill_null(flat.field("name"), ""),
        pc.fill_null(flat.field("parameters").field("scale"), ""),
        pc.fill_null(flat.field("items").field("name"), ""),
        "\x1f",
    )
    codes = described.dictionary_encode().indices.to_numpy(zero_copy_only=False).astype(np.uint64) + np.uint64(1)
    offsets = columns.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    starts = offsets[:-1]
    position = np.arange(len(flat), dtype=np.int64) - np.repeat(starts, np.diff(offsets))
    with np.errstate(over="ignore"):
        mixed = codes * _MIX[position % len(_MIX)]
        total = np.concatenate([[np.uint64(0)], np.cumsum(mixed, dtype=np.uint64)])
        prints = total[offsets[1:]] - total[starts] + np.diff(offsets).astype(np.uint64) * _MIX[0]
    return prints
