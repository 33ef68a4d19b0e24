"""Bringing a catalog's entries of one table up to date with the table, as Hudi's ``HiveSyncTool`` does after a
commit, in an order a crash at any point leaves right for the next sync to finish.

An entry is made without its sync state, given its partitions, then marked synced (``last_commit_time_sync``):
an entry whose mark is the table's latest commit and whose definition is the table's is left alone after one
call. Partitions are compared with the table's live ones (those with a file group in the latest file slices), so
what a ``delete_partition``, a rollback or a restore took away goes too, and a partition that moved is placed
again. A table of the same name that is not this one (another location, or another kind: not read as Hudi, not
a Delta table for the mirror's entry) is refused, never overwritten.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from laketide.catalog.catalog import Catalog
from laketide.catalog.entries import (
    INPUT_FORMAT,
    LAST_COMPLETION_SYNCED,
    LAST_SYNCED,
    REALTIME_INPUT_FORMAT,
    PartitionEntry,
    TableEntry,
    catalog_location,
    delta_entry,
    partition_entry,
    table_entries,
)
from laketide.table import Table
from laketide.table.errors import ErrorKind, LaketideError
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSystemView
from laketide.table.mirror.delta_mirror import has_mirror

log = logging.getLogger(__name__)


@dataclass
class EntrySync:
    """What one sync did to one entry."""

    name: str
    created: bool = False
    altered: bool = False
    added: list[tuple[str, ...]] = field(default_factory=list)
    dropped: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.created or self.altered or bool(self.added) or bool(self.dropped)


@dataclass
class SyncResult:
    database: str
    instant: str | None  # the commit the entries now stand at; None for a table with none yet
    entries: list[EntrySync] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(e.changed for e in self.entries)

    def line(self) -> str:
        done = []
        for e in self.entries:
            what = ["created" if e.created else "altered" if e.altered else ""]
            what += [
                f"+{len(e.added)} partitions" if e.added else "",
                f"-{len(e.dropped)} partitions" if e.dropped else "",
            ]
            done.append(f"{self.database}.{e.name} {' '.join(w for w in what if w) or 'up to date'}")
        return f"catalog synced to {self.instant}: " + ", ".join(done)


class CatalogSync:
    """Keeps ``catalog``'s entries of one table (``name`` in ``database``) equal to the table. One thread at a time
    (the sync of a job runs in its services' thread)."""

    def __init__(
        self,
        catalog: Catalog,
        database: str,
        name: str,
        support_timestamp: bool = False,
        delta_name: str | None = None,
    ):
        """``delta_name``: the name of one more entry, of the table's Delta mirror (registered once the table has
        its Delta log)."""
        self.catalog, self.database, self.name = catalog, database, name
        self.support_timestamp = support_timestamp
        self.delta_name = delta_name
        self._database_seen = False

    def sync(self, table: Table, timeline: Timeline | None = None, view: FileSystemView | None = None) -> SyncResult:
        """Register or update the table's entries as of ``timeline`` (default: as stored now)."""
        timeline = timeline or table.timeline
        latest = timeline.latest_completed_write()
        result = SyncResult(self.database, latest.timestamp if latest else None)
        schema = table.schema(timeline) if latest else None
        if latest is None or schema is None:
            return result  # nothing committed: Hudi's sync registers a table from its first commit's schema
        if not self._database_seen:
            self.catalog.ensure_database(self.database)
            self._database_seen = True
        marks = {LAST_SYNCED: latest.timestamp}
        if table.config.version >= 8 and latest.completion_time:
            marks[LAST_COMPLETION_SYNCED] = latest.completion_time
        view = view or table.file_system_view(timeline)
        location = catalog_location(table.uri)
        wanted = self._partitions(table, view, location)
        for entry in table_entries(table.config, schema, location, self.name, self.support_timestamp):
            result.entries.append(self._entry(entry, wanted, marks))
        if self.delta_name is not None and has_mirror(table.io):
            delta = delta_entry(schema, location, self.delta_name, self.support_timestamp)
            result.entries.append(self._entry(delta, {}, marks))
        if result.changed:
            log.info(result.line())
        return result

    def _partitions(self, table: Table, view: FileSystemView, location: str) -> dict[tuple[str, ...], PartitionEntry]:
        if not table.config.partition_fields:
            return {}
        live = {s.partition for s in view.latest_slices()}
        entries = (partition_entry(table.config, location, p) for p in sorted(live))
        return {e.values: e for e in entries}

    def _entry(self, entry: TableEntry, wanted: dict[tuple[str, ...], PartitionEntry], marks: dict) -> EntrySync:
        done = EntrySync(entry.name)
        current = self.catalog.table(self.database, entry.name)
        if current is None:
            self.catalog.create_table(self.database, entry)
            done.created = True
            current = entry
        else:
            self._refuse_if_foreign(current, entry)
            synced = all(current.parameters.get(k) == v for k, v in marks.items())
            if synced and current.same_definition(entry):
                return done
        if entry.partition_keys:
            self._partitions_to(entry.name, wanted, done)
        # the mark last: an entry marked synced has every partition of that commit
        parameters = {**current.parameters, **entry.parameters, **marks}
        altered = not current.same_definition(entry)
        self.catalog.alter_table(self.database, replace(entry, parameters=parameters), cascade=altered)
        done.altered = altered and not done.created
        return done

    def _partitions_to(self, name: str, wanted: dict[tuple[str, ...], PartitionEntry], done: EntrySync) -> None:
        have = {p.values: p for p in self.catalog.partitions(self.database, name)}
        # a partition placed elsewhere than the table has it is dropped and added again at its place
        gone = [p for values, p in have.items() if values not in wanted or p.location != wanted[values].location]
        new = [p for values, p in wanted.items() if values not in have or have[values].location != p.location]
        self.catalog.drop_partitions(self.database, name, gone)
        self.catalog.add_partitions(self.database, name, new)
        done.dropped = [p.values for p in gone]
        done.added = [p.values for p in new]

    def _refuse_if_foreign(self, current: TableEntry, entry: TableEntry) -> None:
        ours = current.location.rstrip("/") == entry.location.rstrip("/")
        provider = "spark.sql.sources.provider"
        hudi = (INPUT_FORMAT, REALTIME_INPUT_FORMAT)
        if entry.input_format in hudi:
            same_kind = current.input_format in hudi
        else:
            same_kind = current.parameters.get(provider) == entry.parameters.get(provider)
        if not (ours and same_kind):
            raise LaketideError(
                f"{self.catalog.name}: {self.database}.{entry.name} is another table (at {current.location}, read "
                f"as {current.input_format}), not this one at {entry.location}: it is left as it is; give "
                "catalog.table another name, or drop that entry if it is stale",
                kind=ErrorKind.CONFLICT,
            )
