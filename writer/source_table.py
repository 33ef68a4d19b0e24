"""The one source table a table's change events come from.

A Debezium event names its source table (``source.db``, ``source.schema``, ``source.table``). One laketide
table holds one source table: events of two, mixed into one table under one schema, would replace each
other's rows. Each commit records the source table it wrote (``SOURCE_TABLE_KEY``), and a micro-batch that
holds events of another, or of two, stops the job before anything of it is written.
"""

from __future__ import annotations

from laketide.table import Table
from laketide.table.errors import Invalid

SOURCE_TABLE_KEY = "laketide.source.table"


class MixedSourceTables(Invalid):
    """Change events of more than one source table for one table (exit code 2): nothing was written."""


class SourceTable:
    """Checks each micro-batch's source tables against the table's. Used by the micro-batch thread only."""

    def __init__(self, table: Table):
        self.table = table
        self._known: str | None = None
        self._looked = False

    def check(self, batch_id: int, seen: set[str]) -> str | None:
        """The micro-batch's one source table (``None`` when its rows name none); raises when it is not one,
        or not the one the table was written from."""
        if not seen:
            return None
        way_out = ("One laketide table takes the change events of one source table: give each source table its own job "
                   "(source.kafka.topics naming its topic, or a topic_pattern that matches only it). Nothing of this micro-batch was written.")
        if len(seen) > 1:
            raise MixedSourceTables(f"micro-batch {batch_id} holds change events of {len(seen)} source tables ({', '.join(sorted(seen))}). {way_out}")
        (name,) = seen
        known = self.known()
        if known is not None and known != name:
            raise MixedSourceTables(f"micro-batch {batch_id} holds change events of source table {name}, but table {self.table.uri} "
                                    f"was written from {known}. {way_out}")
        return name

    def known(self) -> str | None:
        """The source table the newest commit that names one was written from (read once, then kept)."""
        if not self._looked:
            timeline = self.table.timeline
            for instant in reversed(timeline.completed_writes()):
                name = timeline.commit_metadata(instant).extra_metadata.get(SOURCE_TABLE_KEY)
                if name:
                    self._known = name
                    break
            self._looked = True
        return self._known

    def committed(self, name: str | None) -> None:
        if name is not None:
            self._known, self._looked = name, True
