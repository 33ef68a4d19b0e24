"""One micro-batch, end to end: begin, validate, assign, write, commit.

``MicroBatchWriter`` is the ``foreachBatch`` function of the streaming query.
It runs on the driver; the work on records happens in two Spark stages
(``writer.stages``), and only one small write status per file comes back.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructField, StructType

from laketide.config import JobConfig
from laketide.coordinator import Coordinator, LeaseLost
from laketide.index.assigner import EXISTED, FILE_ID, PARTITION, AssignPlan, SmallFileGroup, UncoveredGroup
from laketide.index.state import StateIndex
from laketide.index.sync import ForeignWrites, foreign_writes
from laketide.table import Table
from laketide.table.commit import SCHEMA_KEY
from laketide.table.instant import COMMIT, DELTA_COMMIT, REPLACE_COMMIT
from laketide.table.timeline import Timeline
from laketide.table.view import FileSlice, FileSystemView
from laketide.table.view_sync import ViewSync
from laketide.table.properties import EVENT_TIME
from laketide.table.schema import IS_DELETED, RECORD_KEY, avro_schema_json, evolve, with_meta_schema
from laketide.writer import stages
from laketide.writer.log_writer import LogTarget
from laketide.writer.preflight import complex_key_encoding
from laketide.writer.prepare import CORRUPT, PREPARED_FIELDS, RAW, REASON, SHARD, SOURCE_COLUMNS, ArrivalCounter, PrepareSpec, prepare
from laketide.writer.routing import balanced_slots, hash_routes, routed
from laketide.writer.stage_clock import StageClock
from laketide.writer.sources import batch_files, copy_aside, read_files, unreadable_files

log = logging.getLogger("laketide.job")
DEFAULT_RECORD_SIZE = 1024
# write.operation -> Hudi's WriteOperationType, recorded in every commit
OPERATION_TYPES = {"upsert": "UPSERT", "insert": "INSERT", "bulk_insert": "BULK_INSERT", "delete_partition": "DELETE_PARTITION"}


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
    late: int = 0
    replaced: int = 0  # file groups a delete_partition replaced
    seconds: float = 0.0
    skipped: bool = False
    empty: bool = False
    # wall seconds of each step of the micro-batch, and the summed task seconds of its Spark stages
    stage_seconds: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        if self.empty:
            return f"micro-batch {self.batch_id}: empty, no instant"
        if self.skipped:
            return f"micro-batch {self.batch_id}: already committed, skipped"
        replaced = f" replaced={self.replaced}" if self.replaced else ""
        steps = " ".join(f"{name}={seconds:.2f}" for name, seconds in self.stage_seconds.items())
        return (
            f"micro-batch {self.batch_id}: instant={self.instant} records={self.records} inserts={self.inserts} "
            f"updates={self.updates} deletes={self.deletes} late={self.late} quarantined={self.quarantined} files={self.files}"
            f"{replaced} seconds={self.seconds:.2f} ({steps})"
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


def _in_task_attempt(stage: Callable, plan: stages.BatchPlan) -> Callable:
    """A ``mapInArrow`` function running a writing stage with the task's partition and this attempt's write token."""

    def run(batches):
        from pyspark import TaskContext

        from laketide.table.files import write_token

        task = TaskContext.get()
        yield from stage(plan, batches, task.partitionId(), write_token(task.partitionId(), task.stageId(), task.taskAttemptId()))

    return run


def _materialize(prepared: DataFrame) -> tuple[DataFrame, tuple[int, int]]:
    """The micro-batch's prepared rows, computed once and kept on the executors for the stages
    that read them, with the counts of rows and of rows to quarantine.

    A local checkpoint keeps Spark's rows as they are; the columnar cache of
    ``persist`` encodes them first, which measured about twice as slow here.
    It is lazy, so the job that counts is the one that computes and keeps the rows.
    Its blocks cannot be recomputed: losing an executor fails the micro-batch,
    which is rolled back, and the restarted query replays it.
    """
    kept = prepared.localCheckpoint(eager=False)
    counts = kept.agg(F.count(F.lit(1)), F.count(REASON)).first()
    return kept, (counts[0], counts[1])


def _release(prepared: DataFrame) -> None:
    """Free the blocks of a materialized micro-batch now, rather than when the JVM collects it."""
    prepared._jdf.queryExecution().analyzed().rdd().unpersist(False)


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
        after_commit: Callable[[], None] | None = None,
        views: ViewSync | None = None,
    ):
        """``on_step(point, batch_id)`` is called at each step ("begun", "written", "committed");
        crash tests use it to kill the process at an exact point. ``after_commit`` runs the
        table services (cleaning) once a micro-batch is committed. ``views`` is the file-system
        view kept between micro-batches (shared with the table services)."""
        self.spark = spark
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
        self._after_commit = after_commit or (lambda: None)
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
        self.timezone = spark.conf.get("spark.sql.session.timeZone")
        self.clock = StageClock(spark.sparkContext)
        if self.operation != "bulk_insert":
            self.shard_routes = hash_routes(index.shards)
            self.write_routes = hash_routes(config.write.parallelism)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self.batch_lock:
            report = self.process(df, batch_id)
        log.info(report.line())
        for observer in self.observers:
            observer(report)

    def process(self, df: DataFrame, batch_id: int) -> BatchReport:
        started = time.monotonic()
        self.clock.start()
        self.status.current_batch = batch_id
        if self.coordinator.is_committed(batch_id):
            return BatchReport(batch_id, None, skipped=True)
        prepared, data_fields, (records, bad_rows), bad_files = self._read(df, batch_id)
        self.clock.lap("read")
        try:
            if records == 0:
                # no instant for an empty micro-batch: an idle stream must not fill the timeline
                return BatchReport(batch_id, None, skipped=True, empty=True)
            instant = self.coordinator.begin(batch_id, self.action, OPERATION_TYPES[self.operation])
            if instant is None:
                return BatchReport(batch_id, None, skipped=True)
            self._on_step("begun", batch_id)
            try:
                report = self._write(prepared, data_fields, records, bad_rows, bad_files, batch_id, instant)
            except LeaseLost:
                log.error("micro-batch %s: the lease is gone, so instant %s is left to the next holder to roll back", batch_id, instant)
                raise
            except BaseException:
                log.exception("micro-batch %s (instant %s) failed; rolling it back", batch_id, instant)
                self.metrics.micro_batches.labels("failed").inc()
                self.coordinator.rollback(instant, force=True)
                raise
        finally:
            _release(prepared)
        report.seconds = time.monotonic() - started
        report.stage_seconds = self.clock.report()
        self.metrics.micro_batches.labels("committed").inc()
        self.metrics.records.inc(report.records)
        self.metrics.quarantined.inc(report.quarantined)
        self.metrics.commit_seconds.observe(report.seconds)
        self.status.last_instant = instant
        self.status.quarantined_total += report.quarantined
        self.status.recent = (self.status.recent + [report])[-20:]
        return report

    # -- the stages ---------------------------------------------------------

    def _plan(self, instant: str, incoming: pa.Schema) -> tuple[stages.BatchPlan, ForeignWrites]:
        timeline = self.table.timeline
        view = self.views.view(timeline)
        slices = [s for s in view.latest_slices() if s.base_file is not None]
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

    def _quarantine(self, prepared: DataFrame, bad_rows: int, bad_files: dict[str, str], batch_id: int, instant: str) -> int:
        """Rows with their reason, and whole landing files that could not be read, copied aside."""
        if not bad_rows and not bad_files:
            return 0
        rows = prepared.filter(F.col(REASON).isNotNull()).select(F.col(REASON).alias("reason"), F.col(RAW).alias("raw"))
        if bad_files:
            files = self.spark.createDataFrame(
                [(f"unreadable landing file: {why}", path) for path, why in sorted(bad_files.items())], "reason STRING, raw STRING"
            )
            rows = rows.unionByName(files)
        bad = rows.select(F.lit(instant).alias("instant"), "reason", "raw", F.current_timestamp().alias("quarantined_at"))
        count = bad.count()
        if count:
            target = f"{self.quarantine_path}/writer={self.coordinator.writer_id}/batch_id={batch_id}"
            # overwrite: a replayed batch quarantines the same rows once
            bad.coalesce(1).write.mode("overwrite").parquet(target)
            copy_aside(bad_files, f"{target}/_files")
            log.warning("micro-batch %s: %d rows and %d files quarantined under %s", batch_id, count - len(bad_files), len(bad_files), target)
        return count

    def _prepared(self, df: DataFrame) -> tuple[DataFrame, list[StructField]]:
        spec = self.spec
        data_fields = [f for f in df.schema.fields if f.name != CORRUPT and f.name not in SOURCE_COLUMNS]
        prepared_struct = StructType(data_fields + list(from_arrow_schema(pa.schema(PREPARED_FIELDS)).fields))

        def prepare_task(batches):
            from pyspark import TaskContext

            arrival = ArrivalCounter(TaskContext.get().partitionId() << 40)
            for b in batches:
                yield from prepare(pa.Table.from_batches([b]), spec, arrival).to_batches()

        return self._distributed(df.mapInArrow(self.clock.timed("prepare", prepare_task), prepared_struct)), data_fields

    def _distributed(self, prepared: DataFrame) -> DataFrame:
        """Prepared rows shuffled the way the operation's first writing stage reads them, so the
        shuffle runs in the same pass as reading and preparing, before the rows are materialized.

        An upsert or insert assigns by index shard. A bulk insert writes each task's rows sorted
        by ``bulk_sort_keys``: hashed by partition and key (by key alone under a global index),
        as Hudi's PARTITION_SORT bulk insert does, with no sampling pass over the rows.
        """
        if self.operation != "bulk_insert":
            return prepared.repartition(self.index.shards, routed(F.col(SHARD), self.shard_routes))
        global_keys = self.index.global_keys
        order = stages.bulk_sort_keys(self.table.config.ordering_field, global_keys)
        columns = [RECORD_KEY] if global_keys else [PARTITION, RECORD_KEY]
        spread = prepared.repartition(self.config.write.parallelism, *columns)
        return spread.sortWithinPartitions(*[F.col(c).asc() if d == "ascending" else F.col(c).desc() for c, d in order])

    def _read(self, df: DataFrame, batch_id: int) -> tuple[DataFrame, list[StructField], tuple[int, int], dict[str, str]]:
        """The prepared rows of the micro-batch (shuffled and materialized once), the counts of
        records and of rows to quarantine, and the landing files set aside."""
        prepared, data_fields = self._prepared(df)
        try:
            prepared, counts = _materialize(prepared)
            return prepared, data_fields, counts, {}
        except Exception as failure:
            if self.config.source.format == "generator":
                raise
            # a failure because the job is being stopped is not about the files
            self.coordinator.lease.check()
            readable, bad = self._without_unreadable_files(df, batch_id, failure)
        prepared, data_fields = self._prepared(readable)
        prepared, (records, bad_rows) = _materialize(prepared)
        return prepared, data_fields, (records + len(bad), bad_rows), bad

    def _without_unreadable_files(self, df: DataFrame, batch_id: int, failure: Exception) -> tuple[DataFrame, dict[str, str]]:
        """The micro-batch read again file by file, leaving out the files Spark cannot read.

        Files that read fine on their own (a CSV header in another order) are
        kept; a failure that has nothing to do with the files fails again.
        """
        try:
            files = batch_files(self.config.stream.checkpoint, batch_id)
            good, bad = unreadable_files(self.spark, self.config.source, files)
        except Exception:
            log.exception("could not tell which landing files of micro-batch %s are unreadable", batch_id)
            raise failure from None
        if bad:
            log.warning("landing files Spark cannot read under source.schema: %s", bad)
        readable = read_files(self.spark, self.config.source, good)
        return (readable if readable is not None else self.spark.createDataFrame([], df.schema)), bad

    def _write(
        self, prepared: DataFrame, data_fields: list[StructField], records: int, bad_rows: int, bad_files: dict[str, str], batch_id: int, instant: str
    ) -> BatchReport:
        quarantined = self._quarantine(prepared, bad_rows, bad_files, batch_id, instant)
        self.clock.lap("quarantine")
        plan, foreign = self._plan(instant, to_arrow_schema(StructType(data_fields), timezone="UTC"))
        self.clock.lap("plan")
        good = prepared.filter(F.col(REASON).isNull())
        replaced: dict[str, list[str]] = {}
        if self.operation == "delete_partition":
            statuses, replaced = [], self._file_groups_to_replace(good, plan)
        elif self.operation == "bulk_insert":
            statuses = self._bulk_insert(good, plan)
        else:
            statuses = self._assign_and_write(good, plan, data_fields)
        self.clock.lap("write")
        self._on_step("written", batch_id)
        stats = [stages.stat_of(row) for row in statuses]
        written = [(r["partition"], r["file_id"]) for r in statuses]
        self.index.write_coverage(instant, written, uncovered=foreign.touched, uncover_all=foreign.everything)
        extra = {SCHEMA_KEY: avro_schema_json(plan.table_schema, self.table.name), **foreign.commit_metadata()}
        self.coordinator.commit(instant, stats, extra, action=self.action, operation=OPERATION_TYPES[self.operation], replaced_file_ids=replaced)
        self.clock.lap("commit")
        self._on_step("committed", batch_id)
        self._compact_index()
        self._after_commit()
        self.clock.lap("services")
        return BatchReport(
            batch_id,
            instant,
            records=records,
            quarantined=quarantined,
            inserts=sum(s.num_inserts for s in stats),
            updates=sum(s.num_update_writes for s in stats),
            deletes=sum(s.num_deletes for s in stats),
            files=len(stats),
            late=sum(r["late"] for r in statuses),
            replaced=sum(len(ids) for ids in replaced.values()),
        )

    def _file_groups_to_replace(self, good: DataFrame, plan: stages.BatchPlan) -> dict[str, list[str]]:
        """delete_partition: every file group of the partitions to delete, by partition.

        Those named by ``write.partitions_to_delete`` (glob patterns over the
        table's partitions), else those the micro-batch's records fall in, as
        Hudi's datasource does when ``hoodie.datasource.write.partitions.to.delete`` is unset.
        """
        patterns = self.config.write.partitions_to_delete
        if patterns is None:
            partitions = sorted(r[0] for r in good.select(PARTITION).distinct().collect())
        else:
            table_partitions = sorted({p for p, _ in plan.current})
            partitions = [p for p in table_partitions if any(fnmatch.fnmatchcase(p, pattern) for pattern in patterns)]
        replaced = {p: sorted(f for q, f in plan.current if q == p) for p in partitions}
        replaced = {p: ids for p, ids in replaced.items() if ids}
        log.info("instant %s: deleting partitions %s (%d file groups)", plan.instant, sorted(replaced) or "none", sum(map(len, replaced.values())))
        return replaced

    def _bulk_insert(self, good: DataFrame, plan: stages.BatchPlan) -> list[dict]:
        """One stage over the rows as ``_distributed`` left them: each task writes new file groups."""
        status_struct = from_arrow_schema(stages.STATUS_SCHEMA)
        return [row.asDict() for row in good.drop(REASON, RAW, SHARD).mapInArrow(self.clock.timed("write", _in_task_attempt(stages.bulk_insert, plan)), status_struct).collect()]

    def _assign_and_write(self, good: DataFrame, plan: stages.BatchPlan, data_fields: list[StructField]) -> list[dict]:
        routing = [(RECORD_KEY, pa.string()), (PARTITION, pa.string()), (FILE_ID, pa.string()), (EXISTED, pa.bool_()), (stages.WRITE_SLOT, pa.int32())]
        if self.index.global_keys and IS_DELETED not in {f.name for f in data_fields}:
            routing.append((IS_DELETED, pa.bool_()))  # the deletes of moved records' old copies
        assigned_struct = StructType(data_fields + list(from_arrow_schema(pa.schema(routing)).fields))
        assigned_arrow = to_arrow_schema(assigned_struct, timezone=self.timezone)
        status_struct = from_arrow_schema(stages.STATUS_SCHEMA)

        def assign_task(batches):
            yield from stages.assign(plan, batches, assigned_arrow)

        write = self.config.write
        # rows are already shuffled by shard (``_distributed``)
        assigned = good.mapInArrow(self.clock.timed("assign", assign_task), assigned_struct)
        writing = self.clock.timed("write", _in_task_attempt(stages.write, plan))
        by_slot = assigned.repartition(write.parallelism, routed(F.col(stages.WRITE_SLOT), self.write_routes))
        written = by_slot.mapInArrow(writing, status_struct)
        return [row.asDict() for row in written.collect()]

    def _compact_index(self) -> None:
        timeline = self.table.timeline
        snapshot = self.index.snapshot({i.timestamp for i in timeline.completed_writes()}, timeline.start)
        limit = self.config.write.index_compaction_deltas
        for shard, runs in snapshot.runs.items():
            if len(runs) > limit:
                self.index.compact(snapshot, shard)
        if len(snapshot.coverage_files) > limit:
            self.index.compact_coverage(snapshot)

