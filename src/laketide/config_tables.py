"""A job of a whole database: one Hudi table per source table, named by a path template.

A job whose ``table.path`` holds ``{table}`` writes each captured table into its own Hudi table:
``{table}`` is the change event's ``source.table`` (else the topic name's last dot-separated part);
``{schema}``, ``{db}`` and ``{topic}`` may appear too. ``[tables.<name>]`` sets any ``table.*`` key for
one source table (and ``schema``, to pin its columns); the rest come from ``[table]``. ``TableRoutes``
gives the settings of one source table's Hudi table, as a single-table job would have them.

Pure: no I/O, no Spark. The job that runs such a configuration is built on this (see the documentation's "A whole
database in one job")."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from laketide.config_source import _Section
from laketide.table.errors import Invalid

if TYPE_CHECKING:
    from laketide.config import JobConfig

PLACEHOLDERS = ("table", "schema", "db", "topic")
# what a source's name may put into a path: a path segment of its own, never a way out of the template's folder
_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.$-]*$")


class TableKeys(_Section):
    """What a new table is created with (``[table]``, and ``[tables.<name>]`` over it). An existing table's
    hoodie.properties fixes these; a key left out takes the table's value, and a key that disagrees stops
    the job at start."""

    name: str | None = None
    """The Hudi table name of a new table (it names the table's Avro record); unset, ``laketide_table``, or
    in a job of a whole database the source table's name."""
    type: Literal["COPY_ON_WRITE", "MERGE_ON_READ"] | None = None
    """A new table's type: ``COPY_ON_WRITE`` (unset) rewrites the file groups a micro-batch touches;
    ``MERGE_ON_READ`` appends log files that compaction folds into new base files."""
    record_key: list[str] | None = Field(default=None, min_length=1)
    """The record key fields (required for a new table); more than one gives ``f1:v1,f2:v2`` keys (Hudi's
    ComplexKeyGenerator). An existing table's comes from its ``hoodie.properties``."""
    partition_by: list[str] | None = None
    """The partition fields of a new table; unset or empty, not partitioned."""
    ordering_field: str | None = None
    """The field whose highest value wins among records of a key (``hoodie.table.precombine.field``); unset,
    none (a Debezium feed's is the event's log position)."""
    merge_mode: Literal["EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING"] | None = None
    """How an incoming record meets the stored one; unset, ``EVENT_TIME_ORDERING`` with an ordering field,
    else ``COMMIT_TIME_ORDERING``."""
    hive_style_partitioning: bool | None = None
    """``field=value`` partition directories; unset, false."""
    urlencode_partitions: bool | None = None
    """Escape partition values as Hudi does (``hoodie.datasource.write.partitionpath.urlencode``); unset, true."""
    version: Literal[6, 8] | None = None
    """A new table's ``hoodie.table.version``: ``6`` (unset), what Hudi 0.14 and 0.15 write and read, or ``8``,
    Hudi 1.0's (its timeline under ``.hoodie/timeline/`` with completion times, Avro commit metadata), which
    Hudi 0.x cannot read."""

    @field_validator("name")
    @classmethod
    def _avro_name(cls, name: str | None) -> str | None:
        # Hudi names the table's Avro record <name>_record in namespace hoodie.<name>; readers reject other names
        if name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(
                f"{name!r} is not a valid table name: letters, digits and '_' only, not starting with a digit "
                "(it names the table's Avro schema)"
            )
        return name


class DatabaseSection(_Section):
    """``[database]``: how a job of a whole database treats its tables (``table.path`` holding ``{table}``).

    ``on_table_failure``: when one table's write fails, its instant is rolled back and the micro-batch's other
    tables are written all the same; then ``stop`` (the default) stops the query with that table's error (the
    next start replays the micro-batch, which the tables that committed it skip), and ``quarantine`` sets the
    failing table's records of the micro-batch aside under its quarantine path, with the error as their reason,
    and goes on. ``services_at_once``: how many tables' services (clean, archival, compaction, index compaction,
    mirror) run at a time, in the background; a table whose turn does not come runs them after a later
    micro-batch. ``lease_wait``: how long a table's first event waits for its lease before the table is refused.
    """

    on_table_failure: Literal["stop", "quarantine"] = "stop"
    """When one table's write fails (the micro-batch's other tables are written): ``stop`` the query with its
    error, or ``quarantine`` its records of the micro-batch and go on."""
    services_at_once: int = Field(default=2, ge=1)
    """Tables whose services (clean, archival, compaction, index compaction, mirror) run at a time."""
    lease_wait: float = Field(default=5.0, ge=0)
    """Seconds a table's first event waits for its lease before the job stops, naming the tables others hold."""


class TableOverride(TableKeys):
    """``[tables.<name>]``: the ``table.*`` keys of one source table's Hudi table, and its pinned columns."""

    schema_: str | None = Field(default=None, alias="schema")
    """The source table's columns as Spark DDL; unset, the events' own."""


def placeholders(path: str) -> list[str]:
    """The ``{...}`` names in ``path``; an unknown one, or a format spec, is ``Invalid`` naming it."""
    found = []
    try:
        parsed = list(string.Formatter().parse(path))
    except ValueError as error:
        raise Invalid(
            f"table.path {path!r} is not a valid template ({error}); write a literal brace as {{{{ or }}}}"
        ) from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in PLACEHOLDERS or spec or conversion:
            raise Invalid(
                f"table.path {path!r} names {{{name}}}; a path may hold "
                f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
            )
        found.append(name)
    return found


def is_database_job(config: JobConfig) -> bool:
    """Whether the job writes one table per source table (``table.path`` holds ``{table}``)."""
    return "table" in placeholders(config.table.path)


def refuse_database_job(config: JobConfig) -> None:
    """A ``{table}`` path given to one write of one table (``laketide.write``) is refused, rather than a folder
    literally named ``{table}`` written."""
    if is_database_job(config):
        raise Invalid(
            f"table.path {config.table.path!r} asks for one table per source table ({{table}}): that is a "
            "streaming job of a "
            "whole database, run by `laketide run` from Kafka; laketide.write writes one table, named by its own path"
        )


@dataclass(frozen=True)
class SourceTable:
    """Where a change event came from: its database, schema and table (Debezium's ``source`` block) and topic."""

    table: str | None
    schema: str | None = None
    db: str | None = None
    topic: str | None = None

    @property
    def name(self) -> str:
        """The source table's name: the event's ``source.table``, else the topic name's last dot-separated part."""
        if self.table:
            return self.table
        if self.topic:
            return self.topic.rsplit(".", 1)[-1]
        raise Invalid("a change event names no source table and came from no topic: it cannot be routed to a table")


class TableRoutes:
    """The settings of each source table's Hudi table in a job of a whole database."""

    def __init__(self, config: JobConfig):
        self.config = config
        self.names = placeholders(config.table.path)
        if "table" not in self.names:
            raise Invalid(
                f"table.path {config.table.path!r} has no {{table}}: one table per source table needs it in the path"
            )
        if config.source.format != "kafka" or config.source.envelope != "debezium":
            raise Invalid(
                'a job of a whole database reads Debezium\'s change events from Kafka: set source.format = "kafka" and '
                'source.envelope = "debezium" (one topic per source table, matched by source.kafka.topic_pattern)'
            )
        if config.source.value_format != "json":
            raise Invalid(
                "a job of a whole database reads the JSON converter's events; source.value_format = "
                f"{config.source.value_format!r} "
                "is read by a job of one table: run one job per table (its own table.path and source.kafka.topics)"
            )

    def config_for(self, source: SourceTable) -> JobConfig:
        """The settings of ``source``'s table: ``[table]`` with the path filled in and ``[tables.<name>]`` over it.
        ``write.quarantine_path``, when set, is a template too, or the folder of every table's quarantine."""
        name = source.name
        values = self._values(source)
        override = self.config.tables.get(name)
        table = self.config.table.model_copy(
            update={
                "path": self.path_of(source),
                "name": self.config.table.name or _avro_name(name),
                **(override.model_dump(exclude_unset=True, exclude={"schema_"}) if override else {}),
            }
        )
        source_section = self.config.source
        if override is not None and override.schema_ is not None:
            source_section = source_section.model_copy(update={"schema_ddl": override.schema_})
        write = self.config.write
        if write.quarantine_path is not None:
            aside = (
                write.quarantine_path.format(**values)
                if placeholders(write.quarantine_path)
                else f"{write.quarantine_path.rstrip('/')}/{self.label(table.path)}"
            )
            write = write.model_copy(update={"quarantine_path": aside})
        # deep: a table's start settles its own sections (the lease its table recorded), not its neighbours'
        return self.config.model_copy(
            update={"table": table, "source": source_section, "write": write, "tables": {}}, deep=True
        )

    def _values(self, source: SourceTable) -> dict[str, str]:
        values = {"table": source.name, "schema": source.schema, "db": source.db, "topic": source.topic}
        for placeholder in self.names:
            value = values[placeholder]
            if not value or not _SAFE.match(value) or value in (".", ".."):
                raise Invalid(
                    f"the source's {placeholder} {value!r} cannot name a folder of {self.config.table.path!r}; "
                    "its events go to quarantine"
                )
        return {p: values[p] for p in self.names}

    def path_of(self, source: SourceTable) -> str:
        """``source``'s table path: the template filled in (a name that could leave its folder refused)."""
        return self.config.table.path.format(**self._values(source))

    @property
    def folder(self) -> str:
        """The folder every table of the job is under: the template's path before its first placeholder's segment."""
        template = self.config.table.path
        return template[: template.rfind("/", 0, template.index("{")) + 1]

    def label(self, path: str) -> str:
        """How the job names a table (its API, its log lines, its metrics): its path below ``folder``."""
        return path[len(self.folder) :].strip("/") or path

    def key(self, source: SourceTable) -> SourceTable:
        """What tells two tables of the job apart: only what the path names (a source table's events that
        come from two topics are one table unless the path holds ``{topic}``)."""
        return SourceTable(
            source.name,
            source.schema if "schema" in self.names else None,
            source.db if "db" in self.names else None,
            source.topic if "topic" in self.names else None,
        )


def _avro_name(name: str) -> str:
    """A source table's name as a Hudi table name (its Avro record's): letters, digits and ``_``."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return cleaned if re.match(r"[A-Za-z_]", cleaned) else f"t_{cleaned}"
