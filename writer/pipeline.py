"""One micro-batch, end to end: begin, validate, assign, write, commit.

``MicroBatchWriter`` is the ``foreachBatch`` function of the streaming query.
It runs on the driver; the work on records happens in two Spark stages
(``writer.stages``), and only one small write status per file comes back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructField, StructType

from laketide.config import JobConfig
from laketide.coordinator import Coordinator
from laketide.index.assigner import FILE_ID, PARTITION, AssignPlan, SmallFileGroup, UncoveredGroup
from laketide.index.state import StateIndex
from laketide.table import Table
from laketide.table.commit import SCHEMA_KEY
from laketide.table.timeline import Timeline
from laketide.table.schema import RECORD_KEY, avro_schema_json, data_schema, with_meta_schema
from laketide.writer import stages
from laketide.writer.prepare import CORRUPT, PREPARED_FIELDS, RAW, REASON, SHARD, PrepareSpec, prepare

log = logging.getLogger("laketide.job")
DEFAULT_RECORD_SIZE = 1024


@dataclass
class BatchReport:
    batch_id: int
    instant: str | None
    records: int = 0
    quarantined: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    files: int = 0
    seconds: float = 0.0
    skipped: bool = False

    def line(self) -> str:
        if self.skipped:
            return f"micro-batch {self.batch_id}: already committed, skipped"
        return (
            f"micro-batch {self.batch_id}: instant={self.instant} records={self.records} inserts={self.inserts} "
            f"updates={self.updates} deletes={self.deletes} quarantined={self.quarantined} files={self.files} "
            f"seconds={self.seconds:.2f}"
        )


@dataclass
class WriterStatus:
    """What the running job tells the outside world (the API serves it)."""

    current_batch: int | None = None
    last_instant: str | None = None
    recent: list[BatchReport] = field(default_factory=list)
    quarantined_total: int = 0


def _record_size(timeline: Timeline) -> int:
    writes = timeline.completed_writes()[-5:]
    stats = [s for i in writes for s in timeline.commit_metadata(i).write_stats() if s.num_writes]
    total = sum(s.num_writes for s in stats)
    return max(64, sum(s.file_size_in_bytes for s in stats) // total) if total else DEFAULT_RECORD_SIZE


class MicroBatchWriter:
    def __init__(
        self,
        spark: SparkSession,
        config: JobConfig,
        table: Table,
        coordinator: Coordinator,
        index: StateIndex,
        quarantine_path: str,
        on_step: Callable[[str, int], None] | None = None,
    ):
        """``on_step(point, batch_id)`` is called at each step ("begun", "written", "committed");
        crash tests use it to kill the process at an exact point."""
        self.spark = spark
        self.config = config
        self.table = table
        self.coordinator = coordinator
        self.index = index
        self.quarantine_path = quarantine_path
        self.status = WriterStatus()
        # held while a micro-batch runs: operator actions (rollback) wait for the gap between batches
        self.batch_lock = threading.RLock()
        self.metrics = coordinator.metrics
        self._on_step = on_step or (lambda point, batch_id: None)
        self.spec = PrepareSpec(
            tuple(config.table.record_key),
            tuple(config.table.partition_by),
            config.table.hive_style_partitioning,
            config.table.ordering_field,
            index.shards,
            config.source.format,
        )

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self.batch_lock:
            report = self.process(df, batch_id)
        log.info(report.line())

    def process(self, df: DataFrame, batch_id: int) -> BatchReport:
        started = time.monotonic()
        self.status.current_batch = batch_id
        instant = self.coordinator.begin(batch_id)
        if instant is None:
            return BatchReport(batch_id, None, skipped=True)
        self._on_step("begun", batch_id)
        try:
            report = self._write(df, batch_id, instant)
        except BaseException:
            log.exception("micro-batch %s (instant %s) failed; rolling it back", batch_id, instant)
            self.metrics.micro_batches.labels("failed").inc()
            self.coordinator.rollback(instant, force=True)
            raise
        report.seconds = time.monotonic() - started
        self.metrics.micro_batches.labels("committed").inc()
        self.metrics.records.inc(report.records)
        self.metrics.quarantined.inc(report.quarantined)
        self.metrics.commit_seconds.observe(report.seconds)
        self.status.last_instant = instant
        self.status.quarantined_total += report.quarantined
        self.status.recent = (self.status.recent + [report])[-20:]
        return report

    # -- the stages ---------------------------------------------------------

    def _table_schema(self, incoming: pa.Schema, current: dict) -> pa.Schema:
        """The existing table schema, plus incoming columns it does not have yet."""
        base = data_schema(incoming)
        if not current:
            return base
        (partition, file_id), name = next(iter(sorted(current.items())))
        path = f"{partition}/{name}" if partition else name
        with self.table.io.open_input(path) as f:
            existing = data_schema(pq.read_schema(f))
        extra = [f for f in base if f.name not in existing.names]
        return pa.schema(list(existing) + extra)

    def _plan(self, instant: str, incoming: pa.Schema) -> stages.BatchPlan:
        timeline = self.table.timeline
        view = self.table.file_system_view(timeline)
        slices = [s for s in view.latest_slices() if s.base_file is not None]
        current = {(s.partition, s.file_id): s.base_file.name for s in slices}
        committed = {i.timestamp for i in timeline.completed_writes()}
        snapshot = self.index.snapshot(committed, timeline.earliest_timestamp)
        uncovered = frozenset(set(current) - snapshot.covered)
        write = self.config.write
        record_size = _record_size(timeline)
        assign = AssignPlan(instant, self.index.shards, self.config.table.ordering_field, max(1, write.target_file_size // record_size))
        for s in slices:
            key = (s.partition, s.file_id)
            if key in uncovered:
                assign.uncovered.setdefault(s.partition, []).append(UncoveredGroup(s.partition, s.file_id, s.base_file.path))
            elif s.size < write.small_file_limit:
                capacity = (write.target_file_size - s.size) // record_size
                if capacity > 0:
                    assign.small_groups.setdefault(assign.owner_of(s.file_id), []).append(SmallFileGroup(s.partition, s.file_id, capacity))
        schema = self._table_schema(incoming, current)
        return stages.BatchPlan(
            table_uri=self.table.uri,
            instant=instant,
            assign=assign,
            index=snapshot,
            current=current,
            uncovered=uncovered,
            table_schema=schema,
            avro_schema=avro_schema_json(with_meta_schema(schema), self.table.name),
            bloom_type=write.bloom_type,
            partition_depth=len(self.config.table.partition_by),
        )

    def _quarantine(self, prepared: DataFrame, batch_id: int, instant: str) -> int:
        bad = prepared.filter(F.col(REASON).isNotNull()).select(
            F.lit(instant).alias("instant"),
            F.col(REASON).alias("reason"),
            F.col(RAW).alias("raw"),
            F.current_timestamp().alias("quarantined_at"),
        )
        count = bad.count()
        if count:
            target = f"{self.quarantine_path}/writer={self.coordinator.writer_id}/batch_id={batch_id}"
            # overwrite: a replayed batch quarantines the same rows once
            bad.coalesce(1).write.mode("overwrite").parquet(target)
            log.warning("micro-batch %s: %d rows quarantined under %s", batch_id, count, target)
        return count

    def _write(self, df: DataFrame, batch_id: int, instant: str) -> BatchReport:
        spec = self.spec
        # Spark's malformed-record column is folded into the quarantine reason and raw text by prepare().
        data_fields = [f for f in df.schema.fields if f.name != CORRUPT]
        prepared_struct = StructType(data_fields + list(from_arrow_schema(pa.schema(PREPARED_FIELDS)).fields))

        def prepare_task(batches):
            from pyspark import TaskContext

            base = TaskContext.get().partitionId() << 40
            for b in batches:
                out = prepare(pa.Table.from_batches([b]), spec, base)
                base += b.num_rows
                yield from out.to_batches()

        prepared = df.mapInArrow(prepare_task, prepared_struct).persist()
        try:
            records = prepared.count()
            quarantined = self._quarantine(prepared, batch_id, instant)
            plan = self._plan(instant, to_arrow_schema(StructType(data_fields)))
            statuses = self._assign_and_write(prepared.filter(F.col(REASON).isNull()), plan, data_fields)
        finally:
            prepared.unpersist()
        self._on_step("written", batch_id)
        stats = [stages.stat_of(row) for row in statuses]
        self.index.write_coverage(instant, [(r["partition"], r["file_id"]) for r in statuses])
        self.coordinator.commit(instant, stats, {SCHEMA_KEY: avro_schema_json(plan.table_schema, self.table.name)})
        self._on_step("committed", batch_id)
        self._compact_index()
        return BatchReport(
            batch_id,
            instant,
            records=records,
            quarantined=quarantined,
            inserts=sum(s.num_inserts for s in stats),
            updates=sum(s.num_update_writes for s in stats),
            deletes=sum(s.num_deletes for s in stats),
            files=len(stats),
        )

    def _assign_and_write(self, good: DataFrame, plan: stages.BatchPlan, data_fields: list[StructField]) -> list[dict]:
        assigned_struct = StructType(data_fields + list(from_arrow_schema(pa.schema([(RECORD_KEY, pa.string()), (PARTITION, pa.string()), (FILE_ID, pa.string())])).fields))
        assigned_arrow = to_arrow_schema(assigned_struct)
        status_struct = from_arrow_schema(stages.STATUS_SCHEMA)

        def assign_task(batches):
            yield from stages.assign(plan, batches, assigned_arrow)

        def write_task(batches):
            from pyspark import TaskContext

            yield from stages.write(plan, batches, TaskContext.get().partitionId())

        write = self.config.write
        assigned = good.repartition(self.index.shards, SHARD).mapInArrow(assign_task, assigned_struct)
        written = assigned.repartition(write.parallelism, PARTITION, FILE_ID).mapInArrow(write_task, status_struct)
        return [row.asDict() for row in written.collect()]

    def _compact_index(self) -> None:
        timeline = self.table.timeline
        snapshot = self.index.snapshot({i.timestamp for i in timeline.completed_writes()}, timeline.earliest_timestamp)
        for shard, runs in snapshot.runs.items():
            if len(runs) > self.config.write.index_compaction_deltas:
                self.index.compact(snapshot, shard)

