"""Prometheus metrics of one writer: its own registry, so tests and several apps never collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.micro_batches = Counter("laketide_micro_batches", "micro-batches processed", ["outcome"], registry=r)
        self.records = Counter("laketide_records", "records read from the source", registry=r)
        self.quarantined = Counter("laketide_quarantined_rows", "rows sent to quarantine", registry=r)
        self.skipped_messages = Counter(
            "laketide_skipped_messages", "messages of a change feed that are not row changes, skipped (transaction markers, heartbeats, ...)",
            ["kind"], registry=r,
        )
        self.binlog_behind = Counter(
            "laketide_binlog_behind", "MySQL change events whose binlog file number is below one seen before them (a failover)", registry=r,
        )
        self.unknown_fields = Counter(
            "laketide_unknown_fields", "change events that carried a column the table's rows lack (not in source.schema), by column",
            ["field"], registry=r,
        )
        self.commits = Counter("laketide_commits", "instants committed", registry=r)
        self.rollbacks = Counter("laketide_rollbacks", "instants rolled back", registry=r)
        self.commit_seconds = Histogram(
            "laketide_commit_latency_seconds",
            "seconds from begin to commit of a micro-batch",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
            registry=r,
        )
        self.service_failures = Counter(
            "laketide_table_service_failures", "table service runs that failed after a commit (the commit stands)", ["service"], registry=r
        )
        self.storage_requests = Counter(
            "laketide_storage_requests", "requests to an object store during micro-batches, by kind (the driver's process)", ["kind"], registry=r
        )
        self.storage_retries = Counter(
            "laketide_storage_retries", "requests to an object store sent again after a throttle (503, 429) or a lost connection, during micro-batches", registry=r
        )
        self.source_lag = Gauge(
            "laketide_source_lag", "a Kafka source's lag after the last micro-batch: the newest offset minus the next to read", ["topic", "partition"], registry=r
        )
        self.lease_held = Gauge("laketide_lease_held", "1 while this process holds the table's lease", registry=r)
        self.lease_epoch = Gauge("laketide_lease_epoch", "epoch of the lease this process holds", registry=r)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
