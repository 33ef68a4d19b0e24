"""The one source table a table's change events come from.

A Debezium event names its source table (``source.db``, ``source.schema``, ``source.table``). One laketide
table holds one source table: events of two, mixed into one table under one schema, would replace each
other's rows. Each commit records the source table it wrote (``SOURCE_TABLE_KEY``), and a micro-batch that
holds events of another, or of two, stops the job before anything of it is written.

It records the events' ordering too (``ORDERING_KEY``, ``source.debezium.ordering``): positions under
``ts_ms`` begin with the commit time, and sort after every log position, so a job that goes back from
``ts_ms`` to ``position`` would find every new event older than the rows it holds and drop it as late.
That is refused; ``position`` to ``ts_ms`` is fine.
"""

from __future__ import annotations

from laketide.table import Table
from laketide.table.errors import Invalid
from laketide.table.format.timeline import redrawn

SOURCE_TABLE_KEY = "laketide.source.table"
ORDERING_KEY = "laketide.source.ordering"


class MixedSourceTables(Invalid):
    """Change events of more than one source table for one table (exit code 2): nothing was written."""


class SourceTable:
    """Checks each micro-batch's source tables against the table's. Used by the micro-batch thread only."""

    def __init__(self, table: Table, ordering: str | None = None):
        self.table, self.ordering = table, ordering
        self._known: str | None = None
        self._known_ordering: str | None = None
        self._looked = False

    def check(self, batch_id: int, seen: set[str]) -> str | None:
        """The micro-batch's one source table (``None`` when its rows name none); raises when it is not one,
        or not the one the table was written from."""
        if not seen:
            return None
        if self.ordering == "position" and self.known_ordering() == "ts_ms":
            raise Invalid(
                f"table {self.table.uri} was written with source.debezium.ordering = 'ts_ms': its rows' "
                "positions begin with "
                "the commit time and sort after every log position, so events ordered by 'position' would all "
                "be dropped as late. "
                "Keep source.debezium.ordering = 'ts_ms' for this table. Nothing of this micro-batch was written."
            )
        way_out = (
            "One laketide table takes the change events of one source table: give each source table its own job "
            "(source.kafka.topics naming its topic, or a topic_pattern that matches only it). Nothing of this "
            "micro-batch was written."
        )
        if len(seen) > 1:
            raise MixedSourceTables(
                f"micro-batch {batch_id} holds change events of {len(seen)} source tables "
                f"({', '.join(sorted(seen))}). {way_out}"
            )
        (name,) = seen
        known = self.known()
        if known is not None and known != name:
            raise MixedSourceTables(
                f"micro-batch {batch_id} holds change events of source table {name}, but table {self.table.uri} "
                f"was written from {known}. {way_out}"
            )
        return name

    def known(self) -> str | None:
        """The source table the newest commit that names one was written from (read once, then kept)."""
        self._look()
        return self._known

    def known_ordering(self) -> str | None:
        self._look()
        return self._known_ordering

    def _look(self) -> None:
        if not self._looked:
            self._known, self._known_ordering = self._newest_named()
            self._looked = True

    @redrawn
    def _newest_named(self) -> tuple[str | None, str | None]:
        """The source table and ordering of the newest commit that names a source table (listed again should
        archival move a commit away meanwhile)."""
        timeline = self.table.timeline
        for instant in reversed(timeline.completed_writes()):
            extra = timeline.commit_metadata(instant).extra_metadata
            if extra.get(SOURCE_TABLE_KEY):
                return extra[SOURCE_TABLE_KEY], extra.get(ORDERING_KEY)
        return None, None

    def committed(self, extra: dict[str, str]) -> None:
        if extra.get(SOURCE_TABLE_KEY):
            self._known, self._known_ordering, self._looked = extra[SOURCE_TABLE_KEY], extra.get(ORDERING_KEY), True

    def commit_metadata(self, name: str | None) -> dict[str, str]:
        """What a commit of a micro-batch of source table ``name`` records of it."""
        if name is None:
            return {}
        return {SOURCE_TABLE_KEY: name, **({ORDERING_KEY: self.ordering} if self.ordering else {})}
