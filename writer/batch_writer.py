"""One micro-batch into the table, whoever read it: begin, quarantine, plan, write, commit, table services, report.

``BatchWriter`` is Spark-free. The Spark adapter (``spark/pipeline.py``) reads each micro-batch of the stream
into a ``MicroBatch`` (``writer/micro_batch.py``: ``DriverBatch`` in the driver's threads, or ``SparkBatch`` on the
executors) and hands it here; the Python write API (``writer/job/write_api.py``) hands it a ``DriverBatch`` of an
Arrow table. The work on records is done by the stage functions (``writer.stages``), and only one small write
status per file comes back to decide the commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import pyarrow as pa

from laketide.config import JobConfig
from laketide.coordinator import Coordinator, LeaseLost
from laketide.coordinator.services import ServiceFailures
from laketide.index.columns import assigned_schema
from laketide.index.state import StateIndex
from laketide.index.sync import ForeignWrites
from laketide.table import Table
from laketide.table.format.commit import SCHEMA_KEY
from laketide.table.format.damage import TableDamaged
from laketide.table.format.instant import COMMIT, DELTA_COMMIT, REPLACE_COMMIT
from laketide.table.format.schema import avro_schema_json
from laketide.table.reading.view_sync import ViewSync
from laketide.table.storage.store_requests import REQUESTS, RETRY
from laketide.writer import stages
from laketide.writer.changes.decoder import ChangeDecoder
from laketide.writer.changes.events import Messages
from laketide.writer.changes.table_feed import TableFeed
from laketide.writer.changes.tally import TRUNCATE, MessageTally, Tally
from laketide.writer.clock import StepClock
from laketide.writer.driver_batch import DriverBatch, DriverPool
from laketide.writer.micro_batch import LoadedBatch, StagedWrite
from laketide.writer.planning import FirstKeys, every_file_group, partitions_to_delete, plan_instant
from laketide.writer.preflight import complex_key_encoding
from laketide.writer.prepare import PrepareSpec
from laketide.writer.report import RECENT_BATCHES, BatchReport, WriterStatus

log = logging.getLogger("laketide.job")
T = TypeVar("T")
# write.operation -> Hudi's WriteOperationType, recorded in every commit
OPERATION_TYPES = {
    "upsert": "UPSERT",
    "insert": "INSERT",
    "bulk_insert": "BULK_INSERT",
    "delete_partition": "DELETE_PARTITION",
}


@dataclass(frozen=True)
class WriterParts:
    """What a running job hands its writer; each left out, the writer makes its own. ``on_step(point, batch_id)`` is
    called at each step ("begun", "written", "committed"): crash tests kill the process there. ``after_commit(instant)``
    runs the table services once a micro-batch is committed; ``failures`` counts what they fail (a commit stands
    whatever they do). ``views``: the file-system view kept between micro-batches, shared with the services.
    ``driver_pool``: the threads of the micro-batches the driver writes, when several writers share them (the tables
    of a database job), whose reports ``label`` names. ``batch_lock``: held while a micro-batch runs; operator
    actions and the services' steps that change what a micro-batch reads take it too. ``status``: what the job tells
    the API, which the services' failures go to as well."""

    clock: StepClock | None = None
    on_step: Callable[[str, int], None] | None = None
    after_commit: Callable[[str], None] | None = None
    views: ViewSync | None = None
    failures: ServiceFailures | None = None
    driver_pool: DriverPool | None = None
    label: str | None = None
    batch_lock: threading.RLock | None = None
    status: WriterStatus | None = None


class BatchWriter:
    """Writes micro-batches into one table as instants, for one writer (its coordinator and lease).

    Threads: ``run`` holds no lock itself; callers run it under ``batch_lock``, which an operator's change
    also takes (``RunningJob.between_batches``), so the two never interleave. ``status`` is written by the
    micro-batch thread and read by the API's.
    """

    def __init__(
        self,
        config: JobConfig,
        table: Table,
        coordinator: Coordinator,
        index: StateIndex,
        quarantine_path: str,
        parts: WriterParts | None = None,
    ):
        """``parts``: what a running job shares with the writer (``WriterParts``); a writer alone makes its own."""
        parts = parts or WriterParts()
        self.config = config
        self.table = table
        self.coordinator = coordinator
        self.index = index
        self.quarantine_path = quarantine_path
        self.status = parts.status or WriterStatus()
        views, clock, driver_pool = parts.views, parts.clock, parts.driver_pool
        # called with each micro-batch's report once it is done (benchmarks and tests watch the job through it)
        self.observers: list[Callable[[BatchReport], None]] = []
        self.views = views or ViewSync(table)
        self.first_keys = FirstKeys(table.io)  # where the small file groups' keys begin, kept between micro-batches
        # a change feed's one source table, and the ordering of its events
        debezium = config.source.debezium
        self.source_table = TableFeed(
            table, debezium.ordering if config.source.envelope == "debezium" else None, debezium.on_log_reset
        )
        self.message_tally = MessageTally(coordinator.metrics)
        # held while a micro-batch runs: operator actions (rollback) wait for the gap between batches
        self._batch_lock = parts.batch_lock or threading.RLock()
        self.metrics = coordinator.metrics
        self._on_step = parts.on_step or (lambda point, batch_id: None)
        self._after_commit = parts.after_commit or (lambda instant: None)
        self.failures = parts.failures or ServiceFailures(config.services.max_consecutive_failures, coordinator.metrics)
        settings = table.config
        self._spec = PrepareSpec(
            record_key=tuple(settings.record_key_fields),
            partition_by=tuple(settings.partition_fields),
            hive_style=settings.hive_style_partitioning,
            urlencode=settings.urlencode_partitions,
            ordering_field=settings.ordering_field,
            shards=index.shards,
            source_format=config.source.format,
            # the first view lists the table; micro-batches then only apply new instants to it
            complex_key=complex_key_encoding(table, self.views.view()),
            global_keys=index.global_keys,
            placeholder=self._placeholder(),
        )
        self.operation = config.write.operation
        self.merge_on_read = settings.table_type == "MERGE_ON_READ"
        if self.operation == "delete_partition":
            self.action = REPLACE_COMMIT
        else:
            self.action = DELTA_COMMIT if self.merge_on_read else COMMIT
        self._clock = clock or StepClock()
        # threads of a micro-batch the driver writes: the driver's cores, or fewer tasks
        self._owns_pool = driver_pool is None
        self._driver_pool = driver_pool or DriverPool.for_writes(config.write)
        self.label = parts.label

    def write(self, batch_id: int, load: Callable[[], LoadedBatch]) -> BatchReport:
        """The one way into a micro-batch: refused once a table service has failed too often, then written under
        the batch lock (``run``). The caller tells the world (``announce``, or the log line alone)."""
        self.failures.raise_if_fatal()
        with self._batch_lock:
            return self.run(batch_id, load)

    def between_batches(self, action: Callable[[], T]) -> T:
        """``action`` run while no micro-batch runs (under the batch lock): an operator's change."""
        with self._batch_lock:
            return action()

    @property
    def spec(self) -> PrepareSpec:
        """How this table's rows are prepared (keys, partitions, shards): what Spark's tasks prepare them by."""
        return self._spec

    @property
    def clock(self) -> StepClock:
        """What times the micro-batch's steps, which Spark's stages add their task seconds to."""
        return self._clock

    def driver_batch(self, rows: pa.Table, arrival: pa.Array | None = None) -> DriverBatch:
        """Rows the driver holds, prepared in its threads for this writer's table (``arrival``: their order, when
        the reader knows it)."""
        return DriverBatch.prepare(rows, self._spec, self._driver_pool, self._clock.timed, arrival=arrival)

    def decoded_batch(self, decoder: ChangeDecoder, records: pa.Table, messages: Messages | None = None) -> LoadedBatch:
        """A change feed's micro-batch decoded in the driver for this table, against what it has seen of the feed's
        log (``ChangeDecoder.decode``; ``messages``: its values parsed already), and prepared in its threads."""
        decoded = decoder.decode(records, self.table, self.source_table.feed_log(), messages)
        batch = self.driver_batch(decoded.rows)
        batch.tally.add(decoded.tally)
        return LoadedBatch(batch, decoded.incoming, decoded.incoming)

    def run(self, batch_id: int, load: Callable[[], LoadedBatch]) -> BatchReport:
        """Write micro-batch ``batch_id``, read by ``load`` unless the batch is already committed (a replay)."""
        started, requests_before = time.monotonic(), REQUESTS.snapshot()
        self._clock.start()
        self.status.current_batch = batch_id
        if self.coordinator.is_committed(batch_id):
            return BatchReport(batch_id, None, skipped=True, table=self.label)
        loaded = load()
        self._clock.lap("read")
        try:
            skipped = dict(loaded.batch.tally.skipped)
            self.message_tally.count(loaded.batch.tally)
            if loaded.batch.records + len(loaded.bad_files) == 0:
                # no instant for an empty micro-batch: an idle stream must not fill the timeline
                return BatchReport(batch_id, None, skipped=True, empty=True, skipped_messages=skipped, table=self.label)
            staged = self.stage(batch_id, loaded)
            if staged is None:
                return BatchReport(batch_id, None, skipped=True, table=self.label)
            report = self.commit_staged(staged)
        finally:
            loaded.batch.release()
        # the instant is completed: what runs after it may fail, but never undoes it
        self._services(staged.instant)
        report.seconds = time.monotonic() - started
        report.stage_seconds = self._clock.report()
        report.ran_on = loaded.batch.ran_on
        report.requests = REQUESTS.since(requests_before, REQUESTS.snapshot())
        report.retries = report.requests.pop(RETRY, 0)
        self._count(report)
        return report

    def stage(self, batch_id: int, loaded: LoadedBatch) -> StagedWrite | None:
        """Begin an instant and write its files, marked, without completing it; ``None`` when the batch is
        committed already. ``commit_staged`` completes it; an instant left staged is what a writer that
        died before its commit leaves, and the next holder of the lease rolls it back."""
        # before an instant is begun: events of another source table must not be written at all
        source_table = self.source_table.check(batch_id, loaded.batch.tally)
        truncated_at = self._truncated_at(batch_id, loaded.batch.tally)
        # a truncate of the source table replaces every file group, as Hudi's INSERT_OVERWRITE_TABLE does
        action, operation = (
            (REPLACE_COMMIT, "INSERT_OVERWRITE_TABLE")
            if truncated_at
            else (self.action, OPERATION_TYPES[self.operation])
        )
        instant = self.coordinator.begin(batch_id, action, operation)
        if instant is None:
            return None
        self._on_step("begun", batch_id)
        staged = self._guarded(
            batch_id, instant, lambda: self._write(loaded, batch_id, instant, source_table, truncated_at)
        )
        staged.action, staged.operation = action, operation
        return staged

    def _truncated_at(self, batch_id: int, tally: Tally) -> str | None:
        """The position of the micro-batch's newest truncate of the source table, when truncates are applied."""
        if tally.truncated_at is None:
            return None
        if self.config.source.debezium.truncate == "skip":
            log.warning(
                "micro-batch %s: %d truncate(s) of the source table skipped (source.debezium.truncate = 'skip')",
                batch_id,
                tally.skipped[TRUNCATE],
            )
            return None
        return tally.truncated_at

    def commit_staged(self, staged: StagedWrite) -> BatchReport:
        """Complete a staged instant, while the lease holds: its index coverage, then its commit."""
        self._guarded(staged.batch_id, staged.instant, lambda: self._commit(staged))
        return staged.report

    def _guarded(self, batch_id: int, instant: str, action: Callable[[], T]) -> T:
        """``action`` on a begun instant: a failure rolls the instant back, except where nothing more may be
        written (a lost lease, a damaged table), which leaves it to the next start."""
        try:
            return action()
        except LeaseLost as lost:
            log.error(
                "micro-batch %s: the lease is gone, so instant %s is left to the next holder to roll back",
                batch_id,
                instant,
            )
            self.status.failed(f"micro-batch {batch_id}", lost, instant)
            raise
        except BaseException as failure:
            self.metrics.micro_batches.labels("failed").inc()
            self.status.failed(f"micro-batch {batch_id}", failure, instant)
            damage = failure if isinstance(failure, TableDamaged) else TableDamaged.from_text(str(failure))
            if damage is not None:
                log.error("micro-batch %s (instant %s) stopped: %s", batch_id, instant, damage)
                self.failures.stop_with(damage)
                raise damage from None
            log.exception("micro-batch %s (instant %s) failed; rolling it back", batch_id, instant)
            self.coordinator.rollback(instant, force=True)
            raise

    def _count(self, report: BatchReport) -> None:
        self.metrics.micro_batches.labels("committed").inc()
        for kind, n in report.requests.items():
            self.metrics.storage_requests.labels(kind).inc(n)
        self.metrics.storage_retries.inc(report.retries)
        self.metrics.records.inc(report.records)
        self.metrics.quarantined.inc(report.quarantined)
        self.metrics.commit_seconds.observe(report.seconds)
        report.ended_at = time.time()
        self.status.last_instant = report.instant
        self.status.quarantined_total += report.quarantined
        self.status.records_total += report.records
        self.status.recent = ([*self.status.recent, report])[-RECENT_BATCHES:]

    def announce(self, report: BatchReport) -> None:
        """Log a micro-batch's line and tell the observers; then stop if a table service failed too often."""
        log.info(report.line())
        for observer in self.observers:
            observer(report)
        # after the report: the micro-batch is committed, and stays so when the job stops here
        self.failures.raise_if_fatal()

    def close(self) -> None:
        if self._owns_pool:
            self._driver_pool.shutdown()

    # -- the stages ---------------------------------------------------------

    def _plan(self, instant: str, incoming: pa.Schema) -> tuple[stages.BatchPlan, ForeignWrites]:
        return plan_instant(
            self.table,
            self.views,
            self.index,
            self.config.write,
            instant,
            incoming,
            self.first_keys,
            self._placeholder(),
        )

    def _placeholder(self) -> str | None:
        """A change feed's stand-in for a value it did not send (``table.unchanged``)."""
        source = self.config.source
        return source.debezium.unavailable_value if source.envelope == "debezium" else None

    def _write(
        self, loaded: LoadedBatch, batch_id: int, instant: str, source_table: str | None, truncated_at: str | None
    ) -> StagedWrite:
        batch, bad_files = loaded.batch, loaded.bad_files
        # overwrite: a replayed batch quarantines the same rows once
        target = f"{self.quarantine_path}/writer={self.coordinator.writer_id}/batch_id={batch_id}"
        quarantined = loaded.set_aside(instant, target, self.config.storage.io_options)
        self._clock.lap("quarantine")
        plan, foreign = self._plan(instant, loaded.incoming)
        self._clock.lap("plan")
        replaced: dict[str, list[str]] = {}
        if truncated_at is not None:
            # every stored row is gone, and those of events before the truncate: the rest is written anew
            statuses, replaced = (
                batch.bulk_insert(replace(plan, table_empty=True, after=truncated_at)),
                every_file_group(plan),
            )
        elif self.operation == "delete_partition":
            statuses = []
            replaced = partitions_to_delete(plan, batch.partitions(), self.config.write.partitions_to_delete)
        elif self.operation == "bulk_insert" or (self.operation == "upsert" and plan.table_empty):
            # an upsert into an empty table has no key to look up or merge: it is written as a bulk insert
            statuses = batch.bulk_insert(plan)
        else:
            statuses = batch.assign_and_write(plan, assigned_schema(loaded.data_schema, self.index.global_keys))
        self._clock.lap("write")
        self._on_step("written", batch_id)
        stats = [status.stat for status in statuses if status.stat is not None]
        report = BatchReport.written(
            batch_id,
            instant,
            stats,
            batch.tally,
            records=batch.records + len(bad_files),
            quarantined=quarantined,
            late=sum(status.late for status in statuses),
            replaced=sum(len(ids) for ids in replaced.values()),
            table=self.label,
        )
        extra = {
            SCHEMA_KEY: avro_schema_json(plan.table_schema, self.table.name),
            **foreign.commit_metadata(),
            **self.source_table.commit_metadata(source_table, batch.tally),
        }
        return StagedWrite(
            batch_id,
            instant,
            report,
            stats,
            extra,
            replaced,
            [(status.partition, status.file_id) for status in statuses],
            foreign,
        )

    def _commit(self, staged: StagedWrite) -> None:
        foreign = staged.foreign
        self.index.write_coverage(
            staged.instant, staged.written, uncovered=foreign.touched, uncover_all=foreign.everything
        )
        self.coordinator.commit(
            staged.instant,
            staged.stats,
            staged.extra,
            action=staged.action,
            operation=staged.operation,
            replaced_file_ids=staged.replaced,
        )
        self.source_table.committed(staged.extra)
        self._clock.lap("commit")
        self._on_step("committed", staged.batch_id)

    def _services(self, instant: str) -> None:
        """The table services after a commit (``after_commit``); each failure is counted, none rolls the commit back."""
        self._after_commit(instant)
        self._clock.lap("services")
