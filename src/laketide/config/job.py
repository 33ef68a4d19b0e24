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

from laketide.config.catalog import CatalogSection
from laketide.config.section import Section
from laketide.config.services import ArchiveSection, CleanSection, CompactionSection, MirrorSection, ServicesSection
from laketide.config.source import SourceSection
from laketide.config.tables import DatabaseSection, TableKeys, TableOverride, placeholders
from laketide.config.types import Codec, Size, Trigger, parse_size
from laketide.index.columns import EVENT_POSITION
from laketide.table.errors import Invalid
from laketide.table.format.encoding import BASE_FILE_CODEC, LOG_BLOCK_CODEC


class TableSection(TableKeys):
    """``[table]``: where the table is, and what a new one is created with (``TableKeys``)."""

    path: str
    """The table's base path (required): a local or NFS path, or an object store (``s3://…``, ``gs://…``,
    ``az://…``, with ``storage.options``; ``hdfs://…`` is read, not written); holding ``{table}`` (and maybe
    ``{schema}``, ``{db}``, ``{topic}``), one table per source table."""


class StreamSection(Section):
    """``[stream]``: the Structured Streaming query."""

    checkpoint: str = "./checkpoint"
    """Spark's checkpoint; it also holds the writer's id."""
    trigger: Trigger = "10 seconds"
    """An interval, or ``available-now``: process what is there, run the table services its last commit
    scheduled (a compaction included), then exit."""
    query_name: str = "laketide"
    """The streaming query's name."""


# what a micro-batch may weigh decoded for the driver to write it, unless ``write.driver_batch_bytes`` says: on a
# local master, and elsewhere
LOCAL_DRIVER_BATCH_BYTES = 256 * 2**20
DRIVER_BATCH_BYTES = 64 * 2**20


class WriteSection(Section):
    """``operation`` is Hudi's ``hoodie.datasource.write.operation``: what every micro-batch does.

    upsert: each key once, updates merged (the default); insert: no index lookup, new keys
    bin-packed (an existing key is not looked up, so it can end up twice); bulk_insert: the
    initial load, sorted and written straight into new file groups, no merge; delete_partition:
    replace every file group of ``partitions_to_delete`` (glob patterns), or of the partitions
    the micro-batch's records fall in when that is unset.
    """

    operation: Literal["upsert", "insert", "bulk_insert", "delete_partition"] = "upsert"
    """What every micro-batch does (``hoodie.datasource.write.operation``)."""
    partitions_to_delete: list[str] | None = None
    """``delete_partition`` only: glob patterns of the partitions to delete; unset, the partitions of the
    micro-batch's records."""
    target_file_size: Size = 128 * 2**20
    """The size a file group grows to."""
    small_file_limit: Size = 100 * 2**20
    """File groups below it take new inserts, each the keys of its range."""
    index_shards: int = Field(default=4, gt=0, le=4096)
    """State index shards (fixed when the index is created)."""
    parallelism: int = Field(default=4, gt=0)
    """Write slots: the driver's write threads (at most its cores) or Spark's write tasks."""
    bloom_type: Literal["DYNAMIC_V0", "SIMPLE"] = "DYNAMIC_V0"
    """The base files' bloom filter (``hoodie.bloom.index.filter.type``)."""
    bloom_entries: int | None = Field(default=None, gt=0)
    """Keys a new base file's bloom filter is sized for (``hoodie.index.bloom.num_entries``); unset, a
    ``DYNAMIC_V0`` filter is sized to the records a file of ``target_file_size`` holds at the table's average
    record size, between 1,000 and 60,000 (Hudi's fixed default, 430 KB of filter in every file), and grows a
    row at a time past it; a ``SIMPLE`` one, which cannot grow, keeps 60,000."""
    parquet_compression: Codec = BASE_FILE_CODEC
    """The base files' codec (``hoodie.parquet.compression.codec``): zstd files are about a third smaller than
    snappy's at the same batch times; hudi-rs, Spark, delta-rs and daft read them (``table.encoding``)."""
    log_compression: Codec = LOG_BLOCK_CODEC
    """The codec of merge-on-read's parquet log blocks, which live until the next compaction: zstd's fixed
    cost per column chunk makes a small block's write half again as long."""
    quarantine_path: str | None = None
    """Where rows that cannot be written go; unset, ``<table.path>_quarantine``. Checked at start: a
    directory (created if missing) the job can write in, or the job stops (exit 2) before writing anything."""
    index_compaction_deltas: int = Field(default=16, gt=0)
    """Index runs per shard before they are compacted (a shard without a base yet at its second run, and one
    whose runs hold a million entries and an eighth of its base, as a bulk load's do, at once)."""
    driver_batch_bytes: Annotated[int | None, BeforeValidator(parse_size), Field(ge=0)] = None
    """A micro-batch whose landing files total at most this once decoded (parquet: the footers' uncompressed
    size; JSON, CSV: the file size) is written by the driver in threads, without Spark stages
    (``writer.driver_batch``); ``0``: always Spark's tasks. Unset: 256 MiB on a local master, whose machine runs
    Spark's tasks too (there a stage only adds its scheduling and a hand-over through files: a 1M-row load took
    1.2 s on the driver against 1.8 s through the tasks), and 64 MiB elsewhere, where the driver's memory is
    sized for it (``docs/deploying.md``)."""
    exchange_dir: str | None = None
    """Where Spark's tasks hand a micro-batch's rows from one stage to the next (Arrow IPC files, deleted when
    the micro-batch ends): a path or URI every executor reaches, opened with ``storage.options``; unset,
    ``.hoodie/.laketide/exchange`` under the table."""

    def driver_limit(self, local: bool) -> int:
        """``driver_batch_bytes``, or its default for a job whose Spark master is ``local`` or not."""
        if self.driver_batch_bytes is not None:
            return self.driver_batch_bytes
        return LOCAL_DRIVER_BATCH_BYTES if local else DRIVER_BATCH_BYTES

    @model_validator(mode="after")
    def _small_below_target(self) -> WriteSection:
        if self.small_file_limit > self.target_file_size:
            raise ValueError("write.small_file_limit must not exceed write.target_file_size")
        return self

    @model_validator(mode="after")
    def _partitions_only_to_delete(self) -> WriteSection:
        if self.partitions_to_delete is not None and self.operation != "delete_partition":
            raise ValueError(
                f"write.partitions_to_delete is set but write.operation is {self.operation!r}; it applies to "
                "delete_partition only"
            )
        return self


class IndexSection(Section):
    """``global = true``: a record key is unique across partitions (Hudi's global index). A record
    whose partition value changes moves: its old copy is deleted in the same commit. Chosen when
    the table's index is created; an index built the other way is refused.

    Unset: false, except for change events (``source.envelope = "debezium"``) into a partitioned table, whose
    identity is the source's primary key, table-wide: a delete that carries the key alone, or an update that
    moves a row to another partition, must find the stored row wherever it is."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    global_: bool | None = Field(default=None, alias="global")
    """A record key is unique across partitions, and a record whose partition value changes moves (fixed when
    the index is created); unset, false, but true for a Debezium feed into a partitioned table."""


class CoordinatorSection(Section):
    """``[coordinator]``: the writer's lease and its REST API."""

    lease: Literal["local", "zookeeper", "storage"] = "local"
    """``local`` (a locked file in ``.hoodie/.laketide/``, one machine), ``zookeeper``, or ``storage`` (a
    lease object in the table's object store, no lock service)."""
    lease_ttl: float = Field(default=30.0, ge=3)
    """Seconds a ``storage`` lease lasts without a heartbeat; renewed every third of it, and given up a third
    before it runs out."""
    zookeeper: str = "127.0.0.1:2181"
    """ZooKeeper's connect string."""
    zookeeper_root: str = "/laketide"
    """Leases live at ``<root>/tables/<url-encoded table URI>/lease``."""
    zookeeper_session_timeout: float = Field(default=10.0, gt=0)
    """Seconds a SUSPENDED connection is waited for before the job gives up its lease."""
    lease_wait: float = Field(default=30.0, ge=0)
    """Seconds to wait for a held lease before failing with the holder's name."""
    api_port: int | None = Field(default=None, ge=0, le=65535)
    """Serve the REST API from the job on this port (``0`` picks a free one); unset, no API."""
    api_host: str = "127.0.0.1"
    """The address the API listens on."""
    api_token: str | None = None
    """The bearer token for changes; unset, ``LAKETIDE_API_TOKEN`` is read."""
    api_max_rate: float = Field(default=25.0, ge=0)
    """Requests a second the API answers, all clients together (``0``: no limit); beyond, a request waits up
    to 2 s, then 429 (``api/limits.py``)."""
    api_max_concurrent: int = Field(default=2, ge=1)
    """Requests answered at once."""
    api_max_body: Size = 64 * 1024
    """The largest request body; larger is 413, before it is read."""
    api_allowed_hosts: list[str] | None = None
    """The ``Host`` names the API answers to; unset, loopback names on a loopback ``api_host``, else any."""


def _option_strings(value: Any) -> Any:
    """object_store takes every option as a string; ``--conf storage.options.allow_http=true`` gives a boolean."""
    if not isinstance(value, dict):
        return value
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}


class StorageSection(Section):
    """How to reach an object store (``s3://``, ``gs://``, ``az://``, ``abfs://``) that holds the table.

    ``options`` are object_store's keys, which hudi-rs and delta-rs take too: ``aws_endpoint_url``,
    ``aws_region``, ``aws_access_key_id``, ``aws_secret_access_key``, ``azure_storage_account_name``,
    ``azure_storage_account_key``, ``google_service_account``, ..., and ``allow_http`` for an ``http://``
    endpoint. What is not given comes from the environment (``AWS_*``, ``AZURE_*``, ``GOOGLE_*``).
    """

    options: Annotated[dict[str, str], BeforeValidator(_option_strings)] = Field(default_factory=dict)
    """How to reach the store: object_store's keys, as hudi-rs and delta-rs take them (``aws_region``,
    ``aws_endpoint_url``, ``azure_storage_account_name``, ``google_service_account``, ..., ``allow_http``);
    what is not given comes from the environment. Used for the table, the quarantine and Spark's tasks; the CLI
    takes them as ``laketide --storage-option KEY=VALUE``."""
    max_retries: int = Field(default=10, ge=0)
    """A request the store throttles (503, 429, 500) or loses (reset, timeout) is sent again after an exponential
    backoff with full jitter (50 ms doubling, at most 5 s), this many times; past that the micro-batch fails
    and the job exits with code 6 naming the store."""
    max_in_flight: int = Field(default=32, ge=1)
    """Requests to the store open at once, per process (the driver, each executor); a multipart upload sends
    this many parts at a time."""

    @property
    def io_options(self) -> dict[str, str]:
        """What ``FileIO.for_uri`` takes: the store's options and laketide's own bounds on its requests."""
        return {**self.options, "max_retries": str(self.max_retries), "max_in_flight": str(self.max_in_flight)}


class SparkSection(Section):
    """``[spark]``: the session the job builds when it is not run by spark-submit."""

    master: str = "local[2]"
    """Used when the job builds its own session (ignored under spark-submit)."""
    app_name: str = "laketide"
    """The Spark application's name."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Any Spark option, e.g. ``--conf spark.conf.spark.executor.memory=4g``."""


# what a Kafka record is taken to weigh on the driver (its value and its decoded row) until the job has read some
KAFKA_RECORD_BYTES = 1024


class JobConfig(Section):
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
    catalog: CatalogSection = Field(default_factory=CatalogSection)
    services: ServicesSection = Field(default_factory=ServicesSection)
    spark: SparkSection = Field(default_factory=SparkSection)
    storage: StorageSection = Field(default_factory=StorageSection)
    # a job of a whole database (table.path holds {table}): one source table's table.* keys (``config.tables``)
    tables: dict[str, TableOverride] = Field(default_factory=dict)
    """A job of a whole database: any ``table.*`` key for source table ``<name>``, and ``schema`` to pin its columns."""
    database: DatabaseSection = Field(default_factory=DatabaseSection)

    @model_validator(mode="after")
    def _delta_entry_needs_the_mirror(self) -> JobConfig:
        if self.catalog.delta_table and not self.mirror.delta:
            raise ValueError(
                "catalog.delta_table registers the table's Delta mirror: set mirror.delta = true, or leave it unset"
            )
        return self

    @model_validator(mode="after")
    def _tables_need_a_template(self) -> JobConfig:
        if "table" not in placeholders(self.table.path) and self.tables:
            raise ValueError(
                f"[tables.{next(iter(self.tables))}] applies to a job whose table.path holds {{table}} (one "
                "table per source table)"
            )
        return self

    @model_validator(mode="after")
    def _archive_keeps_the_clean_window(self) -> JobConfig:
        # reads inside the retained window need their commits on the active timeline (Hudi checks the same)
        if (
            self.archive.enabled
            and self.clean.policy == "KEEP_LATEST_COMMITS"
            and self.archive.min_commits <= self.clean.retain_commits
        ):
            raise ValueError(
                f"archive.min_commits ({self.archive.min_commits}) must be above clean.retain_commits "
                f"({self.clean.retain_commits})"
            )
        return self

    def kafka_offsets_per_trigger(self) -> int | None:
        """At most how many offsets a Kafka micro-batch spans: ``source.kafka.max_offsets_per_trigger``, else as many
        records as the driver writes at once (``write.driver_batch_bytes``, 64 MiB when unset, whatever the master,
        at ``KAFKA_RECORD_BYTES`` a record), so a backlog after a pause or a slow commit comes in micro-batches the
        driver's kept consumer reads, not in one that goes to Spark's tasks, each of which opens a consumer of its own
        (seconds more, and a broker under load kept one waiting minutes); ``None`` (no cap) when the driver writes
        nothing."""
        return self.source.kafka.max_offsets_per_trigger or (self.driver_kafka_offsets() or None)

    def driver_kafka_offsets(self) -> int:
        """The offsets a Kafka micro-batch spans by default: as many records as the driver writes at once
        (``write.driver_batch_bytes``, 64 MiB when unset, whatever the master) at ``KAFKA_RECORD_BYTES`` a record."""
        return self.write.driver_limit(local=False) // KAFKA_RECORD_BYTES

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
                "index.global = false with source.envelope = 'debezium' on a partitioned table would drop "
                "deletes that carry "
                "the key alone (Postgres' REPLICA IDENTITY DEFAULT) and keep two rows of a key whose partition "
                "column changed: "
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


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, base: dict | None = None
) -> JobConfig:
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
