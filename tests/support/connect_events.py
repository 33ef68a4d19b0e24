"""Debezium change events as its Postgres and MySQL connectors write them through Kafka Connect's JSON
converter, with and without their Connect schema, and the model of the source table they describe.

The shapes follow Debezium's documentation (connectors/postgresql.adoc: the envelope, REPLICA IDENTITY
DEFAULT deletes whose ``before`` holds the key alone, truncate, logical decoding messages, transaction
metadata; shared-mariadb-mysql.adoc: the schema change topic) and its test resources
(debezium-connector-common/src/test/resources/json/serde-with-schema.json). Under Debezium's defaults
(``decimal.handling.mode = precise``, ``time.precision.mode = adaptive``) a column's value is encoded by its
database type, which the ``Column`` entries below pair with what a reader of the table must see.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def decimal_bytes(value: Decimal, scale: int) -> str:
    """Kafka Connect's Decimal: the unscaled value, big-endian two's complement, base64."""
    unscaled = int(value.scaleb(scale))
    return base64.b64encode(unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)).decode()


def micros(when: dt.datetime) -> int:
    return (when - EPOCH) // dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class Column:
    """One column: its declared type, its field in the Connect schema, and how a value is sent."""

    name: str
    ddl: str
    schema: dict
    encode: Callable[[Any], Any] = lambda v: v


POSTGRES_COLUMNS = [
    Column("id", "BIGINT", {"type": "int64", "optional": False}),
    Column("name", "STRING", {"type": "string", "optional": True}),
    Column("region", "STRING", {"type": "string", "optional": False, "default": "eu"}),
    # numeric(10,2)
    Column(
        "amount",
        "DECIMAL(10,2)",
        {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        },
        lambda v: decimal_bytes(v, 2),
    ),
    # numeric without precision or scale
    Column(
        "price",
        "DECIMAL(20,4)",
        {
            "type": "struct",
            "optional": True,
            "name": "io.debezium.data.VariableScaleDecimal",
            "version": 1,
            "doc": "Variable scaled decimal",
            "fields": [
                {"type": "int32", "optional": False, "field": "scale"},
                {"type": "bytes", "optional": False, "field": "value"},
            ],
        },
        lambda v: {"scale": -v.as_tuple().exponent, "value": decimal_bytes(v, -v.as_tuple().exponent)},
    ),
    # timestamp(6)
    Column(
        "created_at",
        "TIMESTAMP",
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1},
        micros,
    ),
    # timestamp(3)
    Column(
        "updated_ms",
        "TIMESTAMP",
        {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1},
        lambda v: micros(v) // 1000,
    ),
    # timestamptz
    Column(
        "seen_at",
        "TIMESTAMP",
        {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1},
        lambda v: v.isoformat().replace("+00:00", "Z"),
    ),
    # date
    Column(
        "birthday",
        "DATE",
        {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1},
        lambda v: (v - dt.date(1970, 1, 1)).days,
    ),
    Column("doc", "STRING", {"type": "string", "optional": True, "name": "io.debezium.data.Json", "version": 1}),
    Column("uid", "STRING", {"type": "string", "optional": True, "name": "io.debezium.data.Uuid", "version": 1}),
    Column("active", "BOOLEAN", {"type": "boolean", "optional": True, "default": False}),
    # bytea
    Column("blob", "BINARY", {"type": "bytes", "optional": True}, lambda v: base64.b64encode(v).decode()),
    Column("ratio", "DOUBLE", {"type": "double", "optional": True}),
]
DDL = ", ".join(f"{c.name} {c.ddl}" for c in POSTGRES_COLUMNS)
NAMES = [c.name for c in POSTGRES_COLUMNS]


def row_schema(columns: list[Column], name: str) -> dict:
    return {
        "type": "struct",
        "optional": True,
        "name": name,
        "field": "",
        "fields": [{**c.schema, "field": c.name} for c in columns],
    }


def envelope_schema(columns: list[Column], prefix: str = "pg.public.orders") -> dict:
    value = row_schema(columns, f"{prefix}.Value")
    source = {
        "type": "struct",
        "optional": False,
        "name": "io.debezium.connector.postgresql.Source",
        "field": "source",
        "fields": [
            {"type": "string", "optional": False, "field": "version"},
            {"type": "string", "optional": False, "field": "connector"},
            {"type": "string", "optional": False, "field": "name"},
            {"type": "int64", "optional": False, "field": "ts_ms"},
            {
                "type": "string",
                "optional": True,
                "name": "io.debezium.data.Enum",
                "version": 1,
                "default": "false",
                "parameters": {"allowed": "true,last,false,incremental"},
                "field": "snapshot",
            },
            {"type": "string", "optional": False, "field": "db"},
            {"type": "string", "optional": False, "field": "schema"},
            {"type": "string", "optional": False, "field": "table"},
            {"type": "int64", "optional": True, "field": "txId"},
            {"type": "int64", "optional": True, "field": "lsn"},
        ],
    }
    return {
        "type": "struct",
        "optional": False,
        "name": f"{prefix}.Envelope",
        "version": 1,
        "fields": [
            {**value, "field": "before"},
            {**value, "field": "after"},
            source,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


@dataclass
class PostgresTable:
    """A Postgres table's change events (``op`` c/r/u/d, REPLICA IDENTITY DEFAULT unless ``full``) at rising
    LSNs, and the table they leave (``rows``: what a correct sink holds)."""

    columns: list[Column] = field(default_factory=lambda: list(POSTGRES_COLUMNS))
    with_schema: bool = True
    full: bool = False
    table: str = "orders"
    lsn: int = 1000
    rows: dict[Any, dict] = field(default_factory=dict)
    key: tuple[str, ...] = ("id",)  # the primary key's columns
    schema: str = "public"
    sequence: bool = False  # source.sequence, as Debezium 1.4 and later send it: [last commit LSN, LSN]
    later: int = 0  # what the clock went on by while the LSNs went back (``restore``)

    def restore(self, lsn: int) -> None:
        """The database restored (or a replica promoted) at ``lsn``, behind what was sent: the LSNs go back,
        the commit times go on."""
        self.later += self.lsn - lsn + 1000
        self.lsn = lsn

    @property
    def topic(self) -> str:
        return f"pg.{self.schema}.{self.table}"

    def key_of(self, values: dict) -> Any:
        """A row's key in ``rows``: the key column's value, or a tuple of them."""
        return values[self.key[0]] if len(self.key) == 1 else tuple(values[k] for k in self.key)

    def kafka_key(self, values: dict) -> dict:
        """The record's Kafka key as Debezium writes it: the primary key's columns, with their schema when schemas are
        on."""
        payload = {k: values[k] for k in self.key}
        if not self.with_schema:
            return payload
        fields = [{**c.schema, "field": c.name} for c in self.columns if c.name in self.key]
        return {
            "schema": {"type": "struct", "optional": False, "name": f"{self.topic}.Key", "fields": fields},
            "payload": payload,
        }

    def _event(self, op: str, before: dict | None, after: dict | None) -> dict:
        self.lsn += 8
        encode = {c.name: c.encode for c in self.columns}

        def image(values: dict | None) -> dict | None:
            if values is None:
                return None
            return {
                k: (None if v is None else v.sent if isinstance(v, Placeholder) else encode[k](v))
                for k, v in values.items()
            }

        source = {
            "version": "3.3.1.Final",
            "connector": "postgresql",
            "name": "pg",
            "ts_ms": 1_732_000_000_000 + self.lsn + self.later,
            "snapshot": "true" if op == "r" else "false",
            "db": "shop",
            "schema": self.schema,
            "table": self.table,
            "txId": 700 + self.lsn,
            "lsn": self.lsn,
            "xmin": None,
            **({"sequence": json.dumps([str(self.lsn), str(self.lsn)])} if self.sequence else {}),
        }
        payload = {
            "before": image(before),
            "after": image(after),
            "source": source,
            "op": op,
            "ts_ms": 1_732_000_000_500 + self.lsn,
            "ts_us": (1_732_000_000_500 + self.lsn) * 1000,
            "transaction": None,
        }
        return (
            {"schema": envelope_schema(self.columns, self.topic), "payload": payload} if self.with_schema else payload
        )

    def upsert(self, values: dict, op: str | None = None, unchanged: tuple[str, ...] = ()) -> dict:
        """An insert or update of ``values``; the ``unchanged`` columns (TOASTed, unchanged) are sent as
        Debezium's placeholder, and the row keeps what it held."""
        key = self.key_of(values)
        old = self.rows.get(key)
        op = op or ("u" if old is not None else "c")
        before = dict(old) if (op == "u" and self.full and old is not None) else None
        self.rows[key] = {**values, **{c: old[c] for c in unchanged}} if unchanged else dict(values)
        sent = {**values, **{c: UNAVAILABLE[c] for c in unchanged}}
        return self._event(op, before, sent)

    def delete(self, key: Any) -> dict:
        old = self.rows.pop(key)
        # REPLICA IDENTITY DEFAULT: the old tuple holds the key alone; Debezium fills a required column it lacks with
        # the column's default, else its type's fallback (JdbcValueConverters.convertValue), an optional one with null
        before = (
            dict(old)
            if self.full
            else {c.name: (old[c.name] if c.name in self.key else _missing(c)) for c in self.columns}
        )
        return self._event("d", before, None)

    def truncate(self) -> dict:
        self.rows.clear()
        return self._event("t", None, None)

    def expected(self, names: list[str]) -> list[dict]:
        return [{n: self.rows[k].get(n) for n in names} for k in sorted(self.rows)]


FALLBACKS = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "float": 0.0,
    "double": 0.0,
    "boolean": False,
    "string": "",
    "bytes": "",
}


def _missing(column: Column):
    if column.schema.get("optional", True):
        return None
    return column.schema["default"] if "default" in column.schema else FALLBACKS[column.schema["type"]]


@dataclass(frozen=True)
class Placeholder:
    """Debezium's stand-in for a value Postgres did not send (an unchanged TOASTed column), as it is sent."""

    sent: str


TOAST = "__debezium_unavailable_value"
UNAVAILABLE = {
    "name": Placeholder(TOAST),
    "doc": Placeholder(TOAST),
    "blob": Placeholder(base64.b64encode(TOAST.encode()).decode()),
}


def sample_row(i: int, version: int = 0, region: str | None = None) -> dict:
    base = dt.datetime(2024, 3, 1, 10, 20, 30, 123456, tzinfo=UTC)
    return {
        "id": i,
        "name": f"name {i} v{version}",
        "region": region or ("eu", "us", "apac")[i % 3],
        "amount": Decimal(f"{i * 3 + version}.{(i * 7 + version) % 100:02d}") * (-1 if i % 5 == 0 else 1),
        "price": Decimal(f"{i}.{version % 10}{i % 10}5"),
        "created_at": base + dt.timedelta(days=i, microseconds=version),
        "updated_ms": (base + dt.timedelta(hours=version)).replace(microsecond=123000),
        "seen_at": base - dt.timedelta(days=365 * 60 + i),  # before 1970 too
        "birthday": dt.date(1960 + i % 60, 1 + i % 12, 1 + i % 28),
        "doc": json.dumps({"i": i, "v": version}),
        "uid": f"00000000-0000-0000-0000-{i:012d}",
        "active": bool((i + version) % 2),
        "ratio": i / 7 + version,
        "blob": bytes([i % 256, version % 256]) * (1 + i % 4),
    }


TRANSACTION_BEGIN = {
    "status": "BEGIN",
    "id": "571:53195829",
    "ts_ms": 1486500577125,
    "event_count": None,
    "data_collections": None,
}
TRANSACTION_END = {
    "status": "END",
    "id": "571:53195832",
    "ts_ms": 1486500577691,
    "event_count": 2,
    "data_collections": [{"data_collection": "s1.a", "event_count": 1}, {"data_collection": "s2.a", "event_count": 1}],
}
HEARTBEAT = {
    "schema": {
        "type": "struct",
        "name": "io.debezium.connector.common.Heartbeat",
        "optional": False,
        "fields": [{"type": "int64", "optional": False, "field": "ts_ms"}],
    },
    "payload": {"ts_ms": 1588252618953},
}
LOGICAL_MESSAGE = {
    "before": None,
    "after": None,
    "op": "m",
    "ts_ms": 1559033904961,
    "message": {"prefix": "foo", "content": "Ymfy"},
    "source": {
        "version": "3.3.1.Final",
        "connector": "postgresql",
        "name": "pg",
        "ts_ms": 1559033904863,
        "snapshot": False,
        "db": "postgres",
        "schema": "",
        "table": "",
        "txId": 556,
        "lsn": 46523128,
        "xmin": None,
    },
}
# MySQL's schema change topic (shared-mariadb-mysql.adoc)
SCHEMA_CHANGE = {
    "source": {
        "version": "3.0.0.Final",
        "connector": "mysql",
        "name": "mysql",
        "ts_ms": 0,
        "snapshot": "false",
        "db": "inventory",
        "table": "customers",
        "server_id": 0,
        "gtid": None,
        "file": "mysql-bin.000003",
        "pos": 219,
        "row": 0,
        "thread": None,
        "query": None,
    },
    "ts_ms": 1588252618953,
    "databaseName": "inventory",
    "schemaName": None,
    "ddl": "ALTER TABLE customers ADD middle_name varchar(255) AFTER first_name",
    "tableChanges": [
        {
            "type": "ALTER",
            "id": '"inventory"."customers"',
            "table": {
                "defaultCharsetName": "utf8mb4",
                "primaryKeyColumnNames": ["id"],
                "columns": [
                    {
                        "name": "id",
                        "jdbcType": 4,
                        "typeName": "INT",
                        "length": 11,
                        "position": 1,
                        "optional": False,
                        "autoIncremented": True,
                        "generated": True,
                    }
                ],
            },
        }
    ],
}


@dataclass
class MySqlTable:
    """A MySQL table's change events (schemas off, as ``serde-without-schema.json``), at rising binlog positions
    of one server; ``fail_over`` moves to another server whose binlog starts again at a lower file number."""

    server: int = 1
    file: int = 10
    pos: int = 4
    ts_ms: int = 1_732_000_000_000
    rows: dict[int, dict] = field(default_factory=dict)

    def upsert(self, values: dict, op: str | None = None) -> dict:
        old = self.rows.get(values["id"])
        self.rows[values["id"]] = dict(values)
        return self._event(op or ("u" if old is not None else "c"), None, values)

    def delete(self, key: int) -> dict:
        return self._event("d", self.rows.pop(key), None)

    def fail_over(self) -> None:
        self.server, self.file, self.pos = self.server + 1, 1, 4

    def _event(self, op: str, before: dict | None, after: dict | None) -> dict:
        self.pos += 200
        self.ts_ms += 7
        source = {
            "version": "3.0.0.Final",
            "connector": "mysql",
            "name": "mysql",
            "ts_ms": self.ts_ms,
            "snapshot": "false",
            "db": "inventory",
            "table": "customers",
            "server_id": self.server,
            "gtid": f"00000000-0000-0000-0000-00000000000{self.server}:{self.pos}",
            "file": f"mysql-bin.{self.file:06d}",
            "pos": self.pos,
            "row": 0,
            "thread": 7,
            "query": None,
        }
        return {"op": op, "ts_ms": self.ts_ms + 3, "before": before, "after": after, "source": source}


# -- Avro, as Kafka Connect's AvroConverter writes the same events (Confluent's AvroData.fromConnectSchema) --

AVRO_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float64": "double",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
CONNECT_LOGICAL = {
    "org.apache.kafka.connect.data.Date": "date",
    "org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
    "org.apache.kafka.connect.data.Time": "time-millis",
}


def avro_schema(connect: dict, defined: set[str] | None = None):
    """The Avro schema AvroData makes of a Connect schema: an optional type as a union with null, int8/int16
    as int with ``connect.type``, a named type with ``connect.name`` (and Avro's logical type where Connect's
    Decimal, Date, Timestamp and Time have one), a struct as a record named after it, defined once."""
    defined = set() if defined is None else defined
    kind, name = connect["type"], connect.get("name")
    if kind == "struct":
        full = name or "ConnectDefault"
        if full in defined:
            out = full
        else:
            defined.add(full)
            namespace, _, short = full.rpartition(".")
            out = {
                "type": "record",
                "name": short,
                **({"namespace": namespace} if namespace else {}),
                "fields": [_avro_field(f, defined) for f in connect["fields"]],
                **({"connect.name": name} if name else {}),
            }
    elif kind == "array":
        out = {"type": "array", "items": avro_schema(connect["items"], defined)}
    else:
        out = {"type": AVRO_PRIMITIVES[kind]}
        if kind in ("int8", "int16"):
            out["connect.type"] = kind
        if name:
            out.update({"connect.version": connect.get("version", 1), "connect.name": name})
            if connect.get("parameters"):
                out["connect.parameters"] = dict(connect["parameters"])
            if name == "org.apache.kafka.connect.data.Decimal":
                parameters = connect["parameters"]
                out.update(
                    {
                        "logicalType": "decimal",
                        "scale": int(parameters["scale"]),
                        "precision": int(parameters.get("connect.decimal.precision", 64)),
                    }
                )
            elif name in CONNECT_LOGICAL:
                out["logicalType"] = CONNECT_LOGICAL[name]
        if set(out) == {"type"}:
            out = out["type"]
    return ["null", out] if connect.get("optional") else out


def _avro_field(connect: dict, defined: set[str]) -> dict:
    out = {"name": connect["field"], "type": avro_schema(connect, defined)}
    return {**out, "default": None} if connect.get("optional") else out


def avro_datum(connect: dict, value):
    """A JSON converter value as the Avro datum of the same Connect schema: bytes from base64."""
    if value is None:
        return None
    kind = connect["type"]
    if kind == "struct":
        return {f["field"]: avro_datum(f, value.get(f["field"])) for f in connect["fields"]}
    if kind == "array":
        return [avro_datum(connect["items"], v) for v in value]
    if kind == "bytes":
        return base64.b64decode(value)
    return value


def avro_value(event: dict, framed: bool = True, schema_id: int = 41) -> bytes:
    """A change event of the JSON converter with schemas, as the Avro converter's value (Confluent's framing:
    a zero byte and a 4-byte schema id, before the datum)."""
    import io
    import struct

    import fastavro

    parsed = fastavro.parse_schema(avro_schema(event["schema"]))
    out = io.BytesIO()
    if framed:
        out.write(b"\x00" + struct.pack(">I", schema_id))
    fastavro.schemaless_writer(out, parsed, avro_datum(event["schema"], event["payload"]))
    return out.getvalue()
