"""A micro-batch written by Spark's executors: the stage functions in ``mapInArrow`` tasks, Arrow parts shuffled between them.

The prepare tasks pack their rows into Arrow parts by index shard (``Shuffles.distributed``); the parts
are shuffled and materialized once, assigned per shard, packed again by write slot, shuffled and written.
A bulk insert instead cuts the rows into key ranges (``writer.ranges``), one per write task. Only the parts'
counts and key samples, and one small write status per file, come back to the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from laketide.index.columns import KEY_HASH, PARTITION, RAW, REASON, SHARD
from laketide.table.schema import RECORD_KEY
from laketide.spark.arrow_parts import PART_SCHEMA, pack, pack_all, unpack, unpacked
from laketide.spark.routing import hash_routes, routed
from laketide.spark.stage_clock import StageClock
from laketide.writer import bulk_stage, quarantine, ranges, stages
from laketide.writer.slots import split_by
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

PART_STRUCT = from_arrow_schema(PART_SCHEMA)
STATUS_STRUCT = from_arrow_schema(stages.STATUS_SCHEMA)


def _in_task_attempt(stage: Callable, plan: stages.BatchPlan) -> Callable:
    """A ``mapInArrow`` function running a writing stage over its task's parts (a list of tables), with
    the task's partition and this attempt's write token."""

    def run(batches):
        from laketide.table.files import write_token
        from pyspark import TaskContext

        parts = [rows for rows in unpack(batches) if rows.num_rows]
        if not parts:
            return
        task = TaskContext.get()
        yield from stage(plan, parts, task.partitionId(), write_token(task.partitionId(), task.stageId(), task.taskAttemptId()))

    return run


def _write(plan: stages.BatchPlan, parts: list[pa.Table], task: int, token: str) -> Iterator[pa.RecordBatch]:
    return stages.write(plan, iter(pa.concat_tables(parts).to_batches()), task, token)


def _good(rows: pa.Table) -> pa.Table:
    """The rows that do not go to quarantine, without the columns that say why."""
    if rows.column(REASON).null_count < rows.num_rows:
        rows = rows.filter(pc.is_null(rows[REASON]))
    return rows.drop_columns([REASON, RAW])


def pack_prepared(rows: pa.Table, by_shard: bool, task: int, global_keys: bool) -> Iterator[pa.RecordBatch]:
    """A prepare task's rows as parts: one per index shard (an upsert's assign tasks), or all for this
    task (a bulk insert, laid out by key range later). The first part carries a sample of the rows' range
    keys either way: an upsert the plan finds to be into an empty table is bulk inserted too."""
    # sampled from the range key's columns: filtering out bad rows copies what it keeps
    sample = ranges.sample(_good(rows.select([RECORD_KEY, PARTITION, REASON, RAW])), global_keys, seed=task)
    yield from _pack_by_shard(rows, sample) if by_shard else pack(task, rows, sample)


def _pack_by_shard(rows: pa.Table, sample: tuple[list[str], float] = ([], 0.0)) -> Iterator[pa.RecordBatch]:
    """``rows`` as one part per index shard, for the assign task of that shard; the first carries ``sample``."""
    for n, (shard, part) in enumerate(split_by(rows, rows[SHARD].to_numpy())):
        yield from pack(shard, part, sample if n == 0 else ([], 0.0))


class Shuffles:
    """Where a job's micro-batches send their parts: by index shard to assign, by write slot to write, by
    key range to bulk insert. Each route table makes a part's ``task`` the Spark partition it lands in."""

    def __init__(self, shards: int, write_tasks: int):
        self.write_tasks = write_tasks
        self.shard_routes = hash_routes(shards)
        self.write_routes = hash_routes(write_tasks)

    def distributed(self, parts: DataFrame, by_shard: bool) -> DataFrame:
        """A prepare stage's parts, shuffled the way the first writing stage reads them, in the same pass as
        reading and preparing: by shard to assign, or not at all for a bulk insert, whose key ranges are
        known only once every part's sample is."""
        return self.to_tasks(parts, self.shard_routes) if by_shard else parts

    @staticmethod
    def to_tasks(parts: DataFrame, routes: tuple[int, ...]) -> DataFrame:
        return parts.repartition(len(routes), routed(F.col("task"), routes))


class SparkBatch:
    """The prepared parts of one micro-batch, computed once and kept on the executors for the stages that read them."""

    ran_on = "tasks"

    def __init__(self, parts: DataFrame, shuffles: Shuffles, clock: StageClock, by_shard: bool):
        """``parts`` are in the tasks of their index shard (``by_shard``), or where they were prepared.
        A local checkpoint keeps the parts as they are. It is lazy, so collecting their counts is
        the job that computes and keeps them. Its blocks cannot be recomputed: losing an executor
        fails the micro-batch, which is rolled back, and the restarted query replays it."""
        self.parts = parts.localCheckpoint(eager=False)
        self.shuffles = shuffles
        self.by_shard = by_shard
        self.clock = clock
        counts = self.parts.select("rows", "bad", "sample", "sample_weight").collect()
        self.records, self.bad_rows = sum(r["rows"] for r in counts), sum(r["bad"] for r in counts)
        # every part's sample of its good rows' range keys, for a bulk insert's cut points
        self.samples = [(r["sample"], r["sample_weight"]) for r in counts if r["sample"]]

    def write_quarantine(self, instant: str, more: list[tuple[str, str]], target: str, options: dict[str, str]) -> None:
        """The rows that go to quarantine, with ``more`` (reason, raw) rows, written by one task as one
        parquet file under ``target``, in the schema the driver path writes (``writer.quarantine``)."""

        def bad_rows(batches):
            for rows in unpack(batches):
                bad = rows.filter(pc.is_valid(rows[REASON]))
                yield pa.RecordBatch.from_arrays([bad[c].combine_chunks().cast(pa.string()) for c in (REASON, RAW)], ["reason", "raw"])

        rows = self.parts.filter(F.col("bad") > 0).mapInArrow(bad_rows, "reason STRING, raw STRING")
        if more:
            rows = rows.unionByName(self.parts.sparkSession.createDataFrame(more, "reason STRING, raw STRING"))
        quarantine.clear(target, options)

        def write(batches):
            from pyspark import TaskContext

            bad = [b for b in batches if b.num_rows]
            if not bad:
                return
            bad = pa.Table.from_batches(bad)
            table = quarantine.quarantine_rows(instant, bad["reason"].combine_chunks(), bad["raw"].combine_chunks())
            quarantine.write_part(target, table, TaskContext.get().partitionId(), options)
            yield pa.RecordBatch.from_pydict({"rows": [table.num_rows]})

        rows.coalesce(1).mapInArrow(write, "rows LONG").collect()

    def partitions(self) -> list[str]:
        def partitions_of(batches):
            for rows in unpack(batches):
                yield pa.RecordBatch.from_arrays([pc.unique(_good(rows)[PARTITION].combine_chunks())], ["partition"])

        return sorted({r[0] for r in self.parts.mapInArrow(partitions_of, "partition STRING").distinct().collect()})

    def assign_and_write(self, plan: stages.BatchPlan, assigned_arrow: pa.Schema) -> list[stages.WriteStatus]:
        def assign_task(batches):
            rows = unpacked(batches)
            if rows is None:
                return
            yield from pack_all(stages.assign(plan, _good(rows), assigned_arrow))

        assigned = self._by_shard().mapInArrow(self.clock.timed("assign", assign_task), PART_STRUCT)
        writing = self.clock.timed("write", _in_task_attempt(_write, plan))
        return _statuses(Shuffles.to_tasks(assigned, self.shuffles.write_routes).mapInArrow(writing, STATUS_STRUCT))

    def _by_shard(self) -> DataFrame:
        """The parts in the tasks of their index shard: as they were prepared (``Shuffles.distributed``), or,
        when they were laid out for a bulk insert that the plan did not make, cut by shard and shuffled now."""
        if self.by_shard:
            return self.parts

        def cut_by_shard(batches):
            for rows in unpack(batches):
                yield from _pack_by_shard(rows)

        return Shuffles.to_tasks(self.parts.mapInArrow(cut_by_shard, PART_STRUCT), self.shuffles.shard_routes)

    def bulk_insert(self, plan: stages.BatchPlan) -> list[stages.WriteStatus]:
        """Each write task takes one key range of the micro-batch (``writer.ranges``) and writes it, sorted
        by ``bulk_sort_keys``, into new file groups: each file group holds a contiguous range of keys."""
        global_keys = plan.index.global_keys
        order = bulk_stage.bulk_sort_keys(plan.assign.ordering_field, global_keys)
        cuts = ranges.cut_points(self.samples, self.shuffles.write_tasks, plan.assign.new_group_records)

        def cut_task(batches):
            for rows in unpack(batches):
                yield from pack_all(ranges.split_unsorted(_good(rows).drop_columns([SHARD, KEY_HASH]), cuts, global_keys))

        def insert_sorted(plan, parts, task, token):
            # a task's range comes in parts from every prepare task: sorted once, here
            rows = pa.concat_tables(parts).sort_by(order)
            return bulk_stage.bulk_insert(plan, iter(rows.to_batches()), task, token)

        by_range = Shuffles.to_tasks(self.parts.mapInArrow(self.clock.timed("write", cut_task), PART_STRUCT), self.shuffles.write_routes)
        return _statuses(by_range.mapInArrow(self.clock.timed("write", _in_task_attempt(insert_sorted, plan)), STATUS_STRUCT))

    def release(self) -> None:
        """Free the blocks of the micro-batch now, rather than when the JVM collects it."""
        self.parts._jdf.queryExecution().analyzed().rdd().unpersist(False)


def _statuses(written: DataFrame) -> list[stages.WriteStatus]:
    """The write statuses the tasks answered: one small row per file group comes back to the driver."""
    return [stages.WriteStatus.from_row(row.asDict()) for row in written.collect()]
