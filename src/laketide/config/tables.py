"""A job of a whole database: one Hudi table per source table, named by a path template.

A job whose ``table.path`` holds ``{table}`` writes each captured table into its own Hudi table:
``{table}`` is the change event's ``source.table`` (else the topic name's last dot-separated part);
``{schema}``, ``{db}`` and ``{topic}`` may appear too. ``[tables.<name>]`` sets any ``table.*`` key for
one source table (and ``schema``, to pin its columns); the rest come from ``[table]``. ``config.routes`` gives
the settings of one source table's Hudi table, as a single-table job would have them.

Pure: no I/O, no Spark. The job that runs such a configuration is built on this (see the documentation's "A whole
database in one job")."""

from __future__ import annotations

import re
import string
from typing import Literal

from pydantic import Field, field_validator

from laketide.config.section import Section
from laketide.table.errors import Invalid

PLACEHOLDERS = ("table", "schema", "db", "topic")


class TableKeys(Section):
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


class DatabaseSection(Section):
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


def placeholders(template: str, key: str = "table.path") -> list[str]:
    """The ``{...}`` names in ``template`` (the setting ``key``); an unknown one, or a format spec, is ``Invalid``
    naming it."""
    found = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise Invalid(
            f"{key} {template!r} is not a valid template ({error}); write a literal brace as {{{{ or }}}}"
        ) from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in PLACEHOLDERS or spec or conversion:
            raise Invalid(
                f"{key} {template!r} names {{{name}}}; it may hold {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
            )
        found.append(name)
    return found
