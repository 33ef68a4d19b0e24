"""Prometheus metrics of a writer, each with the table it writes as its first label (``table``).

A process that writes one table (a job, ``laketide serve``, a test) has its own registry, so tests and several
apps never collide; the tables of a job of a whole database share one (``MetricFamilies``), so ``/metrics``
shows them all, told apart by ``table``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class MetricFamilies:
    """The metrics of every table of one registry, labelled by table."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        t = ["table"]
        self.families = {
            "micro_batches": Counter("laketide_micro_batches", "micro-batches processed", [*t, "outcome"], registry=r),
            "records": Counter("laketide_records", "records read from the source", t, registry=r),
            "quarantined": Counter("laketide_quarantined_rows", "rows sent to quarantine", t, registry=r),
            "skipped_messages": Counter(
                "laketide_skipped_messages",
                "messages of a change feed that are not row changes, skipped (transaction markers, heartbeats, ...)",
                [*t, "kind"],
                registry=r,
            ),
            "log_behind": Counter(
                "laketide_log_behind",
                "change events that came after newer points of their database's log (a failover, a reset)",
                t,
                registry=r,
            ),
            "unknown_fields": Counter(
                "laketide_unknown_fields",
                "change events that carried a column the table's rows lack (not in source.schema), by column",
                [*t, "field"],
                registry=r,
            ),
            "commits": Counter("laketide_commits", "instants committed", t, registry=r),
            "rollbacks": Counter("laketide_rollbacks", "instants rolled back", t, registry=r),
            "commit_seconds": Histogram(
                "laketide_commit_latency_seconds",
                "seconds from begin to commit of a micro-batch",
                t,
                buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
                registry=r,
            ),
            "service_failures": Counter(
                "laketide_table_service_failures",
                "table service runs that failed after a commit (the commit stands)",
                [*t, "service"],
                registry=r,
            ),
            "catalog_sync_failures": Counter(
                "laketide_catalog_sync_failures",
                "syncs of the table's catalog entries that failed (the commit stands; a later sync catches up)",
                t,
                registry=r,
            ),
            "storage_requests": Counter(
                "laketide_storage_requests",
                "requests to an object store during micro-batches, by kind (the driver's process)",
                [*t, "kind"],
                registry=r,
            ),
            "storage_retries": Counter(
                "laketide_storage_retries",
                "requests to an object store sent again after a throttle (503, 429) or a lost connection, "
                "during micro-batches",
                t,
                registry=r,
            ),
            "source_lag": Gauge(
                "laketide_source_lag",
                "a Kafka source's lag after the last micro-batch: the newest offset minus the next to read",
                [*t, "topic", "partition"],
                registry=r,
            ),
            "lease_held": Gauge("laketide_lease_held", "1 while this process holds the table's lease", t, registry=r),
            "lease_epoch": Gauge("laketide_lease_epoch", "epoch of the lease this process holds", t, registry=r),
        }

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Bound:
    """One metric family with the table label given: ``labels(...)`` takes the other labels, as the family would."""

    def __init__(self, family, table: str):
        self._family, self._table = family, table

    def labels(self, *values: str):
        return self._family.labels(self._table, *values)

    def inc(self, amount: float = 1) -> None:
        self._family.labels(self._table).inc(amount)

    def set(self, value: float) -> None:
        self._family.labels(self._table).set(value)

    def observe(self, value: float) -> None:
        self._family.labels(self._table).observe(value)


class Metrics:
    """The metrics of one table (``table``: its name, the first label of every metric), in ``families``' registry."""

    def __init__(self, table: str = "", families: MetricFamilies | None = None) -> None:
        self.families = families or MetricFamilies()
        self.registry = self.families.registry
        self.table = table
        bound = {name: _Bound(family, table) for name, family in self.families.families.items()}
        for family in self.families.families.values():
            if family._labelnames == ("table",):
                family.labels(table)  # shown from the start, at 0, as a metric without labels would be
        self.micro_batches, self.records, self.quarantined = (
            bound["micro_batches"],
            bound["records"],
            bound["quarantined"],
        )
        self.skipped_messages, self.log_behind, self.unknown_fields = (
            bound["skipped_messages"],
            bound["log_behind"],
            bound["unknown_fields"],
        )
        self.commits, self.rollbacks, self.commit_seconds = (
            bound["commits"],
            bound["rollbacks"],
            bound["commit_seconds"],
        )
        self.service_failures, self.storage_requests, self.storage_retries = (
            bound["service_failures"],
            bound["storage_requests"],
            bound["storage_retries"],
        )
        self.catalog_sync_failures = bound["catalog_sync_failures"]
        self.source_lag, self.lease_held, self.lease_epoch = (
            bound["source_lag"],
            bound["lease_held"],
            bound["lease_epoch"],
        )

    def exposition(self) -> bytes:
        return self.families.exposition()
