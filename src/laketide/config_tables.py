"""A job of a whole database: one Hudi table per source table, named by a path template.

A job whose ``table.path`` holds ``{table}`` writes each captured table into its own Hudi table:
``{table}`` is the change event's ``source.table`` (else the topic name's last dot-separated part);
``{schema}``, ``{db}`` and ``{topic}`` may appear too. ``[tables.<name>]`` sets any ``table.*`` key for
one source table (and ``schema``, to pin its columns); the rest come from ``[table]``. ``TableRoutes``
gives the settings of one source table's Hudi table, as a single-table job would have them.

Pure: no I/O, no Spark. The job that runs such a configuration is built on this (see the README's status).
"""

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
    # COPY_ON_WRITE rewrites the file groups a micro-batch touches; MERGE_ON_READ appends to logs that compaction folds
    type: Literal["COPY_ON_WRITE", "MERGE_ON_READ"] | None = None
    # required for a new table; an existing table's hoodie.properties gives it
    record_key: list[str] | None = Field(None, min_length=1)
    partition_by: list[str] | None = None
    ordering_field: str | None = None
    merge_mode: Literal["EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING"] | None = None
    hive_style_partitioning: bool | None = None
    urlencode_partitions: bool | None = None

    @field_validator("name")
    @classmethod
    def _avro_name(cls, name: str | None) -> str | None:
        # Hudi names the table's Avro record <name>_record in namespace hoodie.<name>; readers reject other names
        if name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"{name!r} is not a valid table name: letters, digits and '_' only, not starting with a digit (it names the table's Avro schema)")
        return name


class TableOverride(TableKeys):
    """``[tables.<name>]``: the ``table.*`` keys of one source table's Hudi table, and its pinned columns."""

    schema_: str | None = Field(None, alias="schema", description="the source table's columns as Spark DDL; unset: the events' own")


def placeholders(path: str) -> list[str]:
    """The ``{...}`` names in ``path``; an unknown one, or a format spec, is ``Invalid`` naming it."""
    found = []
    try:
        parsed = list(string.Formatter().parse(path))
    except ValueError as error:
        raise Invalid(f"table.path {path!r} is not a valid template ({error}); write a literal brace as {{{{ or }}}}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in PLACEHOLDERS or spec or conversion:
            raise Invalid(f"table.path {path!r} names {{{name}}}; a path may hold {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        found.append(name)
    return found


def is_database_job(config: JobConfig) -> bool:
    """Whether the job writes one table per source table (``table.path`` holds ``{table}``)."""
    return "table" in placeholders(config.table.path)


def refuse_database_job(config: JobConfig) -> None:
    """A ``{table}`` path is configured but not run by this version: refused at start, rather than a folder
    literally named ``{table}`` written."""
    if is_database_job(config):
        raise Invalid(f"table.path {config.table.path!r} asks for one table per source table ({{table}}), which this version "
                      "does not run yet: run one job per table, each with its own table.path and source.kafka.topic")


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
            raise Invalid(f"table.path {config.table.path!r} has no {{table}}: one table per source table needs it in the path")
        if config.source.format != "kafka" or config.source.envelope != "debezium":
            raise Invalid("a job of a whole database reads Debezium's change events from Kafka: set source.format = \"kafka\" and "
                          "source.envelope = \"debezium\" (one topic per source table, matched by source.kafka.topic_pattern)")

    def config_for(self, source: SourceTable) -> JobConfig:
        """The settings of ``source``'s table: ``[table]`` with the path filled in and ``[tables.<name>]`` over it."""
        name = source.name
        values = {"table": name, "schema": source.schema, "db": source.db, "topic": source.topic}
        for placeholder in self.names:
            value = values[placeholder]
            if not value or not _SAFE.match(value) or value in (".", ".."):
                raise Invalid(f"the source's {placeholder} {value!r} cannot name a folder of {self.config.table.path!r}; "
                              "its events go to quarantine")
        override = self.config.tables.get(name)
        table = self.config.table.model_copy(update={
            "path": self.config.table.path.format(**{p: values[p] for p in self.names}),
            "name": self.config.table.name or _avro_name(name),
            **(override.model_dump(exclude_unset=True, exclude={"schema_"}) if override else {}),
        })
        source_section = self.config.source
        if override is not None and override.schema_ is not None:
            source_section = source_section.model_copy(update={"schema_ddl": override.schema_})
        return self.config.model_copy(update={"table": table, "source": source_section, "tables": {}})


def _avro_name(name: str) -> str:
    """A source table's name as a Hudi table name (its Avro record's): letters, digits and ``_``."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return cleaned if re.match(r"[A-Za-z_]", cleaned) else f"t_{cleaned}"
