"""A job of a whole database, over the whole model: whether a job is one, and each source table's settings, as
a single-table job would have them (``TableRoutes``). Pure: no I/O, no Spark."""

from __future__ import annotations

import re
from dataclasses import dataclass

from laketide.config.job import JobConfig
from laketide.config.tables import placeholders
from laketide.table.errors import Invalid

# what a source's name may put into a path: a path segment of its own, never a way out of the template's folder
_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.$-]*$")


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
    def values(self) -> dict[str, str | None]:
        """What each placeholder of a template (``table.path``, ``catalog.table``) stands for."""
        return {"table": self.name, "schema": self.schema, "db": self.db, "topic": self.topic}

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
        for key, template in (("table", config.catalog.table), ("delta_table", config.catalog.delta_table)):
            if template is not None and "table" not in placeholders(template, f"catalog.{key}"):
                raise Invalid(
                    f"catalog.{key} {template!r} has no {{table}}: every table of the database would be registered "
                    'under one name. Write, say, "{db}_{table}"' + (" or leave it unset" if key == "table" else "")
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
        section = self.config.catalog
        names = {"table": self._catalog_name(source, "table", section.table or "{table}")}
        if section.delta_table is not None:
            names["delta_table"] = self._catalog_name(source, "delta_table", section.delta_table)
        catalog = section.model_copy(update=names)
        # deep: a table's start settles its own sections (the lease its table recorded), not its neighbours'
        return self.config.model_copy(
            update={"table": table, "source": source_section, "write": write, "catalog": catalog, "tables": {}},
            deep=True,
        )

    def _catalog_name(self, source: SourceTable, key: str, template: str) -> str:
        """The name of the table's catalog entry ``catalog.<key>``: ``template`` filled in for ``source``."""
        values = source.values
        missing = [name for name in placeholders(template, f"catalog.{key}") if not values[name]]
        if missing:
            raise Invalid(
                f"catalog.{key} {template!r} names {{{missing[0]}}}, which source table {source.name}'s events do "
                "not give; its events go to quarantine"
            )
        return template.format(**values)

    def _values(self, source: SourceTable) -> dict[str, str]:
        values, checked = source.values, {}
        for placeholder in self.names:
            value = values[placeholder]
            if not value or not _SAFE.match(value) or value in (".", ".."):
                raise Invalid(
                    f"the source's {placeholder} {value!r} cannot name a folder of {self.config.table.path!r}; "
                    "its events go to quarantine"
                )
            checked[placeholder] = value
        return checked

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
