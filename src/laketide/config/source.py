"""The source sections of a job's configuration (``laketide.config``): landing files, the generator, Kafka,
and how change events are read."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from laketide.config.section import Section


class GeneratorSection(Section):
    """``source.format = "generator"``: made-up orders, for a demo or a load test."""

    rows_per_batch: int = Field(default=10_000, gt=0)
    """Rows a micro-batch."""
    batches: int = Field(default=5, gt=0)
    """Micro-batches before the source is exhausted."""
    update_fraction: float = Field(default=0.5, ge=0, le=1)
    """Share of a batch's rows that update an earlier key."""
    delete_fraction: float = Field(default=0.02, ge=0, le=1)
    """Share that delete an earlier key."""
    duplicate_fraction: float = Field(default=0.01, ge=0, le=1)
    """Share that repeat a key of the same batch."""
    partitions: int = Field(default=4, gt=0)
    """Distinct partition values."""
    seed: int = 42
    """Seed of the random rows: the same seed makes the same rows."""
    key_space: int = Field(default=0, ge=0)
    """0: every new key is new forever; N: the table stays at N keys, and every row after the first N is a change."""


class KafkaSection(Section):
    """Where a ``source.format = "kafka"`` job reads: Spark's Kafka source where its connector is on the
    classpath, else laketide's own (``spark/kafka/source.py``); ``reader`` picks one."""

    bootstrap_servers: str | None = None
    """The brokers, ``host:port,host:port`` (required for ``kafka``)."""
    topics: list[str] = Field(default_factory=list)
    """The topics to read; or ``topic_pattern``, one of the two."""
    topic_pattern: str | None = None
    """A regular expression of the topics to read (a whole database's: one topic per source table)."""
    starting_offsets: str = "earliest"
    """Where a new query starts: ``earliest``, ``latest``, or Spark's JSON per partition,
    ``{"orders": {"0": 42, "1": -2}}`` (-2 earliest, -1 latest), naming every partition of the topics read."""
    max_offsets_per_trigger: int | None = Field(default=None, gt=0)
    """Offsets a micro-batch spans at most, shared by the partitions in proportion to their backlog; unset,
    what ``write.driver_batch_bytes`` holds at 1 KiB a record (65,536 when it is unset, on any master), and no cap with
    ``driver_batch_bytes = 0`` (``JobConfig.kafka_offsets_per_trigger``)."""
    reader: Literal["auto", "spark", "python"] = "auto"
    """``auto``: Spark's Kafka source if its connector is on the classpath, else laketide's; ``spark``; ``python``."""
    fail_on_data_loss: bool = True
    """Offsets gone from the broker (retention, a deleted topic) stop the job (exit 4); ``false`` goes on
    from the earliest still there, logging what was skipped."""
    options: dict[str, str] = Field(default_factory=dict)
    """The Kafka client's own options (``security.protocol``, ``sasl.*``, ``ssl.*``, ...), for both readers."""


class DebeziumSection(Section):
    """How ``source.envelope = "debezium"`` reads change events (``writer/changes/events.py``).

    Events that carry their schema (the JSON converter with ``schemas.enable``) are decoded by it; these
    settings say how to read values of events without one, as the connector was configured.
    """

    timestamp_unit: Literal["ms", "us", "ns"] | None = None
    """The unit of an integer under a TIMESTAMP column of an event without its schema: Debezium's adaptive
    mode sends ms for a column of precision 0-3 and µs for 4-6, so it cannot be guessed; unset, such a value
    goes to quarantine naming this key."""
    decimal_handling: Literal["precise", "string"] = "precise"
    """The connector's ``decimal.handling.mode``, for DECIMAL columns of events without their schema:
    ``precise`` (base64 of the unscaled value, at the declared scale) or ``string`` (the number as text); a
    JSON number is read as a number whatever this says."""
    unavailable_value: str = "__debezium_unavailable_value"
    """The connector's ``unavailable.value.placeholder``: a text or bytes value holding it keeps the value
    stored before (Postgres' unchanged TOASTed columns)."""
    truncate: Literal["apply", "skip"] = "apply"
    """``op = t``: ``apply`` empties the table where the truncate stands in the feed (what came after it
    stays), in one replacecommit; ``skip`` logs and counts it."""
    ordering: Literal["position", "ts_ms"] = "position"
    """What orders events: their position in the database's log (Postgres LSN, MySQL binlog file and
    position), or ``ts_ms``, the source's commit time, first (after a MySQL failover to a server whose binlog
    numbers are lower)."""
    on_log_reset: Literal["stop", "ts_ms", "position"] = "stop"
    """Under ``ordering = "position"``, what a micro-batch does whose events come after newer points of their
    database's log, seen in this run or kept with the table from any before (a MySQL failover to a server whose
    binlog numbers are lower, ``RESET MASTER``, a Postgres replica promoted behind its primary): ``stop``
    before writing, naming the points; ``ts_ms`` orders this table's events by commit time from that micro-batch
    on (kept with the table); ``position`` writes them by position, where each older than its stored row is
    dropped as late. Counted in every case (``log_behind=``, ``laketide_log_behind_total``)."""


class SchemaRegistrySection(Section):
    """A schema registry (Confluent's REST API) that gives each Avro value's schema by the id in its framing."""

    url: str | None = None
    """The registry, e.g. ``http://registry:8081``: Debezium's Avro values take their schema from it by the id
    in their framing."""
    options: dict[str, str] = Field(default_factory=dict)
    """The client's own options, as Confluent's clients name them: ``basic.auth.user.info = "user:password"``."""


class SourceSection(Section):
    """``[source]``: what the job reads."""

    format: Literal["json", "parquet", "csv", "generator", "kafka"] = "generator"
    """``json``, ``csv``, ``parquet`` (a landing directory), ``kafka`` or ``generator``."""
    path: str | None = None
    """The landing directory (required for files)."""
    schema_ddl: str | None = Field(default=None, alias="schema")
    """The rows' columns as Spark DDL (required for files; optional for Debezium's events, whose columns then
    come from the events)."""
    max_files_per_trigger: int | None = Field(default=None, gt=0)
    """Landing files a micro-batch takes at most."""
    options: dict[str, str] = Field(default_factory=dict)
    """Any option of Spark's reader for the format, e.g. ``--conf source.options.sep=";"``."""
    generator: GeneratorSection = Field(default_factory=GeneratorSection)
    kafka: KafkaSection = Field(default_factory=KafkaSection)
    value_format: Literal["json", "avro"] = "json"
    """How a Kafka record's value is encoded: ``json`` under ``source.schema``, or ``avro`` under ``source.avro_schema``
    (Confluent's framing removed)."""
    avro_schema: str | None = None
    """The writer's Avro schema, an ``.avsc`` file, for ``value_format = "avro"``."""
    schema_registry: SchemaRegistrySection = Field(default_factory=SchemaRegistrySection)
    envelope: Literal["none", "debezium"] = "none"
    """``debezium``: each record or landing line is a change event (op, before, after, source), its row in
    ``before`` or ``after``."""
    debezium: DebeziumSection = Field(default_factory=DebeziumSection)

    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)

    @model_validator(mode="after")
    def _files_need_path_and_schema(self) -> SourceSection:
        if self.format == "kafka":
            kafka = self.kafka
            if not kafka.bootstrap_servers:
                raise ValueError("source.kafka.bootstrap_servers is required for source.format = 'kafka'")
            if bool(kafka.topics) == bool(kafka.topic_pattern):
                raise ValueError("give source.kafka.topics or source.kafka.topic_pattern, one of them")
            if (
                self.value_format == "avro"
                and not self.avro_schema
                and not (self.envelope == "debezium" and self.schema_registry.url)
            ):
                raise ValueError(
                    "source.avro_schema (an .avsc file) is required for source.value_format = 'avro'"
                    + (", or source.schema_registry.url" if self.envelope == "debezium" else "")
                )
        elif self.format != "generator" and not self.path:
            raise ValueError(f"source.path is required for source.format = {self.format!r}")
        if self.envelope == "debezium" and self.format in ("csv", "parquet"):
            raise ValueError(
                f"source.envelope = 'debezium' reads change events from Kafka or from landing files of JSON lines, not "
                f"{self.format}: set source.format = 'json' (one event a line, as Kafka Connect's file and S3 "
                "sinks write them)"
            )
        # change events with their schema (the JSON converter's, Avro's .avsc) carry their columns
        # (``changes.decoder``)
        from_events = self.envelope == "debezium"
        if self.format != "generator" and not self.schema_ddl and not from_events:
            raise ValueError(f"source.schema (Spark DDL) is required for source.format = {self.format!r}")
        return self
