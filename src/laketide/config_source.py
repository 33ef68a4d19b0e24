"""The source sections of a job's configuration (``laketide.config``): landing files, the generator, Kafka,
and how change events are read."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class GeneratorSection(_Section):
    rows_per_batch: int = Field(10_000, gt=0)
    batches: int = Field(5, gt=0)
    update_fraction: float = Field(0.5, ge=0, le=1)
    delete_fraction: float = Field(0.02, ge=0, le=1)
    duplicate_fraction: float = Field(0.01, ge=0, le=1)
    partitions: int = Field(4, gt=0)
    seed: int = 42
    key_space: int = Field(0, ge=0)




class KafkaSection(_Section):
    """Where a ``source.format = "kafka"`` job reads: Spark's Kafka source where its connector is on the
    classpath, else laketide's own (``spark/kafka_source.py``); ``reader`` picks one."""

    bootstrap_servers: str | None = None
    topics: list[str] = Field(default_factory=list)
    topic_pattern: str | None = None
    # earliest, latest, or Spark's JSON: {"orders": {"0": 42, "1": -2}} (-2 earliest, -1 latest)
    starting_offsets: str = "earliest"
    # offsets a micro-batch spans at most; unset, what write.driver_batch_bytes holds (``JobConfig.kafka_offsets_per_trigger``)
    max_offsets_per_trigger: int | None = Field(None, gt=0)
    reader: Literal["auto", "spark", "python"] = "auto"
    # offsets gone from the broker (retention, a deleted topic) stop the job; false goes on from the earliest still there
    fail_on_data_loss: bool = True
    # the Kafka client's own options (security.protocol, sasl.mechanism, ssl.ca.location, ...)
    options: dict[str, str] = Field(default_factory=dict)


class DebeziumSection(_Section):
    """How ``source.envelope = "debezium"`` reads change events (``writer/change_events.py``).

    Events that carry their schema (the JSON converter with ``schemas.enable``) are decoded by it; these
    settings say how to read values of events without one, as the connector was configured.
    """

    # the unit of an integer under a TIMESTAMP column of an event without its schema: Debezium's adaptive
    # mode sends ms for a column of precision 0-3 and µs for 4-6, so it cannot be guessed; unset, such a
    # value goes to quarantine with this setting named
    timestamp_unit: Literal["ms", "us", "ns"] | None = None
    # the connector's decimal.handling.mode, for DECIMAL columns of events without their schema: precise
    # (base64 of the unscaled value, at the declared scale), string (the number as text); a JSON number is
    # read as a number whatever this says
    decimal_handling: Literal["precise", "string"] = "precise"
    # the connector's unavailable.value.placeholder: a text or bytes value that holds it keeps the value stored
    # before (Postgres' unchanged TOASTed columns)
    unavailable_value: str = "__debezium_unavailable_value"
    # op = "t": apply empties the table where the truncate stands in the feed (what came after it stays), in one
    # replacecommit; skip logs and counts it
    truncate: Literal["apply", "skip"] = "apply"

    # what orders events: their position in the database's log (Postgres LSN, MySQL binlog file and position),
    # or ts_ms, the source's commit time, first (after a MySQL failover to a server whose binlog numbers are lower)
    ordering: Literal["position", "ts_ms"] = "position"

    def decoding(self):
        from laketide.writer.connect_values import Decoding

        return Decoding(self.timestamp_unit, self.decimal_handling, self.ordering)


class SchemaRegistrySection(_Section):
    """A schema registry (Confluent's REST API) that gives each Avro value's schema by the id in its framing."""

    url: str | None = None  # e.g. http://registry:8081
    # the client's own options, as Confluent's clients name them: basic.auth.user.info = "user:password"
    options: dict[str, str] = Field(default_factory=dict)


class SourceSection(_Section):
    format: Literal["json", "parquet", "csv", "generator", "kafka"] = "generator"
    path: str | None = None
    schema_ddl: str | None = Field(None, alias="schema")
    max_files_per_trigger: int | None = Field(None, gt=0)
    options: dict[str, str] = Field(default_factory=dict)
    generator: GeneratorSection = Field(default_factory=GeneratorSection)
    kafka: KafkaSection = Field(default_factory=KafkaSection)
    # how a Kafka record's value is encoded: JSON under source.schema, or Avro under source.avro_schema
    value_format: Literal["json", "avro"] = "json"
    avro_schema: str | None = None  # an .avsc file
    schema_registry: SchemaRegistrySection = Field(default_factory=SchemaRegistrySection)
    # "debezium": each record is a change event (op, before, after, source), its row in before or after
    envelope: Literal["none", "debezium"] = "none"
    debezium: DebeziumSection = Field(default_factory=DebeziumSection)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _files_need_path_and_schema(self) -> SourceSection:
        if self.format == "kafka":
            kafka = self.kafka
            if not kafka.bootstrap_servers:
                raise ValueError("source.kafka.bootstrap_servers is required for source.format = 'kafka'")
            if bool(kafka.topics) == bool(kafka.topic_pattern):
                raise ValueError("give source.kafka.topics or source.kafka.topic_pattern, one of them")
            if self.value_format == "avro" and not self.avro_schema and not (self.envelope == "debezium" and self.schema_registry.url):
                raise ValueError("source.avro_schema (an .avsc file) is required for source.value_format = 'avro'"
                                 + (", or source.schema_registry.url" if self.envelope == "debezium" else ""))
        elif self.format != "generator" and not self.path:
            raise ValueError(f"source.path is required for source.format = {self.format!r}")
        if self.envelope == "debezium" and self.format in ("csv", "parquet"):
            raise ValueError(f"source.envelope = 'debezium' reads change events from Kafka or from landing files of JSON lines, not "
                             f"{self.format}: set source.format = 'json' (one event a line, as Kafka Connect's file and S3 sinks write them)")
        # change events with their schema (the JSON converter's, Avro's .avsc) carry their columns (``writer.change_decoder``)
        from_events = self.envelope == "debezium"
        if self.format != "generator" and not self.schema_ddl and not from_events:
            raise ValueError(f"source.schema (Spark DDL) is required for source.format = {self.format!r}")
        return self
