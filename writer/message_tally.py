"""What a micro-batch's change events held besides rows, as a writer counts it: messages skipped by kind, MySQL
events whose binlog went back, and columns the events carried that the table does not declare; each kind of
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
        self._warned_binlog = False

    def count(self, tally: Tally) -> None:
        """Messages skipped, and columns the events carried that the rows lack: counted, each column warned of once."""
        for kind, n in tally.skipped.items():
            self.metrics.skipped_messages.labels(kind).inc(n)
        if tally.binlog_behind:
            self.metrics.binlog_behind.inc(tally.binlog_behind)
            if not self._warned_binlog:
                self._warned_binlog = True
                log.warning(
                    "%d MySQL change events have a binlog file number below one seen before them (up to %s): "
                    "the binlog went "
                    "back (a failover to another server, or RESET MASTER). Ordered by position they are older "
                    "than the rows "
                    "they follow and are dropped as late; set source.debezium.ordering = 'ts_ms' to order by "
                    "commit time",
                    tally.binlog_behind,
                    tally.binlog_highest,
                )
        for name, n in tally.unknown_fields.items():
            self.metrics.unknown_fields.labels(name).inc(n)
            if name not in self._warned_fields:
                self._warned_fields.add(name)
                log.warning(
                    "change events carry column %r, which source.schema does not declare: it is not written "
                    "(add it to source.schema, or leave source.schema out to take every column from the events)",
                    name,
                )
