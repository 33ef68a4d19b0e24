"""The one configuration model of a laketide job, loaded from TOML and ``--conf`` overrides.

Every key has a default except what only the user can know (the table path
and record key). A bad or unknown key fails at start with the key, the value
and what is allowed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from laketide.config_source import (  # noqa: F401 (part of this module's interface)
    DebeziumSection,
    GeneratorSection,
    KafkaSection,
    SchemaRegistrySection,
    SourceSection,
    _Section,
)
from laketide.config_tables import DatabaseSection, TableKeys, TableOverride, placeholders
from laketide.config_types import Codec, Size, Trigger, parse_size
from laketide.index.columns import EVENT_POSITION
from laketide.table.encoding import BASE_FILE_CODEC, LOG_BLOCK_CODEC
from laketide.table.errors import Invalid


class TableSection(TableKeys):
    """``[table]``: where the table is, and what a new one is created with (``TableKeys``)."""

    path: str


class StreamSection(_Section):
    checkpoint: str = "./checkpoint"
    trigger: Trigger = "10 seconds"
    query_name: str = "laketide"


class WriteSection(_Section):
    """``operation`` is Hudi's ``hoodie.datasource.write.operation``: what every micro-batch does.

    upsert: each key once, updates merged (the default); insert: no index lookup, new keys
    bin-packed (an existing key is not looked up, so it can end up twice); bulk_insert: the
    initial load, sorted and written straight into new file groups, no merge; delete_partition:
    replace every file group of ``partitions_to_delete`` (glob patterns), or of the partitions
    the micro-batch's records fall in when that is unset.
    """

    operation: Literal["upsert", "insert", "bulk_insert", "delete_partition"] = "upsert"
    partitions_to_delete: list[str] | None = None
    target_file_size: Size = 128 * 2**20
    small_file_limit: Size = 100 * 2**20
    index_shards: int = Field(4, gt=0, le=4096)
    parallelism: int = Field(4, gt=0)
    bloom_type: Literal["DYNAMIC_V0", "SIMPLE"] = "DYNAMIC_V0"
    # Hudi's hoodie.index.bloom.num_entries; unset: DYNAMIC_V0's is the records a file of target_file_size
    # holds, at most 60,000; SIMPLE's 60,000
    bloom_entries: int | None = Field(None, gt=0)
    # Hudi's hoodie.parquet.compression.codec, of base files, and the codec of parquet log blocks (why these
    # defaults: ``table.encoding``); hudi-rs, Spark, delta-rs and daft read zstd
    parquet_compression: Codec = BASE_FILE_CODEC
    log_compression: Codec = LOG_BLOCK_CODEC
    quarantine_path: str | None = None
    index_compaction_deltas: int = Field(16, gt=0)
    # a micro-batch whose landing files total at most this is written by the driver in threads,
    # without Spark stages (``writer.driver_batch``); 0 sends every micro-batch through Spark's tasks
    driver_batch_bytes: Annotated[int, BeforeValidator(parse_size), Field(ge=0)] = 64 * 2**20
    # where Spark's tasks hand a micro-batch's rows from one stage to the next (``writer.exchange``): a path
    # or URI every executor reaches; unset, ``.hoodie/.laketide/exchange`` under the table
    exchange_dir: str | None = None

    @model_validator(mode="after")
    def _small_below_target(self) -> WriteSection:
        if self.small_file_limit > self.target_file_size:
            raise ValueError("write.small_file_limit must not exceed write.target_file_size")
        return self

    @model_validator(mode="after")
    def _partitions_only_to_delete(self) -> WriteSection:
        if self.partitions_to_delete is not None and self.operation != "delete_partition":
            raise ValueError(f"write.partitions_to_delete is set but write.operation is {self.operation!r}; it applies to delete_partition only")
        return self


class IndexSection(_Section):
    """``global = true``: a record key is unique across partitions (Hudi's global index). A record
    whose partition value changes moves: its old copy is deleted in the same commit. Chosen when
    the table's index is created; an index built the other way is refused.

    Unset: false, except for change events (``source.envelope = "debezium"``) into a partitioned table, whose
    identity is the source's primary key, table-wide: a delete that carries the key alone, or an update that
    moves a row to another partition, must find the stored row wherever it is."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    global_: bool | None = Field(None, alias="global")


class CoordinatorSection(_Section):
    lease: Literal["local", "zookeeper", "storage"] = "local"
    # the storage lease: how long a holding lasts without a heartbeat (renewed every third of it)
    lease_ttl: float = Field(30.0, ge=3)
    zookeeper: str = "127.0.0.1:2181"
    zookeeper_root: str = "/laketide"
    zookeeper_session_timeout: float = Field(10.0, gt=0)
    lease_wait: float = Field(30.0, ge=0)
    api_port: int | None = Field(None, ge=0, le=65535)
    api_host: str = "127.0.0.1"
    api_token: str | None = None
    # what the API admits beside the writer (``api/limits.py``): requests a second, all clients together (0: no
    # limit), requests answered at once, and the largest body; beyond them it answers 429 / 413
    api_max_rate: float = Field(25.0, ge=0)
    api_max_concurrent: int = Field(2, ge=1)
    api_max_body: Size = 64 * 1024
    # the Host names the API answers to; unset: loopback names when api_host is a loopback address, else any
    api_allowed_hosts: list[str] | None = None


class CleanSection(_Section):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    policy: Literal["KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS"] = "KEEP_LATEST_COMMITS"
    retain_commits: int = Field(10, ge=1)
    retain_file_versions: int = Field(1, ge=1)
    retain_hours: float = Field(24.0, gt=0)
    async_: bool = Field(True, alias="async")

    def retention(self):
        from laketide.table.clean import CleanPolicy, Retention

        return Retention(CleanPolicy(self.policy), self.retain_commits, self.retain_file_versions, self.retain_hours)


class ArchiveSection(_Section):
    """Hudi's ``hoodie.keep.min.commits`` / ``hoodie.keep.max.commits``."""

    enabled: bool = True
    min_commits: int = Field(20, ge=1)
    max_commits: int = Field(30, ge=2)

    @model_validator(mode="after")
    def _min_below_max(self) -> ArchiveSection:
        if self.min_commits >= self.max_commits:
            raise ValueError("archive.min_commits must be below archive.max_commits")
        return self


class CompactionSection(_Section):
    """Merge-on-read compaction: when a file slice is folded into a new base file, and where that runs.

    A slice is compacted once it has ``delta_commits`` log files (one per
    deltacommit that touched it) or ``max_log_bytes`` of them. ``async`` runs
    it in the table-services thread beside ingestion (before each slice waiting
    up to ``yield_seconds`` for the micro-batch being written; 0 never waits),
    ``inline`` after the commit that scheduled it, ``off`` leaves it to ``laketide compact``.
    """

    delta_commits: int = Field(5, ge=1)
    max_log_bytes: int = Field(256 * 2**20, gt=0)
    mode: Literal["async", "inline", "off"] = "async"
    yield_seconds: float = Field(2.0, ge=0)


class ServicesSection(_Section):
    """Table services after a commit (index compaction, compaction, clean, archival, mirror).

    A commit stands whatever a service after it does: a failed service is
    logged with the instant, counted in ``laketide_table_service_failures``
    and run again after the next micro-batch. After ``max_consecutive_failures``
    failures in a row of one service the job stops with an error naming it.
    """

    max_consecutive_failures: int = Field(5, ge=1)


class MirrorSection(_Section):
    """A Delta Lake log beside the Hudi timeline (``table.delta_mirror``), for Delta readers.

    ``log_retention_versions`` bounds the log: once a checkpoint is that many
    versions old, the commit files and checkpoints before it are deleted.
    """

    delta: bool = False
    log_retention_versions: int = Field(1000, ge=10)


def _option_strings(value: Any) -> Any:
    """object_store takes every option as a string; ``--conf storage.options.allow_http=true`` gives a boolean."""
    if not isinstance(value, dict):
        return value
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}


class StorageSection(_Section):
    """How to reach an object store (``s3://``, ``gs://``, ``az://``, ``abfs://``) that holds the table.

    ``options`` are object_store's keys, which hudi-rs and delta-rs take too: ``aws_endpoint_url``,
    ``aws_region``, ``aws_access_key_id``, ``aws_secret_access_key``, ``azure_storage_account_name``,
    ``azure_storage_account_key``, ``google_service_account``, ..., and ``allow_http`` for an ``http://``
    endpoint. What is not given comes from the environment (``AWS_*``, ``AZURE_*``, ``GOOGLE_*``).
    """

    options: Annotated[dict[str, str], BeforeValidator(_option_strings)] = Field(default_factory=dict)
    # a request the store throttles or loses is sent again this many times, with backoff and jitter
    max_retries: int = Field(10, ge=0)
    # requests to the store open at once, per process (the driver; each executor)
    max_in_flight: int = Field(32, ge=1)

    @property
    def io_options(self) -> dict[str, str]:
        """What ``FileIO.for_uri`` takes: the store's options and laketide's own bounds on its requests."""
        return {**self.options, "max_retries": str(self.max_retries), "max_in_flight": str(self.max_in_flight)}


class SparkSection(_Section):
    master: str = "local[2]"
    app_name: str = "laketide"
    conf: dict[str, str] = Field(default_factory=dict)


# what a Kafka record is taken to weigh on the driver (its value and its decoded row) until the job has read some
KAFKA_RECORD_BYTES = 1024


class JobConfig(_Section):
    table: TableSection
    source: SourceSection = Field(default_factory=SourceSection)
    stream: StreamSection = Field(default_factory=StreamSection)
    write: WriteSection = Field(default_factory=WriteSection)
    index: IndexSection = Field(default_factory=IndexSection)
    coordinator: CoordinatorSection = Field(default_factory=CoordinatorSection)
    clean: CleanSection = Field(default_factory=CleanSection)
    archive: ArchiveSection = Field(default_factory=ArchiveSection)
    compaction: CompactionSection = Field(default_factory=CompactionSection)
    mirror: MirrorSection = Field(default_factory=MirrorSection)
    services: ServicesSection = Field(default_factory=ServicesSection)
    spark: SparkSection = Field(default_factory=SparkSection)
    storage: StorageSection = Field(default_factory=StorageSection)
    # a job of a whole database (table.path holds {table}): one source table's table.* keys (``config_tables``)
    tables: dict[str, TableOverride] = Field(default_factory=dict)
    database: DatabaseSection = Field(default_factory=DatabaseSection)

    @model_validator(mode="after")
    def _tables_need_a_template(self) -> JobConfig:
        if "table" not in placeholders(self.table.path) and self.tables:
            raise ValueError(f"[tables.{next(iter(self.tables))}] applies to a job whose table.path holds {{table}} (one table per source table)")
        return self

    @model_validator(mode="after")
    def _archive_keeps_the_clean_window(self) -> JobConfig:
        # reads inside the retained window need their commits on the active timeline (Hudi checks the same)
        if self.archive.enabled and self.clean.policy == "KEEP_LATEST_COMMITS" and self.archive.min_commits <= self.clean.retain_commits:
            raise ValueError(
                f"archive.min_commits ({self.archive.min_commits}) must be above clean.retain_commits ({self.clean.retain_commits})"
            )
        return self

    def kafka_offsets_per_trigger(self) -> int | None:
        """At most how many offsets a Kafka micro-batch spans: ``source.kafka.max_offsets_per_trigger``, else as many
        records as the driver writes at once (``write.driver_batch_bytes`` at ``KAFKA_RECORD_BYTES`` a record), so a
        backlog after a pause or a slow commit comes in micro-batches the driver's kept consumer reads, not in one that
        goes to Spark's tasks, each of which opens a consumer of its own (seconds more, and a broker under load kept one
        waiting minutes); ``None`` (no cap) when the driver writes nothing."""
        given = self.source.kafka.max_offsets_per_trigger
        return given or (self.write.driver_batch_bytes // KAFKA_RECORD_BYTES or None)

    def global_index(self, partitioned: bool) -> bool:
        """Whether the keys of a table (``partitioned`` or not) are unique across partitions: ``index.global``,
        or its default (see ``IndexSection``)."""
        if self.index.global_ is not None:
            return self.index.global_
        return self.source.envelope == "debezium" and partitioned

    @model_validator(mode="after")
    def _change_events_find_their_row_anywhere(self) -> JobConfig:
        if self.source.envelope == "debezium" and self.table.partition_by and self.index.global_ is False:
            raise ValueError(
                "index.global = false with source.envelope = 'debezium' on a partitioned table would drop deletes that carry "
                "the key alone (Postgres' REPLICA IDENTITY DEFAULT) and keep two rows of a key whose partition column changed: "
                "leave index.global unset (a global index), or set table.partition_by = []"
            )
        return self

    @model_validator(mode="after")
    def _change_events_order_by_their_position(self) -> JobConfig:
        # a change event's place in its database's log is what orders it, not a column of the row
        if self.source.envelope == "debezium" and self.table.ordering_field is None:
            self.table.ordering_field = EVENT_POSITION
        return self


class ConfigError(Invalid):
    """A configuration the job cannot start with; the message names the key."""


def _override_value(text: str) -> Any:
    """``--conf`` values are TOML literals (numbers, booleans, lists) or plain strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(data: dict, assignment: str) -> None:
    key, sep, value = assignment.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--conf {assignment!r}: expected section.key=value")
    parts = key.strip().split(".")
    if parts[:2] == ["spark", "conf"] and len(parts) > 2:
        # Spark's own option names contain dots: spark.conf.<spark option>=value
        data.setdefault("spark", {}).setdefault("conf", {})[".".join(parts[2:])] = value
        return
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--conf {key}: {part} is not a section")
    node[parts[-1]] = _override_value(value)


def _describe(error: ValidationError) -> str:
    lines = []
    for e in error.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(config)"
        given = f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], dict) else ""
        lines.append(f"  {key}: {e['msg']}{given}")
    return "invalid configuration:\n" + "\n".join(lines)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, base: dict | None = None) -> JobConfig:
    data: dict = dict(base or {})
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    for assignment in overrides or []:
        apply_override(data, assignment)
    try:
        return JobConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
