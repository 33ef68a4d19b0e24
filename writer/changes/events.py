"""Debezium change events, as connectors write them through Kafka Connect's JSON converter, into rows.

Each record's value becomes exactly one row, in order: the declared columns of the row its event carries
(``after``, or ``before`` for a delete), whether it is a delete, its position in the database's log, its
source table, and either why it goes to quarantine (``DECODE_REASON``) or, for a message that is not a row
change, what kind of message it is (``EVENT_KIND``: skipped and counted, never quarantined).

| message                                           | recognised by                       | becomes                    |
|---------------------------------------------------|-------------------------------------|----------------------------|
| create, snapshot read, update (``c``/``r``/``u``) | ``op``                              | upsert of ``after``        |
| delete (``d``)                                    | ``op``                              | delete of ``before``'s key |
| truncate (``t``)                                  | ``op``                              | kind ``truncate``          |
| logical decoding message (``m``)                  | ``op``                              | kind ``message``           |
| transaction BEGIN / END                           | ``status``, no ``op``               | kind ``transaction``       |
| schema change (the ``<prefix>`` topic)            | ``ddl``/``tableChanges``, no ``op`` | kind ``schema_change``     |
| heartbeat (``__debezium-heartbeat.*``)            | its topic, or ``ts_ms`` alone       | kind ``heartbeat``         |
| anything else                                     |                                     | quarantined, with why      |

Events come with the converter's ``{"schema", "payload"}`` wrapper (``schemas.enable = true``) or bare.
With the wrapper, each column is decoded by its Connect type and semantic name (``changes.connect.values``);
bare, by its declared type. Values are parsed in bulk (``json_values``): once for what every message has
(op, source, the schema), then once per distinct row schema, with each column read as its encoding says.

The schema block is most of a wrapped event's bytes (four fifths of a 5 KB Postgres event) and the same text for
every event of a table until its columns change, so when the values are as the converter writes them
(``{"schema":...,"payload":...}``, compact) each distinct block is parsed once and only the payloads are parsed
per event (``_unwrapped``); values in any other form are parsed whole.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import DECODE_REASON, EVENT_KIND, EVENT_POSITION, SOURCE_TABLE
from laketide.table.format.schema import IS_DELETED
from laketide.writer.changes.connect.column import Decoding
from laketide.writer.changes.images import COLUMN, row_images, schema_groups
from laketide.writer.changes.json_values import parse_values
from laketide.writer.changes.source_log import POINT
from laketide.writer.changes.tally import TRUNCATE

CHANGES = ("c", "r", "u", "d")
HEARTBEAT_TOPIC = "__debezium-heartbeat"

_SOURCE = pa.struct(
    [
        ("connector", pa.string()),
        ("db", pa.string()),
        ("schema", pa.string()),
        ("table", pa.string()),
        ("lsn", pa.int64()),
        ("file", pa.string()),
        ("pos", pa.int64()),
        ("row", pa.int64()),
        ("gtid", pa.string()),
        ("ts_ms", pa.int64()),
        ("server_id", pa.int64()),
        ("sequence", pa.string()),
    ]
)
_EVENT = [
    ("op", pa.string()),
    ("ts_ms", pa.int64()),
    ("source", _SOURCE),
    ("status", pa.string()),
    ("ddl", pa.string()),
    ("tableChanges", pa.list_(pa.struct([("type", pa.string())]))),
]
_ENVELOPE = pa.struct(
    [
        ("name", pa.string()),
        ("fields", pa.list_(pa.struct([("field", pa.string()), ("name", pa.string()), ("fields", pa.list_(COLUMN))]))),
    ]
)
# what every message is parsed for first: the event (bare, or in "payload") and the converter's schema
MESSAGE = pa.schema([*_EVENT, ("payload", pa.struct(_EVENT)), ("schema", _ENVELOPE)])


@dataclass(frozen=True)
class ChangeSpec:
    """The declared row (``source.schema``, as Arrow types), its key, and how values without a schema are read."""

    columns: pa.Schema
    record_key: tuple[str, ...]
    decoding: Decoding = Decoding()


def output_schema(spec: ChangeSpec) -> pa.Schema:
    """The columns ``change_rows`` gives: the row's, then the change's."""
    own = {IS_DELETED, EVENT_POSITION}
    fields = [f for f in spec.columns if f.name not in own]
    return pa.schema(
        [
            *fields,
            pa.field(IS_DELETED, pa.bool_()),
            pa.field(EVENT_POSITION, pa.string()),
            pa.field(DECODE_REASON, pa.string()),
            pa.field(EVENT_KIND, pa.string()),
            pa.field(SOURCE_TABLE, pa.string()),
        ]
    )


@dataclass
class ChangeRows:
    rows: pa.Table  # ``output_schema``, one row per value
    unknown_fields: Counter  # columns events carried that the row lacks: how many events carried each
    points: pa.Array  # each change event's point in its database's log (``changes.source_log.POINT``), else null


@dataclass
class Messages:
    """Change events parsed for what every message has (``MESSAGE``): one row per value, in order (a tombstone's
    and a value's that does not parse are null, ``bad`` says why). Parsed once, a micro-batch's messages serve its
    routing (a job of a whole database), its row schemas and its rows."""

    values: pa.Array  # the values (JSON), a tombstone null
    parsed: pa.Table
    bad: dict[int, str]
    images: pa.Array  # the JSON each row image is read from: a wrapped value's payload, else the value itself

    @property
    def tombstone(self) -> np.ndarray:
        return self.values.is_null().to_numpy(zero_copy_only=False)

    def event(self) -> dict[str, pa.Array]:
        return _event(self.parsed)

    def take(self, rows: np.ndarray) -> Messages:
        """The messages at ``rows``, in that order."""
        at = {int(i): j for j, i in enumerate(rows.tolist())}
        indices = pa.array(rows, pa.int64())
        return Messages(
            self.values.take(indices),
            self.parsed.take(indices),
            {at[i]: why for i, why in self.bad.items() if i in at},
            self.images.take(indices),
        )


def parse_messages(values: pa.Array) -> Messages:
    """``values`` (JSON, binary or text; a null value is a tombstone) parsed for what every message has."""
    n = len(values)
    tombstone = values.is_null().to_numpy(zero_copy_only=False)
    present = np.nonzero(~tombstone)[0]
    given = values.take(pa.array(present)) if tombstone.any() else values
    unwrapped = _unwrapped(given)
    if unwrapped is not None:
        (parsed, images), bad = unwrapped, {}
    else:
        (parsed, bad), images = parse_values(given, MESSAGE), given
    if tombstone.any():
        spread = pa.array(_spread(present, n), pa.int64())
        parsed, images = parsed.take(spread), images.take(spread)
        bad = {int(present[i]): why for i, why in bad.items()}
    return Messages(values, parsed, bad, images)


_WRAPPED_START, _PAYLOAD_KEY = b'{"schema":', b',"payload":'


def _unwrapped(values: pa.Array) -> tuple[pa.Table, pa.Array] | None:
    """``values`` parsed as ``MESSAGE`` and each one's payload, when every one is ``{"schema":S,"payload":P}`` as the
    converter writes it: each distinct ``S`` parsed once, each ``P`` on its own. ``None`` where any value is
    otherwise, or does not parse (then the values are parsed whole, and a bad one gets its reason there).

    The first ``,"payload":`` of a value is where its schema block ends: that text cannot be inside a JSON string
    (its quote would be escaped), and a key of that name deeper in the block leaves ``{"schema":`` plus the text
    before it unbalanced, which does not parse."""
    if len(values) == 0:
        return None
    parts = pc.split_pattern(values.cast(pa.binary()), pattern=_PAYLOAD_KEY, max_splits=1)
    if pc.min(pc.list_value_length(parts)).as_py() != 2:
        return None
    head, rest = pc.list_element(parts, 0), pc.list_element(parts, 1)
    if not (pc.all(pc.starts_with(head, _WRAPPED_START)).as_py() and pc.all(pc.ends_with(rest, b"}")).as_py()):
        return None
    blocks = head.dictionary_encode()
    closed = pc.binary_join_element_wise(blocks.dictionary, pa.scalar(b"}"), pa.scalar(b""))
    schemas, bad = parse_values(closed, pa.schema([MESSAGE.field("schema")]))
    if bad:
        return None
    payloads = pc.binary_slice(rest, 0, -1)
    events, bad = parse_values(payloads, pa.schema(_EVENT))
    if bad:
        return None
    n = len(values)
    payload = pa.StructArray.from_arrays(
        [events[name].combine_chunks() for name, _ in _EVENT], fields=list(pa.struct(_EVENT))
    )
    columns = {name: pa.nulls(n, kind) for name, kind in _EVENT}
    # each message's schema as an index into the distinct ones: its groups are found once a block (``schema_groups``)
    columns |= {
        "payload": payload,
        "schema": pa.DictionaryArray.from_arrays(blocks.indices, schemas["schema"].combine_chunks()),
    }
    return pa.table([columns[f.name] for f in MESSAGE], names=MESSAGE.names), payloads


def row_schemas(messages: Messages) -> list[list[dict]]:
    """The distinct row schemas (each column's Connect schema, as the converter wrote it) the change events carry;
    events without a schema add none."""
    changes = pc.fill_null(pc.is_in(messages.event()["op"], pa.array(CHANGES)), False).to_numpy(zero_copy_only=False)
    _, representatives = schema_groups(messages.parsed["schema"].combine_chunks(), changes)
    return [columns for columns in representatives.values() if columns is not None]


def change_rows(messages: Messages, topics: pa.Array, spec: ChangeSpec) -> ChangeRows:
    """The rows of change events ``messages`` (a tombstone is skipped), read from ``topics``."""
    parsed, n = messages.parsed, len(messages.values)
    reasons: list[str | None] = [None] * n
    for i, why in messages.bad.items():
        reasons[i] = why
    event = messages.event()
    kinds = _kinds(event, topics, parsed["schema"], messages.tombstone)
    op = event["op"]
    reasons_array = pc.coalesce(pa.array(reasons, pa.string()), _unknown_op(op, kinds))
    is_change = pc.and_(pc.fill_null(pc.is_in(op, pa.array(CHANGES)), False), pc.is_null(reasons_array))
    deleted = pc.fill_null(pc.equal(op, "d"), False)
    columns, column_reasons, unknown = row_images(
        messages.images,
        parsed["schema"],
        is_change.to_numpy(zero_copy_only=False),
        deleted,
        spec.columns,
        spec.decoding,
    )
    key_reason = _keyless(columns, is_change, deleted, spec)
    out = output_schema(spec)
    arrays = [columns[f.name] for f in out if f.name in columns]
    binlog = _binlog_position(event["source"])  # for the position and for the log's point
    arrays += [
        deleted,
        _position(event, spec.decoding.ordering, binlog),
        pc.coalesce(reasons_array, column_reasons, key_reason),
        kinds,
        _source_table(event),
    ]
    return ChangeRows(pa.Table.from_arrays(arrays, schema=out), unknown, _log_point(event, is_change, binlog))


def positions(messages: Messages, ordering: str) -> pa.Array:
    """Each message's position (``EVENT_POSITION``) under ``ordering``."""
    return _position(messages.event(), ordering)


def _spread(present: np.ndarray, n: int) -> list[int | None]:
    at: list[int | None] = [None] * n
    for j, i in enumerate(present.tolist()):
        at[i] = j
    return at


def _event(parsed: pa.Table) -> dict[str, pa.Array]:
    """The event's own fields, from its ``payload`` when the converter wrapped it, else from the value."""
    payload = parsed["payload"].combine_chunks()
    wrapped = payload.is_valid()
    out = {}
    for name, _ in _EVENT:
        bare = parsed[name].combine_chunks()
        out[name] = pc.if_else(wrapped, payload.field(name), bare)
    return out


def _kinds(event: dict[str, pa.Array], topics: pa.Array, schema: pa.Array, tombstone: np.ndarray) -> pa.Array:
    """What each message is, when it is not a row change (``EVENT_KIND``); null for a change or an unknown op."""
    op = event["op"]
    no_op = pc.is_null(op)
    named = pc.fill_null(pc.match_substring(_schema_name(schema.combine_chunks()), "Heartbeat"), False)
    heartbeat = pc.or_(pc.fill_null(pc.starts_with(topics, HEARTBEAT_TOPIC), False), named)
    alone = pc.and_(pc.and_(pc.is_valid(event["ts_ms"]), pc.is_null(event["source"])), pc.is_null(event["status"]))
    heartbeat = pc.or_(heartbeat, pc.and_(alone, pc.is_null(event["ddl"])))
    schema_change = pc.or_(pc.is_valid(event["ddl"]), pc.is_valid(event["tableChanges"]))
    transaction = pc.is_in(event["status"], pa.array(["BEGIN", "END"]))
    kind = pc.case_when(
        pc.make_struct(
            pa.array(tombstone),
            pc.fill_null(pc.equal(op, "t"), False),
            pc.fill_null(pc.equal(op, "m"), False),
            pc.and_(no_op, pc.fill_null(transaction, False)),
            pc.and_(no_op, schema_change),
            pc.and_(no_op, heartbeat),
        ),
        "tombstone",
        TRUNCATE,
        "message",
        "transaction",
        "schema_change",
        "heartbeat",
    )
    return kind.cast(pa.string())


def _schema_name(schema: pa.StructArray | pa.DictionaryArray) -> pa.Array:
    """Each message's converter schema's name, from the schema or from its index into the distinct ones."""
    if pa.types.is_dictionary(schema.type):
        return schema.dictionary.field("name").take(schema.indices)
    return schema.field("name")


def _unknown_op(op: pa.Array, kinds: pa.Array) -> pa.Array:
    unknown = pc.and_(pc.is_null(kinds), pc.invert(pc.fill_null(pc.is_in(op, pa.array(CHANGES)), False)))
    text = pc.binary_join_element_wise(
        "unknown Debezium op '", pc.fill_null(op, "null"), "' (not a change event Debezium sends)", ""
    )
    return pc.if_else(unknown, text, pa.scalar(None, pa.string()))


def _keyless(columns: dict[str, pa.Array], is_change: pa.Array, deleted: pa.Array, spec: ChangeSpec) -> pa.Array:
    missing = pa.repeat(False, len(is_change))
    for key in spec.record_key:
        if key in columns:
            missing = pc.or_(missing, pc.is_null(columns[key]))
    text = pc.if_else(
        deleted, pa.scalar("the delete has no key in before"), pa.scalar("the change event has no key in after")
    )
    return pc.if_else(pc.and_(is_change, missing), text, pa.scalar(None, pa.string()))


def _position(
    event: dict[str, pa.Array], ordering: str = "position", binlog: tuple[pa.Array, pa.Array] | None = None
) -> pa.Array:
    """The event's place in its database's log, as a fixed-width string that sorts as the log does:
    Postgres by LSN (Hudi's ``PostgresDebeziumAvroPayload``); MySQL by binlog file number, position and row
    within the event (Hudi's ``MySqlDebeziumAvroPayload`` orders by file and position only, so the rows of
    one binlog event tie there); else by ``ts_ms``. Under ``ordering = "ts_ms"`` the source's commit time comes
    first and the position breaks its ties: a MySQL failover to a server whose binlog numbers are lower then
    keeps its order. (A GTID orders events only within one server, as its binlog position does.) ``binlog``:
    ``_binlog_position`` of the events, when it was found already."""
    source = event["source"]
    lsn = source.field("lsn")
    mysql, is_mysql = binlog or _binlog_position(source)
    postgres = pc.binary_join_element_wise("p", _pad(lsn, 20), "")
    clock = pc.binary_join_element_wise("t", _pad(pc.coalesce(source.field("ts_ms"), event["ts_ms"]), 20), "")
    position = pc.case_when(pc.make_struct(pc.is_valid(lsn), is_mysql), postgres, mysql, clock)
    if ordering == "ts_ms":
        return pc.binary_join_element_wise(clock, position, "")
    return position


def _log_point(event: dict[str, pa.Array], is_change: pa.Array, binlog: tuple[pa.Array, pa.Array]) -> pa.Array:
    """Each change event's point in its log for ``changes.source_log.check``: MySQL's binlog file, position and row
    (``binlog``) with its server; Postgres' commit LSN (the first of ``source.sequence``) and LSN; null for any
    other event."""
    source = event["source"]
    mysql, is_mysql = binlog
    committed = pc.struct_field(pc.extract_regex(source.field("sequence"), r'^\[\s*"?(?P<n>\d+)'), "n")
    postgres = pc.binary_join_element_wise("p", _pad(committed, 20), _pad(source.field("lsn"), 20), "")
    position = pc.case_when(pc.make_struct(is_mysql, pc.fill_null(pc.is_valid(postgres), False)), mysql, postgres)
    position = pc.if_else(is_change, position, pa.scalar(None, pa.string()))
    ts = pc.coalesce(source.field("ts_ms"), event["ts_ms"])
    server = pc.if_else(is_mysql, source.field("server_id").cast(pa.string()), pa.scalar(None, pa.string()))
    return pa.StructArray.from_arrays([position, ts, server], fields=list(POINT))


def _binlog_position(source: pa.Array) -> tuple[pa.Array, pa.Array]:
    """MySQL's place in its binlog (file number, position, row within the event), and where an event has one."""
    file, pos, row = (source.field(name) for name in ("file", "pos", "row"))
    number = pc.struct_field(pc.extract_regex(file, r"(?P<n>\d+)$"), "n")
    mysql = pc.binary_join_element_wise("m", _pad(number, 10), _pad(pos, 20), _pad(pc.fill_null(row, 0), 10), "")
    return mysql, pc.fill_null(pc.and_(pc.is_valid(number), pc.is_valid(pos)), False)


def _pad(column: pa.Array, width: int) -> pa.Array:
    return pc.utf8_lpad(column.cast(pa.string()), width, "0")


def _source_table(event: dict[str, pa.Array]) -> pa.Array:
    """``db.schema.table`` (Postgres, SQL Server), ``db.table`` (MySQL), as the event's ``source`` names it."""
    source = event["source"]
    db, schema, table = (source.field(name) for name in ("db", "schema", "table"))
    with_schema = pc.binary_join_element_wise(pc.fill_null(db, ""), schema, table, ".")
    without = pc.binary_join_element_wise(pc.fill_null(db, ""), table, ".")
    return pc.if_else(pc.is_valid(schema), with_schema, without)
