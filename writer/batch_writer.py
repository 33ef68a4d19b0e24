"""One micro-batch into the table, whoever read it: begin, quarantine, plan, write, commit, table services, report.

``BatchWriter`` is Spark-free. The Spark adapter (``spark/pipeline.py``) reads each micro-batch of the stream
into a ``MicroBatch`` (``DriverBatch`` in the driver's threads, or ``SparkBatch`` on the executors) and hands
it here; the Python write API (``writer/write_api.py``) hands it a ``DriverBatch`` of an Arrow table. The work
on records is done by the stage functions (``writer.stages``), and only one small write status per file
comes back to decide the commit.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from laketide.config import JobConfig
from laketide.coordinator import Coordinator, LeaseLost
from laketide.coordinator.services import ServiceFailures
from laketide.index.assigner import EXISTED, FILE_ID, PARTITION, AssignPlan, SmallFileGroup, UncoveredGroup
from laketide.index.state import StateIndex
from laketide.index.sync import ForeignWrites, foreign_writes
from laketide.table import Table
from laketide.table.commit import SCHEMA_KEY
from laketide.table.damage import TableDamaged
from laketide.table.instant import COMMIT, DELTA_COMMIT, REPLACE_COMMIT
from laketide.table.properties import EVENT_TIME
from laketide.table.schema import IS_DELETED, RECORD_KEY, avro_schema_json, evolve, with_meta_schema
from laketide.table.timeline import Timeline
from laketide.table.view import FileSlice, FileSystemView
from laketide.table.view_sync import ViewSync
from laketide.writer import stages
from laketide.writer.clock import StepClock
from laketide.writer.driver_batch import DriverPool
from laketide.writer.landing import copy_aside
from laketide.writer.log_writer import LogTarget
from laketide.writer.prepare import PrepareSpec
from laketide.writer.preflight import complex_key_encoding
from laketide.writer.report import BatchReport, WriterStatus
from laketide.writer.slots import balanced_slots

log = logging.getLogger("laketide.job")
DEFAULT_RECORD_SIZE = 1024
# write.operation -> Hudi's WriteOperationType, recorded in every commit
OPERATION_TYPES = {"upsert": "UPSERT", "insert": "INSERT", "bulk_insert": "BULK_INSERT", "delete_partition": "DELETE_PARTITION"}


class MicroBatch(Protocol):
    """The prepared rows of one micro-batch, wherever they are held; ``ran_on`` names who runs its stages."""

    ran_on: str

    @property
    def records(self) -> int: ...

    @property
    def bad_rows(self) -> int: ...

    def write_quarantine(self, instant: str, more: list[tuple[str, str]], target: str) -> None: ...

    def partitions(self) -> list[str]: ...

    def assign_and_write(self, plan: stages.BatchPlan, assigned_schema: pa.Schema) -> list[dict]: ...

    def bulk_insert(self, plan: stages.BatchPlan) -> list[dict]: ...

    def release(self) -> None: ...


@dataclass
class LoadedBatch:
    """A micro-batch as read: its rows, the columns of its records, and the landing files set aside."""

    batch: MicroBatch
    incoming: pa.Schema  # the records' columns, timestamps in UTC: what the table's schema evolves by
    data_schema: pa.Schema  # the same columns as the batch's rows hold them
    bad_files: dict[str, str] = field(default_factory=dict)


def _record_size(timeline: Timeline) -> int:
    """Bytes per record in the table's recent base files (Hudi's average record size estimate)."""
    writes = timeline.completed_writes()[-5:]
    stats = [s for i in writes for s in timeline.commit_metadata(i).write_stats() if s.num_writes]
    total = sum(s.num_writes for s in stats)
    return max(64, sum(s.file_size_in_bytes for s in stats) // total) if total else DEFAULT_RECORD_SIZE


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
        clock: StepClock | None = None,
        on_step: Callable[[str, int], None] | None = None,
        after_commit: Callable[[str], None] | None = None,
        views: ViewSync | None = None,
        failures: ServiceFailures | None = None,
    ):
        """``on_step(point, batch_id)`` is called at each step ("begun", "written", "committed");
        crash tests use it to kill the process at an exact point. ``after_commit(instant)`` runs the
        table services once a micro-batch is committed; ``failures`` counts what they fail (a
        commit stands whatever they do). ``views`` is the file-system view kept between
        micro-batches (shared with the table services)."""
        self.config = config
        self.table = table
        self.coordinator = coordinator
        self.index = index
        self.quarantine_path = quarantine_path
        self.status = WriterStatus()
        # called with each micro-batch's report once it is done (benchmarks and tests watch the job through it)
        self.observers: list[Callable[[BatchReport], None]] = []
        self.views = views or ViewSync(table)
        # held while a micro-batch runs: operator actions (rollback) wait for the gap between batches
        self.batch_lock = threading.RLock()
        self.metrics = coordinator.metrics
        self._on_step = on_step or (lambda point, batch_id: None)
        self._after_commit = after_commit or (lambda instant: None)
        self.failures = failures or ServiceFailures(config.services.max_consecutive_failures, coordinator.metrics)
        settings = table.config
        self.spec = PrepareSpec(
            tuple(settings.record_key_fields),
            tuple(settings.partition_fields),
            settings.hive_style_partitioning,
            settings.urlencode_partitions,
            settings.ordering_field,
            index.shards,
            config.source.format,
            # the first view lists the table; micro-batches then only apply new instants to it
            complex_key_encoding(table, self.views.view()),
            index.global_keys,
        )
        self.operation = config.write.operation
        self.merge_on_read = settings.table_type == "MERGE_ON_READ"
        if self.operation == "delete_partition":
            self.action = REPLACE_COMMIT
        else:
            self.action = DELTA_COMMIT if self.merge_on_read else COMMIT
        self.clock = clock or StepClock()
        # threads of a micro-batch the driver writes: the driver's cores, or fewer tasks
        self.driver_pool = DriverPool(min(config.write.parallelism, os.cpu_count() or 1))

    def run(self, batch_id: int, load: Callable[[], LoadedBatch]) -> BatchReport:
        """Write micro-batch ``batch_id``, read by ``load`` unless the batch is already committed (a replay)."""
        started = time.monotonic()
        self.clock.start()
        self.status.current_batch = batch_id
        if self.coordinator.is_committed(batch_id):
            return BatchReport(batch_id, None, skipped=True)
        loaded = load()
        batch, bad_files = loaded.batch, loaded.bad_files
        self.clock.lap("read")
        try:
            if batch.records + len(bad_files) == 0:
                # no instant for an empty micro-batch: an idle stream must not fill the timeline
                return BatchReport(batch_id, None, skipped=True, empty=True)
            instant = self.coordinator.begin(batch_id, self.action, OPERATION_TYPES[self.operation])
            if instant is None:
                return BatchReport(batch_id, None, skipped=True)
            self._on_step("begun", batch_id)
            try:
                report = self._write(loaded, batch_id, instant)
            except LeaseLost:
                log.error("micro-batch %s: the lease is gone, so instant %s is left to the next holder to roll back", batch_id, instant)
                raise
            except BaseException as failure:
                self.metrics.micro_batches.labels("failed").inc()
                damage = failure if isinstance(failure, TableDamaged) else TableDamaged.from_text(str(failure))
                if damage is not None:
                    # no rollback either: nothing is written once the table is found damaged; the next
                    # start rolls the instant back, after the operator has dealt with the file
                    log.error("micro-batch %s (instant %s) stopped: %s", batch_id, instant, damage)
                    self.failures.stop_with(damage)
                    raise damage from None
                log.exception("micro-batch %s (instant %s) failed; rolling it back", batch_id, instant)
                self.coordinator.rollback(instant, force=True)
                raise
        finally:
            batch.release()
        # the instant is completed: what runs after it may fail, but never undoes it
        self._services(instant)
        report.seconds = time.monotonic() - started
        report.stage_seconds = self.clock.report()
        report.ran_on = batch.ran_on
        self.metrics.micro_batches.labels("committed").inc()
        self.metrics.records.inc(report.records)
        self.metrics.quarantined.inc(report.quarantined)
        self.metrics.commit_seconds.observe(report.seconds)
        self.status.last_instant = instant
        self.status.quarantined_total += report.quarantined
        self.status.recent = (self.status.recent + [report])[-20:]
        return report

    def announce(self, report: BatchReport) -> None:
        """Log a micro-batch's line and tell the observers; then stop if a table service failed too often."""
        log.info(report.line())
        for observer in self.observers:
            observer(report)
        # after the report: the micro-batch is committed, and stays so when the job stops here
        self.failures.raise_if_fatal()

    def close(self) -> None:
        self.driver_pool.shutdown()

    # -- the stages ---------------------------------------------------------

    def _plan(self, instant: str, incoming: pa.Schema) -> tuple[stages.BatchPlan, ForeignWrites]:
        timeline = self.table.timeline
        view = self.views.view(timeline)
        latest = view.latest_slices()
        slices = [s for s in latest if s.base_file is not None]
        current = {(s.partition, s.file_id): s.base_file.name for s in slices}
        live = {(s.partition, s.file_id): s.base_file.path for s in slices}
        committed = {i.timestamp for i in timeline.completed_writes()}
        snapshot = self.index.snapshot(committed, timeline.start)
        foreign = foreign_writes(timeline)
        if foreign.everything or foreign.touched:
            log.info("instant %s: %s changed by other writers; their keys are probed again", instant, "every file group" if foreign.everything else f"{len(foreign.touched)} file groups")
        still_covered = set() if foreign.everything else snapshot.covered - foreign.touched
        uncovered = frozenset(set(current) - still_covered)
        write = self.config.write
        record_size = _record_size(timeline)
        settings = self.table.config
        assign = AssignPlan(
            instant,
            self.index.shards,
            settings.ordering_field,
            max(1, write.target_file_size // record_size),
            live=live,
            lookup=self.operation != "insert",
            global_keys=self.index.global_keys,
            event_time=settings.merge_mode == EVENT_TIME and settings.ordering_field is not None,
        )
        for s in slices:
            key = (s.partition, s.file_id)
            if key in uncovered:
                logs = tuple(lf.path for lf in s.log_files)
                assign.uncovered.setdefault(s.partition, []).append(UncoveredGroup(s.partition, s.file_id, s.base_file.path, logs))
            elif s.size < write.small_file_limit:
                capacity = (write.target_file_size - s.size) // record_size
                if capacity > 0:
                    assign.small_groups.setdefault(assign.owner_of(s.file_id), []).append(SmallFileGroup(s.partition, s.file_id, capacity))
        # checked at start; a schema another writer changed since then is checked again here
        schema = evolve(self.table.schema(timeline), incoming)
        plan = stages.BatchPlan(
            table_uri=self.table.uri,
            instant=instant,
            assign=assign,
            index=snapshot,
            current=current,
            uncovered=uncovered,
            table_schema=schema,
            avro_schema=avro_schema_json(with_meta_schema(schema), self.table.name),
            bloom_type=write.bloom_type,
            partition_depth=len(settings.partition_fields),
            ordering_field=settings.ordering_field if settings.merge_mode == EVENT_TIME else None,
            target_file_size=write.target_file_size,
            log_targets=self._log_targets(view, slices) if self.merge_on_read else None,
            write_slots=balanced_slots({s.file_id: s.size for s in slices}, write.parallelism),
            write_tasks=write.parallelism,
            table_empty=not latest,
        )
        return plan, foreign

    @staticmethod
    def _log_targets(view: FileSystemView, slices: list[FileSlice]) -> dict[tuple[str, str], LogTarget]:
        """Merge-on-read: each live file group's next log file, on its latest committed slice.

        Also while a compaction of the group is pending: its commit carries such logs over
        to the slice it starts (``writer.compactor``), so every reader sees them throughout.
        """
        targets = {}
        for s in slices:
            version = view.next_log_version(s.partition, s.file_id, s.base_instant)
            paths = ((s.base_file.path,) if s.base_file else ()) + tuple(lf.path for lf in s.log_files)
            targets[(s.partition, s.file_id)] = LogTarget(s.partition, s.file_id, s.base_instant, s.base_file.name if s.base_file else None, version, paths)
        return targets

    def _quarantine(self, batch: MicroBatch, bad_files: dict[str, str], batch_id: int, instant: str) -> int:
        """Rows with their reason, and whole landing files that could not be read, copied aside."""
        if not batch.bad_rows and not bad_files:
            return 0
        target = f"{self.quarantine_path}/writer={self.coordinator.writer_id}/batch_id={batch_id}"
        # overwrite: a replayed batch quarantines the same rows once
        batch.write_quarantine(instant, [(f"unreadable landing file: {why}", path) for path, why in sorted(bad_files.items())], target)
        copy_aside(bad_files, f"{target}/_files")
        log.warning("micro-batch %s: %d rows and %d files quarantined under %s", batch_id, batch.bad_rows, len(bad_files), target)
        return batch.bad_rows + len(bad_files)

    def _write(self, loaded: LoadedBatch, batch_id: int, instant: str) -> BatchReport:
        batch, bad_files = loaded.batch, loaded.bad_files
        quarantined = self._quarantine(batch, bad_files, batch_id, instant)
        self.clock.lap("quarantine")
        plan, foreign = self._plan(instant, loaded.incoming)
        self.clock.lap("plan")
        replaced: dict[str, list[str]] = {}
        if self.operation == "delete_partition":
            statuses, replaced = [], self._file_groups_to_replace(batch, plan)
        elif self.operation == "bulk_insert" or (self.operation == "upsert" and plan.table_empty):
            # an upsert into an empty table has no key to look up or merge: it is written as a bulk insert
            statuses = batch.bulk_insert(plan)
        else:
            statuses = batch.assign_and_write(plan, self._assigned_schema(loaded.data_schema))
        self.clock.lap("write")
        self._on_step("written", batch_id)
        stats = [stat for stat in map(stages.stat_of, statuses) if stat is not None]
        written = [(r["partition"], r["file_id"]) for r in statuses]
        self.index.write_coverage(instant, written, uncovered=foreign.touched, uncover_all=foreign.everything)
        extra = {SCHEMA_KEY: avro_schema_json(plan.table_schema, self.table.name), **foreign.commit_metadata()}
        self.coordinator.commit(instant, stats, extra, action=self.action, operation=OPERATION_TYPES[self.operation], replaced_file_ids=replaced)
        self.clock.lap("commit")
        self._on_step("committed", batch_id)
        return BatchReport(
            batch_id,
            instant,
            records=batch.records + len(bad_files),
            quarantined=quarantined,
            inserts=sum(s.num_inserts for s in stats),
            updates=sum(s.num_update_writes for s in stats),
            deletes=sum(s.num_deletes for s in stats),
            files=len(stats),
            late=sum(r["late"] for r in statuses),
            replaced=sum(len(ids) for ids in replaced.values()),
        )

    def _file_groups_to_replace(self, batch: MicroBatch, plan: stages.BatchPlan) -> dict[str, list[str]]:
        """delete_partition: every file group of the partitions to delete, by partition.

        Those named by ``write.partitions_to_delete`` (glob patterns over the
        table's partitions), else those the micro-batch's records fall in, as
        Hudi's datasource does when ``hoodie.datasource.write.partitions.to.delete`` is unset.
        """
        patterns = self.config.write.partitions_to_delete
        if patterns is None:
            partitions = batch.partitions()
        else:
            table_partitions = sorted({p for p, _ in plan.current})
            partitions = [p for p in table_partitions if any(fnmatch.fnmatchcase(p, pattern) for pattern in patterns)]
        replaced = {p: sorted(f for q, f in plan.current if q == p) for p in partitions}
        replaced = {p: ids for p, ids in replaced.items() if ids}
        log.info("instant %s: deleting partitions %s (%d file groups)", plan.instant, sorted(replaced) or "none", sum(map(len, replaced.values())))
        return replaced

    def _assigned_schema(self, data_schema: pa.Schema) -> pa.Schema:
        """The columns the assign stage hands the write stage: the records', then where each goes."""
        routing = [(RECORD_KEY, pa.string()), (PARTITION, pa.string()), (FILE_ID, pa.string()), (EXISTED, pa.bool_()), (stages.WRITE_SLOT, pa.int32())]
        if self.index.global_keys and IS_DELETED not in data_schema.names:
            routing.append((IS_DELETED, pa.bool_()))  # the deletes of moved records' old copies
        return pa.schema(list(data_schema) + [pa.field(name, dtype) for name, dtype in routing])

    def _services(self, instant: str) -> None:
        """Index upkeep and the table services after a commit; each failure is counted, none rolls the commit back."""
        self.failures.run("index compaction", self._compact_index, instant)
        self._after_commit(instant)
        self.clock.lap("services")

    def _compact_index(self) -> None:
        timeline = self.table.timeline
        snapshot = self.index.snapshot({i.timestamp for i in timeline.completed_writes()}, timeline.start)
        limit = self.config.write.index_compaction_deltas
        for shard, runs in snapshot.runs.items():
            if len(runs) > limit:
                self.index.compact(snapshot, shard)
        if len(snapshot.coverage_files) > limit:
            self.index.compact_coverage(snapshot)

