"""A micro-batch written by Spark's executors: the stage functions in ``mapInArrow`` tasks, rows shuffled between them.

Prepared rows are shuffled by index shard in the same pass that reads and
prepares them (``distributed``), materialized once, assigned per shard, then
shuffled by write slot and written; only one small write status per file
comes back to the driver.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from laketide.index.columns import PARTITION, RAW, REASON, SHARD, WRITE_SLOT
from laketide.spark.routing import hash_routes, routed
from laketide.spark.stage_clock import StageClock
from laketide.table.schema import RECORD_KEY
from laketide.writer import quarantine, stages
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema


def _in_task_attempt(stage: Callable, plan: stages.BatchPlan) -> Callable:
    """A ``mapInArrow`` function running a writing stage with the task's partition and this attempt's write token."""

    def run(batches):
        from laketide.table.files import write_token
        from pyspark import TaskContext

        task = TaskContext.get()
        yield from stage(plan, batches, task.partitionId(), write_token(task.partitionId(), task.stageId(), task.taskAttemptId()))

    return run


class Shuffles:
    """How a job's micro-batches move rows between tasks: by index shard to assign, by write slot to write,
    or, for a bulk insert, hashed by partition and key and sorted."""

    def __init__(self, shards: int, write_tasks: int, bulk: bool, global_keys: bool, ordering_field: str | None):
        self.write_tasks = write_tasks
        self.bulk = bulk
        self.global_keys = global_keys
        self.ordering_field = ordering_field
        if not bulk:
            self.shard_routes = hash_routes(shards)
            self.write_routes = hash_routes(write_tasks)

    def distributed(self, prepared: DataFrame) -> DataFrame:
        """Prepared rows shuffled the way the operation's first writing stage reads them, so the
        shuffle runs in the same pass as reading and preparing, before the rows are materialized.

        An upsert or insert assigns by index shard. A bulk insert writes each task's rows sorted
        by ``bulk_sort_keys``: hashed by partition and key (by key alone under a global index),
        as Hudi's PARTITION_SORT bulk insert does, with no sampling pass over the rows.
        """
        if not self.bulk:
            return prepared.repartition(len(self.shard_routes), routed(F.col(SHARD), self.shard_routes))
        return self.bulk_layout(prepared)

    def bulk_layout(self, prepared: DataFrame) -> DataFrame:
        order = stages.bulk_sort_keys(self.ordering_field, self.global_keys)
        columns = [RECORD_KEY] if self.global_keys else [PARTITION, RECORD_KEY]
        spread = prepared.repartition(self.write_tasks, *columns)
        return spread.sortWithinPartitions(*[F.col(c).asc() if d == "ascending" else F.col(c).desc() for c, d in order])


class SparkBatch:
    """The prepared rows of one micro-batch, computed once and kept on the executors for the stages that read them."""

    ran_on = "tasks"

    def __init__(self, prepared: DataFrame, shuffles: Shuffles, clock: StageClock):
        """A local checkpoint keeps Spark's rows as they are; the columnar cache of ``persist``
        encodes them first, which measured about twice as slow here. It is lazy, so the job
        that counts is the one that computes and keeps the rows. Its blocks cannot be
        recomputed: losing an executor fails the micro-batch, which is rolled back, and the
        restarted query replays it."""
        self.rows = prepared.localCheckpoint(eager=False)
        self.shuffles = shuffles
        self.clock = clock
        counts = self.rows.agg(F.count(F.lit(1)), F.count(REASON)).first()
        self.records, self.bad_rows = counts[0], counts[1]

    def write_quarantine(self, instant: str, more: list[tuple[str, str]], target: str, options: dict[str, str]) -> None:
        """The rows that go to quarantine, with ``more`` (reason, raw) rows, written by one task as one
        parquet file under ``target``, in the schema the driver path writes (``writer.quarantine``)."""
        rows = self.rows.filter(F.col(REASON).isNotNull()).select(F.col(REASON).alias("reason"), F.col(RAW).alias("raw"))
        if more:
            rows = rows.unionByName(self.rows.sparkSession.createDataFrame(more, "reason STRING, raw STRING"))
        quarantine.clear(target, options)

        def write(batches):
            from pyspark import TaskContext

            bad = [b for b in batches if b.num_rows]
            if not bad:
                return
            bad = pa.Table.from_batches(bad)
            reasons, raws = (bad[c].combine_chunks().cast(pa.string()) for c in ("reason", "raw"))
            table = quarantine.quarantine_rows(instant, reasons, raws)
            quarantine.write_part(target, table, TaskContext.get().partitionId(), options)
            yield pa.RecordBatch.from_pydict({"rows": [table.num_rows]})

        rows.coalesce(1).mapInArrow(write, "rows LONG").collect()

    def _good(self) -> DataFrame:
        return self.rows.filter(F.col(REASON).isNull())

    def partitions(self) -> list[str]:
        return sorted(r[0] for r in self._good().select(PARTITION).distinct().collect())

    def assign_and_write(self, plan: stages.BatchPlan, assigned_arrow: pa.Schema) -> list[stages.WriteStatus]:
        assigned_struct = from_arrow_schema(assigned_arrow)

        def assign_task(batches):
            yield from stages.assign(plan, batches, assigned_arrow)

        # rows are already shuffled by shard (``Shuffles.distributed``)
        assigned = self._good().mapInArrow(self.clock.timed("assign", assign_task), assigned_struct)
        writing = self.clock.timed("write", _in_task_attempt(stages.write, plan))
        by_slot = assigned.repartition(self.shuffles.write_tasks, routed(F.col(WRITE_SLOT), self.shuffles.write_routes))
        return _statuses(by_slot.mapInArrow(writing, from_arrow_schema(stages.STATUS_SCHEMA)))

    def bulk_insert(self, plan: stages.BatchPlan) -> list[stages.WriteStatus]:
        """One stage over the rows laid out for a bulk insert: each task writes new file groups.
        Rows shuffled by shard (an upsert that loads an empty table) are laid out again first."""
        writing = self.clock.timed("write", _in_task_attempt(stages.bulk_insert, plan))
        rows = self._good() if self.shuffles.bulk else self.shuffles.bulk_layout(self._good())
        rows = rows.drop(REASON, RAW, SHARD)
        return _statuses(rows.mapInArrow(writing, from_arrow_schema(stages.STATUS_SCHEMA)))

    def release(self) -> None:
        """Free the blocks of the micro-batch now, rather than when the JVM collects it."""
        self.rows._jdf.queryExecution().analyzed().rdd().unpersist(False)


def _statuses(written: DataFrame) -> list[stages.WriteStatus]:
    """The write statuses the tasks answered: one small row per file group comes back to the driver."""
    return [stages.WriteStatus.from_row(row.asDict()) for row in written.collect()]
