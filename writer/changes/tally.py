"""What a micro-batch's change events held besides rows, as a writer counts it: messages skipped by kind, MySQL
events whose log went back, and columns the events carried that the table does not declare; each kind of
surprise is warned of once per writer, and counted always (``/metrics``).
"""

from __future__ import annotations

import logging

from laketide.coordinator.metrics import Metrics
from laketide.writer.prepare import Tally

log = logging.getLogger("laketide.job")


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
