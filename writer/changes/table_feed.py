"""The feed a table is written from, as the table knows it: the one source table its change events come from.

A Debezium event names its source table (``source.db``, ``source.schema``, ``source.table``). One laketide
table holds one source table: events of two, mixed into one table under one schema, would replace each
other's rows. Each commit records the source table it wrote (``SOURCE_TABLE_KEY``), and a micro-batch that
holds events of another, or of two, stops the job before anything of it is written.

It records the events' ordering too (``ORDERING_KEY``, ``source.debezium.ordering``): positions under
``ts_ms`` begin with the commit time, and sort after every log position, so a job that goes back from
``ts_ms`` to ``position`` would find every new event older than the rows it holds and drop it as late.
That is refused; ``position`` to ``ts_ms`` is fine, and so is a table that went over to ``ts_ms`` when its
log went back, under ``on_log_reset = "ts_ms"``. And it records the newest point of the database's log each
stream of events reached (``changes.source_log.LOG_KEY``), so that every run sees a log that went back.
"""

from __future__ import annotations

from laketide.table import Table
from laketide.table.errors import Invalid
from laketide.table.format.timeline import redrawn
from laketide.writer.changes.source_log import LOG_KEY, FeedLog, LogPoint, LogWentBack, commit_value
from laketide.writer.changes.source_log import read_commit_value as read_log
from laketide.writer.changes.tally import Tally

SOURCE_TABLE_KEY = "laketide.source.table"
ORDERING_KEY = "laketide.source.ordering"


class MixedSourceTables(Invalid):
    """Change events of more than one source table for one table (exit code 2): nothing was written."""


class TableFeed:
    """What the table knows of its feed (its source table, its events' ordering, its log's newest points), each
    micro-batch checked against it. Used by the micro-batch thread only."""

    def __init__(self, table: Table, ordering: str | None = None, on_log_reset: str = "stop"):
        self.table, self.ordering, self.on_log_reset = table, ordering, on_log_reset
        self._known: str | None = None
        self._known_ordering: str | None = None
        self._known_log: dict[str, LogPoint] = {}
        self._looked = False

    def feed_log(self) -> FeedLog:
        """What the next micro-batch's events are decoded by: the ordering (the table's ``ts_ms`` where it went
        over to it under ``on_log_reset = "ts_ms"``), and the newest points of the log the table has seen."""
        if self.ordering is None:
            return FeedLog()
        self._look()
        ordering = self.ordering
        if ordering == "position" and self.on_log_reset == "ts_ms" and self._known_ordering == "ts_ms":
            ordering = "ts_ms"
        return FeedLog(ordering, dict(self._known_log))

    def check(self, batch_id: int, tally: Tally) -> str | None:
        """The micro-batch's one source table (``None`` when its rows name none); raises when it is not one,
        or not the one the table was written from, or when its events' log went back under
        ``on_log_reset = "stop"``."""
        seen = tally.source_tables
        if not seen:
            return None
        if tally.ordering == "position" and self.known_ordering() == "ts_ms":
            raise Invalid(
                f"table {self.table.uri} was written with source.debezium.ordering = 'ts_ms': its rows' "
                "positions begin with "
                "the commit time and sort after every log position, so events ordered by 'position' would all "
                "be dropped as late. "
                "Keep source.debezium.ordering = 'ts_ms' for this table (or on_log_reset = 'ts_ms', where it went "
                "over to it when its log went back). Nothing of this micro-batch was written."
            )
        if tally.log.behind and tally.ordering == "position" and self.on_log_reset == "stop":
            raise LogWentBack.of(batch_id, tally.log, self.table.uri)
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
            self._take(self._newest_named())

    @redrawn
    def _newest_named(self) -> dict[str, str]:
        """The extra metadata of the newest commit that names a source table (listed again should archival move
        a commit away meanwhile)."""
        timeline = self.table.timeline
        for instant in reversed(timeline.completed_writes()):
            extra = timeline.commit_metadata(instant).extra_metadata
            if extra.get(SOURCE_TABLE_KEY):
                return extra
        return {}

    def committed(self, extra: dict[str, str]) -> None:
        """What a commit of this writer's (``commit_metadata``'s) says of the source, when it names a source table."""
        if extra.get(SOURCE_TABLE_KEY):
            self._take(extra)

    def _take(self, extra: dict[str, str]) -> None:
        """The source table, ordering and log points a commit's metadata records (none: ``{}``)."""
        self._known, self._known_ordering = extra.get(SOURCE_TABLE_KEY), extra.get(ORDERING_KEY)
        self._known_log = read_log(extra.get(LOG_KEY))
        self._looked = True

    def commit_metadata(self, name: str | None, tally: Tally) -> dict[str, str]:
        """What a commit of a micro-batch of source table ``name`` records of it: the source table, the ordering
        its events were written by, and the newest point of each stream of the log."""
        if name is None:
            return {}
        ordering = tally.ordering or self.ordering
        out = {SOURCE_TABLE_KEY: name, **({ORDERING_KEY: ordering} if ordering else {})}
        points = {**self._known_log, **tally.log.newest}  # each stream's newest began from the table's
        return {**out, LOG_KEY: commit_value(points)} if points else out
