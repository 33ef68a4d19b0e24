"""A micro-batch written by Spark's executors: every stage of the tasks path, the stage functions in Spark's tasks,
rows handed on through files.

The prepare tasks (``prepare_records``, ``prepare_pieces``) read and prepare the rows and hand them on
(``spark.handoff``, ``writer.exchange``); the assign stage
routes each index shard's rows; the write stage writes each write slot's. A stage runs at most one task
per core, each taking several shards or slots. Spark schedules the tasks and retries them; only their
answers come back to the driver: where each wrote its rows, the prepared rows' counts and key samples,
and one small write status per file.

How rows travel depends on where the exchange is (``Layout``). On a disk the tasks memory-map, the
prepared rows stay where the prepare task wrote them: only their routing columns go to the assign
tasks, by shard, and each write task takes its rows straight from every prepare task's file, as the
driver's write threads take theirs from the batch (``writer.driver_batch``). A micro-batch the job
expects to bulk insert (the first of a new table) hands on no routing columns: each write task takes its
key range (``writer.ranges``) from the prepare tasks' files the same way. On an object store, where each
task reading every file would download the micro-batch once per write task, whole rows go to the assign
task of their shard and from there to the write task of their slot, and a bulk insert's rows are cut by
key range in a stage of their own. Rows kept whole for a bulk insert the plan did not make (another
writer filled the table first) are cut by shard in a stage, then travel as on an object store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from laketide.index.columns import ROW, SHARD, WRITE_SLOT
from laketide.spark.handoff import (
    PREPARED_SCHEMA,
    PREPARED_STRUCT,
    TASK_SHIFT,
    WHOLE,
    Layout,
    hand_on_prepared,
    running_task,
    task_file_name,
    task_write_token,
)
from laketide.spark.workers import give_back_memory
from laketide.writer import bulk_stage, quarantine, ranges, stages
from laketide.writer.clock import StepClock
from laketide.writer.exchange import Exchange, Handoff
from laketide.writer.landing import Piece, read_piece
from laketide.writer.prepare import (
    ArrivalCounter,
    PrepareSpec,
    Tally,
    prepare,
    prepare_in_order,
    set_aside,
    with_earlier_values,
)
from laketide.writer.slots import split_by

log = logging.getLogger(__name__)
# what a prepare task over Spark's rows hands on at a time
PREPARED_CHUNK_BYTES = 16 * 2**20


def prepare_records(
    df: DataFrame,
    spec: PrepareSpec,
    exchange: Exchange,
    layout: Layout,
    clock: StepClock,
    decode: Callable[[pa.Table], tuple[pa.Table, Tally]] | None = None,
) -> list[dict]:
    """The prepare stage over Spark's rows of ``df``: each task prepares its rows and hands them on as ``layout``
    says; the tasks' answers (``PREPARED_SCHEMA``). ``decode``: what turns Spark's rows (Kafka records of a change
    feed) into the micro-batch's rows."""

    def prepare_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        arrival, tally = ArrivalCounter(running_task().partitionId() << 40), Tally()

        def rows_of(tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
            for table in tables:
                if decode is not None:
                    table, decoded = decode(table)
                    tally.add(decoded)
                rows, seen = set_aside(table)
                tally.add(seen)
                yield rows

        def rows_of_records() -> Iterator[pa.Table]:
            if spec.placeholder is None:
                yield from rows_of(pa.Table.from_batches([batch]) for batch in batches)
                return
            # a change feed: the task's records are held whole, so that a value an event did not send
            # is filled from an earlier event of its key in any Arrow batch of the task (one Kafka split
            # holds every event of its keys: Debezium keys records by the primary key)
            held = list(batches)
            if held:
                yield from (with_earlier_values(rows, spec) for rows in rows_of([pa.Table.from_batches(held)]))

        prepared = (prepare(rows, spec, arrival) for rows in rows_of_records())
        answer = hand_on_prepared(_chunked(prepared), exchange, layout, spec.global_keys, spec.ordering_field, tally)
        give_back_memory()
        yield pa.RecordBatch.from_pylist([answer], schema=PREPARED_SCHEMA)

    return [row.asDict() for row in df.mapInArrow(clock.timed("prepare", prepare_task), PREPARED_STRUCT).collect()]


def prepare_pieces(
    spark: SparkSession,
    pieces: list[Piece],
    spec: PrepareSpec,
    declared: pa.Schema | None,
    exchange: Exchange,
    layout: Layout,
    clock: StepClock,
    options: dict[str, str],
) -> list[dict]:
    """The prepare stage over ``pieces`` of parquet landing files (``landing.parquet_pieces``), read straight into
    Arrow, one piece a task, which skips Spark's reader and its conversion of every value. A Python RDD of the
    pieces, as the later stages are (``SparkBatch._stage``): they share its workers."""

    def prepare_task(listed: Iterator[Piece]) -> Iterator[dict]:
        read = (read_piece(piece, declared, options) for piece in listed)
        prepared = (
            prepare_in_order(rows, spec, pa.repeat(pa.scalar("", pa.string()), len(arrival)), arrival)
            for rows, arrival in read
        )
        answer = hand_on_prepared(prepared, exchange, layout, spec.global_keys, spec.ordering_field)
        give_back_memory()
        yield answer

    context = spark.sparkContext
    return context.parallelize(pieces, len(pieces)).mapPartitions(clock.timed("prepare", prepare_task)).collect()


def _chunked(prepared: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """Spark's Arrow batches are small: prepared rows are handed on about ``PREPARED_CHUNK_BYTES`` at a time, so a
    task holds about that much, and its file does not hold thousands of tiny batches."""
    held: list[pa.Table] = []
    for rows in prepared:
        held.append(rows)
        if sum(t.nbytes for t in held) >= PREPARED_CHUNK_BYTES:
            yield pa.concat_tables(held)
            held = []
    if held:
        yield pa.concat_tables(held)


class SparkBatch:
    """The prepared rows of one micro-batch, in the files of its exchange until the micro-batch ends."""

    ran_on = "tasks"

    def __init__(
        self,
        spark: SparkSession,
        prepared: list[dict],
        exchange: Exchange,
        layout: Layout,
        shards: int,
        write_tasks: int,
        clock: StepClock,
    ):
        """``prepared``: the prepare tasks' answers (``PREPARED_SCHEMA``), their good rows handed on as ``layout``
        says."""
        self.spark = spark
        self.exchange, self.layout = exchange, layout
        self.shards, self.write_tasks = shards, write_tasks
        self.clock = clock
        prepared = sorted(prepared, key=lambda r: r["task"])
        self.prepared = [Handoff.from_row(r) for r in prepared if r["path"]]
        # where each prepare task's good rows start in the prepared rows end to end (``_routed_and_written``)
        kept = [r for r in prepared if r["path"]]
        self.firsts = np.zeros(max((r["task"] for r in kept), default=0) + 1, np.int64)
        self.firsts[[r["task"] for r in kept]] = np.cumsum([0] + [r["rows"] - r["bad"] for r in kept[:-1]])
        self.routing = [Handoff(r["routing_path"], tuple(r["routing_dests"])) for r in prepared if r["routing_path"]]
        self.bad = [Handoff(r["bad_path"], (WHOLE,)) for r in prepared if r["bad_path"]]
        self.records, self.bad_rows = sum(r["rows"] for r in prepared), sum(r["bad"] for r in prepared)
        self.tally = Tally()
        for r in prepared:
            self.tally.add(Tally.from_json(r["tally"]))
        # every task's sample of its good rows' range keys, for a bulk insert's cut points
        self.samples = [(r["sample"], r["sample_weight"]) for r in prepared if r["sample"]]
        self._partitions = sorted({p for r in prepared for p in r["partitions"]})

    def _stage(self, n: int, name: str, fn: Callable[[int], Iterable]) -> list:
        """What ``fn(k)`` yields for each ``k`` below ``n``, run in Spark's tasks, timed as stage ``name``.

        At most one task per core: a task costs about 0.05 s to schedule and start, so 4 shards in 4 tasks
        on 2 cores took 0.1 s more than in 2 tasks of 2 shards each. A Python RDD rather than ``mapInArrow``
        over ``spark.range``: a stage of 2 tasks took 0.09 s against 0.16 s, only small answers come back,
        and Python objects need no schema."""
        context = self.spark.sparkContext

        def run(numbers: Iterator[int]) -> Iterator:
            for k in numbers:
                yield from fn(k)
                give_back_memory()

        return (
            context.parallelize(range(n), max(1, min(n, context.defaultParallelism)))
            .mapPartitions(self.clock.timed(name, run))
            .collect()
        )

    def _handoffs(self, n: int, name: str, fn: Callable[[int], Handoff | None]) -> list[Handoff]:
        """A stage whose ``fn(k)`` hands rows on, for each ``k`` below ``n``; where they went."""
        return self._stage(n, name, lambda k: [h for h in [fn(k)] if h is not None])

    def _written(self, fn: Callable[[int, str], Iterator[pa.RecordBatch]]) -> list[stages.WriteStatus]:
        """The write stage: ``fn(slot, token)`` writes each write slot; the statuses it answered."""
        rows = self._stage(
            self.write_tasks,
            "write",
            lambda slot: (row for batch in fn(slot, task_write_token(slot)) for row in batch.to_pylist()),
        )
        return [stages.WriteStatus.from_row(row) for row in rows]

    def write_quarantine(self, instant: str, more: list[tuple[str, str]], target: str, options: dict[str, str]) -> None:
        """The rows that go to quarantine, with ``more`` (reason, raw) rows, written by one task as one
        parquet file under ``target``, in the schema the driver path writes (``writer.quarantine``)."""
        exchange, bad = self.exchange, self.bad
        quarantine.clear(target, options)

        def write(_: int) -> list[int]:
            rows = exchange.take(bad, WHOLE)
            reasons = [rows["reason"].combine_chunks()] if rows is not None else []
            raws = [rows["raw"].combine_chunks()] if rows is not None else []
            sources = [rows["source"].combine_chunks()] if rows is not None else []
            reasons.append(pa.array([r for r, _ in more], pa.string()))
            raws.append(pa.array([r for _, r in more], pa.string()))
            sources.append(pa.nulls(len(more), pa.string()))
            table = quarantine.quarantine_rows(
                instant, pa.concat_arrays(reasons), pa.concat_arrays(raws), pa.concat_arrays(sources)
            )
            quarantine.write_part(target, table, 0, options)
            return [table.num_rows]

        self._stage(1, "write", write)

    def partitions(self) -> list[str]:
        return self._partitions

    def assign_and_write(self, plan: stages.BatchPlan, assigned_schema: pa.Schema) -> list[stages.WriteStatus]:
        if self.layout is Layout.ROUTING:
            return self._routed_and_written(plan, assigned_schema)
        exchange, by_shard = self.exchange, self._by_shard()

        def assign(shard: int) -> Handoff | None:
            rows = exchange.take(by_shard, shard)
            return (
                None
                if rows is None
                else exchange.put(task_file_name("assign", shard), stages.assign(plan, rows, assigned_schema))
            )

        assigned = self._handoffs(self.shards, "assign", assign)

        def write(slot: int, token: str) -> Iterator[pa.RecordBatch]:
            rows = exchange.take(assigned, slot)
            return iter(()) if rows is None else stages.write(plan, iter(rows.to_batches()), slot, token)

        return self._written(write)

    def _routed_and_written(self, plan: stages.BatchPlan, assigned_schema: pa.Schema) -> list[stages.WriteStatus]:
        """The assign tasks route their shard's routing columns and hand the routing on by write slot;
        each write task takes its slot's rows from the prepare tasks' files, in file-group order."""
        exchange, routing, prepared, firsts = self.exchange, self.routing, self.prepared, self.firsts

        def assign(shard: int) -> Handoff | None:
            rows = exchange.take(routing, shard)
            if rows is None:
                return None
            routed = stages.route(plan, rows)
            return exchange.put(task_file_name("assign", shard), split_by(routed, routed[WRITE_SLOT].to_numpy()))

        assigned = self._handoffs(self.shards, "assign", assign)

        def write(slot: int, token: str) -> Iterator[pa.RecordBatch]:
            routed = exchange.take(assigned, slot)
            if routed is None:
                return iter(())
            # the prepare tasks' rows end to end, memory-mapped: a routing row's ``ROW`` names its task and row
            whole = exchange.tables(prepared, WHOLE)
            at = routed[ROW].to_numpy()
            routed = routed.set_column(
                routed.schema.get_field_index(ROW),
                ROW,
                pa.array(firsts[at >> TASK_SHIFT] + (at & ((1 << TASK_SHIFT) - 1))),
            )
            rows = stages.slot_rows(pa.concat_tables(whole), routed, assigned_schema)
            return stages.write(plan, iter(rows.to_batches()), slot, token)

        return self._written(write)

    def _by_shard(self) -> list[Handoff]:
        """The prepared rows by index shard: as the prepare tasks handed them on, or, when they were kept
        whole for a bulk insert that the plan did not make, cut by shard now."""
        if self.layout is Layout.SHARDS:
            return self.prepared
        return self._cut("shards", "assign", lambda rows: split_by(rows, rows[SHARD].to_numpy()))

    def bulk_insert(self, plan: stages.BatchPlan) -> list[stages.WriteStatus]:
        """Each write task takes one key range of the micro-batch (``writer.ranges``) and writes it, sorted
        by ``bulk_sort_keys``, into new file groups: each file group holds a contiguous range of keys."""
        global_keys = plan.index.global_keys
        cuts = ranges.cut_points(self.samples, self.write_tasks, plan.assign.new_group_records)
        exchange, prepared = self.exchange, self.prepared
        by_range = None
        if not exchange.on_disk:
            by_range = self._cut(
                "ranges", "write", lambda rows: ranges.split_unsorted(rows.drop_columns([SHARD]), cuts, global_keys)
            )
        # each prepare task's file's range numbers, made once in a write task for all the ranges it writes
        numbered: dict[int, np.ndarray] = {}

        def mine(task: int) -> pa.Table | None:
            """The task's range of rows, in no order: from the tasks that cut them by range, or, from files on a
            disk, out of every prepare task's file in turn, memory-mapped, its rows of the range copied and
            the file let go before the next is mapped. A take touches about every page of the file it takes
            from, which the process then holds: mapped all at once, the whole micro-batch's files were held
            beside the copy (a 1M-row load's write tasks held 236 MB of them each)."""
            if by_range is not None:
                return exchange.take(by_range, task)
            parts = []
            for n, handoff in enumerate(prepared):
                rows = exchange.take([handoff], WHOLE)
                if rows is None:
                    continue
                if n not in numbered:
                    numbered[n] = ranges.range_numbers(rows, cuts, global_keys)
                at = np.flatnonzero(numbered[n] == task)
                if len(at):
                    parts.append(rows.take(pa.array(at)).drop_columns([SHARD]))
            return pa.concat_tables(parts) if parts else None

        def insert_sorted(task: int, token: str) -> Iterator[pa.RecordBatch]:
            # a task's range comes from every prepare task: ordered once, here, and copied in order a piece at a time
            rows = mine(task)
            if rows is None:
                return iter(())
            return bulk_stage.bulk_insert_range(plan, rows, task, token)

        return self._written(insert_sorted)

    def _cut(self, kind: str, stage: str, split: Callable[[pa.Table], list[tuple[int, pa.Table]]]) -> list[Handoff]:
        """Each prepare task's file read whole and cut into (destination, rows) by ``split``, one file a
        task: rows kept whole that the next stage takes by shard or by key range."""
        exchange, prepared = self.exchange, self.prepared

        def cut(n: int) -> Handoff | None:
            rows = exchange.take([prepared[n]], None)
            return None if rows is None else exchange.put(task_file_name(kind, n), split(rows))

        return self._handoffs(len(prepared), stage, cut)

    def release(self) -> None:
        """Delete the micro-batch's exchange files now that it ended."""
        self.exchange.delete()
