"""Kafka records of a Debezium feed into the rows of one micro-batch: the columns it is decoded into, the
rows, and where each came from. Spark-free: the driver runs it on a micro-batch it collected, Spark's
prepare tasks on their part of a larger one.

Records are Kafka records (``RECORD_SCHEMA``) or lines of landing files (``LINE_SCHEMA``); a value is JSON,
or Avro under the schema registry's schema of its id or ``source.avro_schema`` (``changes.connect.avro``), read as the
JSON converter would have written it. Confluent's framing (a zero byte and a schema id) is taken off here.

The columns are ``source.schema`` when it is given. Otherwise they come from the events: the table's
columns, and those the events' schemas add (``changes.connect.schema.arrow_type``) through the table's schema
evolution rules (``table.schema.evolve``): a column added in the source database is added to the table,
nullable, by the first micro-batch that carries it; a change that is not a widening stops the job, naming
the column. Every part of one micro-batch is decoded into the same columns, found first from all of it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import (
    CORRUPT,
    DECODE_REASON,
    EVENT_POSITION,
    LANDED_COLUMNS,
    SOURCE_BLOCK,
    SOURCE_FILE,
    SOURCE_MTIME,
    SOURCE_OFFSET,
)
from laketide.table.errors import Invalid
from laketide.table.format.schema import IS_DELETED, SchemaError, check_avro_names, data_schema, evolve
from laketide.writer.changes.connect.avro import AvroValues
from laketide.writer.changes.connect.column import Decoding
from laketide.writer.changes.connect.schema import Encoding, arrow_type
from laketide.writer.changes.events import (
    ChangeSpec,
    Messages,
    change_rows,
    output_schema,
    parse_messages,
    positions,
    row_schemas,
)
from laketide.writer.changes.kafka_values import record_origin
from laketide.writer.changes.schema_registry import schema_ids, unframed
from laketide.writer.changes.source_log import FILES, FeedLog
from laketide.writer.changes.source_log import check as check_log
from laketide.writer.changes.tally import Tally

if TYPE_CHECKING:
    from laketide.table import Table


@dataclass(frozen=True)
class DecodedBatch:
    """A micro-batch's change events as rows (``ChangeDecoder.rows``), what they held besides, and the columns the
    table's schema evolves by: what the core makes its batch of (``BatchWriter.decoded_batch``)."""

    rows: pa.Table
    tally: Tally
    incoming: pa.Schema


# what a reader hands on for each Kafka record: its value, and where it was
RECORD_SCHEMA = pa.schema(
    [("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())]
)
# and for a line of a landing file: the line, and where it was (as ``spark.sources.with_origin`` gives it)
LINE_SCHEMA = pa.schema(
    [
        ("value", pa.string()),
        (SOURCE_FILE, pa.string()),
        (SOURCE_MTIME, pa.timestamp("us", "UTC")),
        (SOURCE_BLOCK, pa.int64()),
    ]
)


class ChangeDecoder:
    """Decodes one table's change feed. ``declared``: ``source.schema`` as Arrow types, or ``None`` to take
    the columns from the events; ``required``: the columns the table's key, partitioning and ordering need;
    ``avro``: how the values are read, when they are Avro."""

    def __init__(
        self,
        declared: pa.Schema | None,
        record_key: tuple[str, ...],
        required: tuple[str, ...],
        decoding: Decoding,
        avro: AvroValues | None = None,
    ):
        self.declared, self.record_key, self.required, self.decoding, self.avro = (
            declared,
            record_key,
            required,
            decoding,
            avro,
        )

    @property
    def reads_schemas(self) -> bool:
        """Whether a micro-batch's schemas must be read before its rows: for its columns (no ``source.schema``),
        or to look its Avro values' schema ids up in the registry."""
        return self.declared is None or (self.avro is not None and self.avro.registry is not None)

    def columns(self, schemas: list[list[dict]], table: pa.Schema | None) -> pa.Schema:
        """The columns a micro-batch whose events carry ``schemas`` (``changes.events.row_schemas``) is decoded
        into, for a table of ``table`` columns (``None`` before its first commit)."""
        if self.declared is not None:
            return self.declared
        current = data_schema(table) if table is not None and len(table) else None
        try:
            events = None
            for columns in schemas:
                events = evolve(events, _arrow_schema(columns))
            if events is None and current is None:
                raise Invalid(
                    "the change events carry no schema (the JSON converter's schemas.enable = false) and the "
                    "table has no "
                    "columns yet: give source.schema, or turn on the converter's schemas"
                )
            merged = evolve(current, events) if events is not None else current
            if merged is None:  # neither, refused above
                raise Invalid("the change events carry no columns")
            check_avro_names(merged)
        except SchemaError as error:
            raise Invalid(f"the change events' columns cannot be written to the table: {error}") from None
        missing = [name for name in self.required if name not in merged.names]
        if missing:
            raise Invalid(
                f"the change events have no column {', '.join(repr(m) for m in missing)}, which the table's key, "
                f"partitioning or ordering names; columns: {', '.join(merged.names)}"
            )
        return merged

    def columns_for(self, row_schemas: Callable[[], list[list[dict]]], table: Table) -> pa.Schema:
        """The columns of a micro-batch into ``table``: ``source.schema``'s, else the table's with those of the events'
        ``row_schemas``, which are found (and the table's schema read) only then."""
        if not self.reads_schemas:
            return self.declared
        schemas = row_schemas()  # also looks the Avro values' schema ids up, before Spark's tasks get the decoder
        if self.declared is not None:
            return self.declared
        return self.columns(schemas, table.schema(table.timeline))

    def incoming(self, columns: pa.Schema) -> pa.Schema:
        """The records' columns a micro-batch decoded into ``columns`` brings: what the table's schema evolves by."""
        return pa.schema(
            [f for f in output_schema(ChangeSpec(columns, self.record_key)) if f.name not in LANDED_COLUMNS]
        )

    def decode(self, records: pa.Table, table: Table, log: FeedLog, messages: Messages | None = None) -> DecodedBatch:
        """A micro-batch of ``records`` decoded for ``table``, whose source's log is as ``log`` says; ``messages``:
        its values parsed already (``parse``), as routing them to their tables did."""
        if messages is None and self.avro is None:
            messages = self.parse(records)  # once, for the row schemas and the rows
        columns = self.columns_for(lambda: self.schemas(records, messages), table)
        rows, tally = self.rows(records, columns, messages, log)
        return DecodedBatch(rows, tally, self.incoming(columns))

    @staticmethod
    def parse(records: pa.Table) -> Messages:
        """The JSON values of ``records`` (Kafka records, framing taken off, or landing lines) parsed once."""
        values = records["value"].combine_chunks()
        return parse_messages(unframed(values) if "topic" in records.column_names else values)

    def schemas(self, records: pa.Table, messages: Messages | None = None) -> list[list[dict]]:
        """The distinct row schemas the events of ``records`` carry (``changes.events.row_schemas``)."""
        if self.avro is not None:
            return self.avro.row_schemas(schema_ids(records["value"].combine_chunks()))
        return row_schemas(messages if messages is not None else self.parse(records))

    def rows(
        self, records: pa.Table, columns: pa.Schema, messages: Messages | None = None, log: FeedLog | None = None
    ) -> tuple[pa.Table, Tally]:
        """One row per record (``RECORD_SCHEMA`` or ``LINE_SCHEMA``), decoded into ``columns``, with where it came
        from and, for one that goes to quarantine, its raw form; and what the records held besides (``Tally``:
        the columns events carried that ``columns`` lack, events whose log went back after what ``log`` says the
        table has seen). ``messages``: the JSON values parsed already."""
        if EVENT_POSITION not in columns.names:
            columns = columns.append(pa.field(EVENT_POSITION, pa.string()))
        unread = None
        if self.avro is not None:
            values, unread = self.avro.as_json(records["value"].combine_chunks())
            messages = parse_messages(values)
        elif messages is None:
            messages = self.parse(records)
        kafka = "topic" in records.column_names
        topics = records["topic"].combine_chunks() if kafka else pa.nulls(records.num_rows, pa.string())
        log = log or FeedLog()
        decoding = replace(self.decoding, ordering=log.ordering or self.decoding.ordering)
        changed = change_rows(messages, topics, ChangeSpec(columns, self.record_key, decoding))
        rows = changed.rows
        if unread is not None and any(unread):
            reasons = pc.coalesce(pa.array(unread, pa.string()), rows[DECODE_REASON])
            rows = rows.set_column(rows.schema.get_field_index(DECODE_REASON), DECODE_REASON, reasons)
        if kafka:
            origin, offsets = record_origin(records)
            rows = rows.append_column(SOURCE_FILE, origin).append_column(SOURCE_OFFSET, offsets)
            raw = raw_records(records, rows[DECODE_REASON])
        else:
            origin = records[SOURCE_FILE].combine_chunks()
            for name in (SOURCE_FILE, SOURCE_MTIME, SOURCE_BLOCK):
                rows = rows.append_column(name, records[name])
            raw = pc.if_else(
                pc.is_valid(rows[DECODE_REASON]), records["value"].cast(pa.string()), pa.scalar(None, pa.string())
            )
        tally = Tally(unknown_fields=changed.unknown_fields, ordering=decoding.ordering)
        streams = origin if kafka else pa.repeat(FILES, records.num_rows)
        tally.log = check_log(changed.points, streams, log.points)
        if tally.log.behind and decoding.ordering == "position" and decoding.on_log_reset == "ts_ms":
            # the log went back: this table's events are ordered by their commit time from here on
            at = rows.schema.get_field_index(EVENT_POSITION)
            rows = rows.set_column(at, EVENT_POSITION, positions(messages, "ts_ms"))
            tally.ordering = "ts_ms"
        return rows.append_column(CORRUPT, raw), tally


def _arrow_schema(columns: list[dict]) -> pa.Schema:
    fields = []
    for column in columns:
        kind = arrow_type(Encoding.of(column))
        if kind is not None and column.get("field") not in (IS_DELETED,):
            fields.append(pa.field(column["field"], kind))
    return pa.schema(fields)


def raw_records(records: pa.Table, reasons: pa.ChunkedArray) -> pa.Array:
    """A bad record's raw form for quarantine: where it was, and its value as text, or base64 when not UTF-8."""
    bad = pc.is_valid(reasons).to_numpy(zero_copy_only=False)
    out: list[str | None] = [None] * records.num_rows
    if not bad.any():
        return pa.array(out, pa.string())

    for i in bad.nonzero()[0].tolist():
        value: bytes | None = records["value"][i].as_py()
        raw: dict = {
            "topic": records["topic"][i].as_py(),
            "partition": records["partition"][i].as_py(),
            "offset": records["offset"][i].as_py(),
        }
        if value is None:
            raw["value"] = None
        else:
            try:
                raw["value"] = value.decode("utf-8")
            except UnicodeDecodeError:  # as text where it is UTF-8, else as base64 only
                raw["value_base64"] = base64.b64encode(value).decode()
        out[i] = json.dumps(raw)
    return pa.array(out, pa.string())
