"""What a micro-batch's change events held besides rows, as a writer counts it: messages skipped by kind, MySQL
events whose log went back, and columns the events carried that the table does not declare; each kind of
surprise is warned of once per writer, and counted always (``/metrics``).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field

from laketide.coordinator.metrics import Metrics
from laketide.writer.changes.source_log import LogCheck

log = logging.getLogger("laketide.job")
TRUNCATE = "truncate"  # the EVENT_KIND of a change feed's truncate of its source table


@dataclass
class Tally:
    """What a micro-batch's messages held besides rows: those skipped, by kind (a change feed's transaction
    markers, heartbeats, schema changes, tombstones), and the source tables its change events came from."""

    skipped: Counter = field(default_factory=Counter)
    source_tables: set[str] = field(default_factory=set)
    # the ordering value of the newest truncate of the source table among them, if any
    truncated_at: str | None = None
    # columns change events carried that the table's rows lack (``source.schema`` leaves them out): events per column
    unknown_fields: Counter = field(default_factory=Counter)
    # the events' places in their database's log: how many went back, and each stream's newest (``changes.source_log``)
    log: LogCheck = field(default_factory=LogCheck)
    # what the change events' positions were made by ("position", "ts_ms"), when they are a change feed's
    ordering: str | None = None

    def add(self, other: Tally) -> Tally:
        self.skipped.update(other.skipped)
        self.source_tables |= other.source_tables
        self.truncated_at = max(filter(None, (self.truncated_at, other.truncated_at)), default=None)
        self.unknown_fields.update(other.unknown_fields)
        self.log.add(other.log)
        # a part that went over to commit times makes the micro-batch's (``changes.source_log``: ``on_log_reset``)
        self.ordering = "ts_ms" if "ts_ms" in (self.ordering, other.ordering) else self.ordering or other.ordering
        return self

    def to_json(self) -> str:
        return json.dumps(
            {
                "skipped": dict(self.skipped),
                "source_tables": sorted(self.source_tables),
                "truncated_at": self.truncated_at,
                "unknown_fields": dict(self.unknown_fields),
                "log": self.log.to_dict(),
                "ordering": self.ordering,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Tally:
        data = json.loads(text or "{}")
        return cls(
            Counter(data.get("skipped", {})),
            set(data.get("source_tables", [])),
            data.get("truncated_at"),
            Counter(data.get("unknown_fields", {})),
            LogCheck.from_dict(data.get("log") or {}),
            data.get("ordering"),
        )


class MessageTally:
    """One writer's counts and warnings. Used by the micro-batch thread alone."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics
        self._warned_fields: set[str] = set()  # columns of change events not written, each warned of once
        self._warned_log = False

    def count(self, tally: Tally) -> None:
        """Messages skipped, and columns the events carried that the rows lack: counted, each column warned of once."""
        for kind, n in tally.skipped.items():
            self.metrics.skipped_messages.labels(kind).inc(n)
        if tally.log.behind:
            self.metrics.log_behind.inc(tally.log.behind)
            if not self._warned_log:
                self._warned_log = True
                log.warning(
                    "%d change events came after newer points of their database's log (%s): the log went back "
                    "(a failover to another server, RESET MASTER, a restored or promoted replica); ordered by %s",
                    tally.log.behind,
                    tally.log.describe(),
                    "commit time (ts_ms)"
                    if tally.ordering == "ts_ms"
                    else "position, each older than its stored row is dropped as late (source.debezium.on_log_reset)",
                )
        for name, n in tally.unknown_fields.items():
            self.metrics.unknown_fields.labels(name).inc(n)
            if name not in self._warned_fields:
                self._warned_fields.add(name)
                log.warning(
                    "change events carry column %r, which the table's columns do not hold: it is not written "
                    "(add it to source.schema; or leave source.schema out, with the converter's schemas on, to "
                    "take every column from the events)",
                    name,
                )
