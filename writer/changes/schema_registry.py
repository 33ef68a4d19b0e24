"""The writer's schema of each Avro value, by the id in its Confluent framing, from a schema registry.

Kafka Connect's AvroConverter registers each new schema of a topic (a column added in the source) and
writes its id before every value (Confluent's wire format: a zero byte, the id in 4 bytes big-endian, the
datum). ``GET /schemas/ids/{id}`` of Confluent's Schema Registry REST API (also Karapace's, Apicurio's
compatible API and Redpanda's) answers ``{"schema": "<the Avro schema, as JSON text>"}``. An id's schema
never changes, so each is asked for once per job. The framing itself is read here too (``framing``, ``unframed``,
``schema_ids``).
"""

from __future__ import annotations

import json
import time

import httpx
import pyarrow as pa
import pyarrow.compute as pc

from laketide.table.errors import Invalid, Unavailable

MAGIC = 0  # the first byte of Confluent's wire format
RETRIES = 4


class UnknownSchema(Invalid):
    """The registry does not have a value's schema id: that value goes to quarantine."""


class SchemaRegistry:
    """A client of one registry. ``options``: ``basic.auth.user.info`` (``user:password``), as Confluent's
    clients name it. Holds only plain data (the schemas it has fetched), so Spark's tasks get it by pickling."""

    def __init__(self, url: str, options: dict[str, str] | None = None):
        self.url = url.rstrip("/")
        self.options = dict(options or {})
        self.schemas: dict[int, dict] = {}

    def schema(self, schema_id: int) -> dict:
        """The Avro schema of ``schema_id``: raises ``UnknownSchema`` when the registry has none, and
        ``Unavailable`` when it cannot be asked (after retries)."""
        if schema_id not in self.schemas:
            self.schemas[schema_id] = self._fetch(schema_id)
        return self.schemas[schema_id]

    def _fetch(self, schema_id: int) -> dict:
        where = f"{self.url}/schemas/ids/{schema_id}"
        user = self.options.get("basic.auth.user.info")
        name, _, password = (user or "").partition(":")
        basic = (name, password) if user and ":" in user else None
        failure: Exception | None = None
        for attempt in range(RETRIES):
            try:
                answer = httpx.get(
                    where, auth=basic, timeout=10, headers={"Accept": "application/vnd.schemaregistry.v1+json"}
                )
            except httpx.HTTPError as error:
                failure = error
            else:
                if answer.status_code == 404:
                    raise UnknownSchema(f"schema id {schema_id} is not in the schema registry {self.url}")
                if answer.status_code in (401, 403):
                    raise Invalid(
                        f"the schema registry {self.url} refused the credentials (HTTP {answer.status_code}): "
                        'set source.schema_registry.options."basic.auth.user.info" = "user:password"'
                    )
                if answer.status_code < 500:
                    return self._parsed(schema_id, answer)
                failure = RuntimeError(f"HTTP {answer.status_code}")
            time.sleep(0.5 * 2**attempt)
        raise Unavailable(
            f"the schema registry {self.url} could not be asked for schema id {schema_id} ({failure}); "
            "check source.schema_registry.url and that the registry is up, then start the job again"
        )

    def _parsed(self, schema_id: int, answer: httpx.Response) -> dict:
        try:
            body = answer.json()
            if body.get("schemaType", "AVRO") != "AVRO":
                raise UnknownSchema(
                    f"schema id {schema_id} of the schema registry {self.url} is {body['schemaType']}, not Avro"
                )
            return json.loads(body["schema"])
        except (ValueError, KeyError, TypeError) as error:
            raise Invalid(
                f"the schema registry {self.url} answered schema id {schema_id} with what is not an Avro schema "
                f"(HTTP {answer.status_code}: {error}); is source.schema_registry.url the registry's address?"
            ) from None


def framing(value: bytes | None) -> tuple[int | None, bytes | None]:
    """A value's schema id and payload under Confluent's wire format; ``(None, value)`` when it is not framed."""
    if value is not None and len(value) >= 5 and value[0] == MAGIC:
        return int.from_bytes(value[1:5], "big"), value[5:]
    return None, value


def _framed(values: pa.Array) -> pa.Array:
    return pc.fill_null(
        pc.and_(pc.starts_with(values, bytes([MAGIC])), pc.greater_equal(pc.binary_length(values), 5)), False
    )


def unframed(values: pa.Array) -> pa.Array:
    """Every value (binary) without Confluent's framing, where it has it (``framing``, for many at once)."""
    values = values.cast(pa.binary())
    framed = _framed(values)
    if not pc.any(framed).as_py():
        return values
    return pc.if_else(framed, pc.binary_slice(values, 5), values)


def schema_ids(values: pa.Array) -> set[int | None]:
    """The schema ids of the framed values (``None`` standing for those not framed); nulls (tombstones) left out."""
    values = values.cast(pa.binary()).drop_null()
    framed = _framed(values)
    ids: set[int | None] = {
        int.from_bytes(head, "big") for head in pc.unique(pc.binary_slice(values.filter(framed), 1, 5)).to_pylist()
    }
    if not pc.all(framed).as_py():
        ids.add(None)
    return ids
