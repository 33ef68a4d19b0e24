"""A micro-batch written by Spark's executors: the stage functions in Spark's tasks, rows handed on through files.

The prepare tasks read and prepare the rows and hand them on (``writer.exchange``); the assign stage
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

import ctypes
import enum
import logging
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from laketide.index.columns import PARTITION, QUARANTINE_FIELDS, RAW, REASON, ROW, SHARD, SOURCE, WRITE_SLOT
from laketide.spark.stage_clock import StageClock
from laketide.table.schema import RECORD_KEY
from laketide.writer import bulk_stage, quarantine, ranges, stages
from laketide.writer.exchange import HANDOFF_FIELDS, Exchange, Handoff
from laketide.writer.prepare import Tally
from laketide.writer.slots import split_by

log = logging.getLogger(__name__)

# a prepare task's answer: its partition; where its good rows, their routing columns and its bad rows
# went; its counts, a sample of its good rows' range keys (a bulk insert's cut points) and their partitions
PREPARED_SCHEMA = pa.schema(
    [
        pa.field("task", pa.int32()),
        *HANDOFF_FIELDS,
        pa.field("routing_path", pa.string()),
        pa.field("routing_dests", pa.list_(pa.int32())),
        pa.field("bad_path", pa.string()),
        pa.field("rows", pa.int64()),
        pa.field("bad", pa.int64()),
        pa.field("sample", pa.list_(pa.string())),
        pa.field("sample_weight", pa.float64()),
        pa.field("partitions", pa.list_(pa.string())),
        pa.field("tally", pa.string()),
    ]
)
PREPARED_STRUCT = from_arrow_schema(PREPARED_SCHEMA)
# the destination of rows that are not cut (a prepare task's rows kept whole, its bad rows)
WHOLE = 0
# a routing row's ``ROW`` is its prepare task's partition shifted by this, plus its row in that task's good rows
TASK_SHIFT = 40


class Layout(enum.Enum):
    """How a prepare task hands its good rows on (see the module's docstring)."""

    ROUTING = "routing"  # kept whole, their routing columns by index shard: an upsert through an exchange on disk
    SHARDS = "shards"  # by index shard: an upsert through an object store
    WHOLE = "whole"  # kept whole: a bulk insert, its rows taken by key range later


def _file_name(kind: str, n: int) -> str:
    """The file this task attempt writes for its ``n`` (a prepare task's partition, an assign task's
    shard): an attempt's files are never another's."""
    from pyspark import TaskContext

    task = TaskContext.get()
    return f"{kind}-{n}-{task.stageId()}-{task.partitionId()}-{task.taskAttemptId()}.arrow"


def _write_token(slot: int) -> str:
    """The write token of this task attempt's files for write slot ``slot``."""
    from pyspark import TaskContext

    from laketide.table.files import write_token

    task = TaskContext.get()
    return write_token(slot, task.stageId(), task.taskAttemptId())


def _good(rows: pa.Table) -> pa.Table:
    """The rows that do not go to quarantine, without the columns that say why."""
    if rows.column(REASON).null_count < rows.num_rows:
        rows = rows.filter(pc.is_null(rows[REASON]))
    return rows.drop_columns(QUARANTINE_FIELDS)


def _bad(rows: pa.Table) -> pa.Table:
    """The rows that go to quarantine: why, the row as it came, and where it came from."""
    bad = rows.filter(pc.is_valid(rows[REASON]))
    return pa.table([bad[c].cast(pa.string()) for c in (REASON, RAW, SOURCE)], names=["reason", "raw", "source"])


def _routing(good: pa.Table, ordering_field: str | None, task: int, first: int) -> pa.Table:
    """``stages.routing_columns`` of a prepare task's good rows from its ``first``, each ``ROW`` naming the task too."""
    routing = stages.routing_columns(good, ordering_field)
    rows = np.arange(first, first + good.num_rows, dtype=np.int64) + (task << TASK_SHIFT)
    return routing.set_column(routing.schema.get_field_index(ROW), ROW, pa.array(rows))


def hand_on_prepared(
    prepared: Iterator[pa.Table],
    exchange: Exchange,
    layout: Layout,
    global_keys: bool,
    ordering_field: str | None,
    tally: Tally | None = None,
) -> dict:
    """A prepare task's rows handed on as ``layout`` says, its bad rows to a file of their own. Answers
    a ``PREPARED_SCHEMA`` row, with ``tally`` (what the task set aside, filled as ``prepared`` is read). The sample is
    drawn whatever the layout: an upsert the plan finds to be
    into an empty table is bulk inserted too."""
    from pyspark import TaskContext

    task = TaskContext.get().partitionId()
    counts, bad, keys, partitions = [0, 0, 0], [], [], set()  # rows, bad rows, good rows
    rows_out, routing_out = exchange.writer(_file_name("prepare", task)), exchange.writer(_file_name("routing", task))
    try:
        for rows in prepared:
            good = _good(rows)
            if good.num_rows < rows.num_rows:
                bad.append(_bad(rows))
            if layout is Layout.ROUTING:
                for shard, part in split_by(_routing(good, ordering_field, task, counts[2]), good[SHARD].to_numpy()):
                    routing_out.put(shard, part)
            for dest, part in split_by(good, good[SHARD].to_numpy()) if layout is Layout.SHARDS else [(WHOLE, good)]:
                rows_out.put(dest, part)
            counts[0] += rows.num_rows
            counts[1] += rows.num_rows - good.num_rows
            counts[2] += good.num_rows
            keys.append(good.select([RECORD_KEY, PARTITION]))
            partitions.update(pc.unique(good[PARTITION]).to_pylist())
    finally:
        handoff, routing = rows_out.close(), routing_out.close()
    bad_handoff = exchange.put(_file_name("bad", task), [(WHOLE, pa.concat_tables(bad))]) if bad else None
    sample, weight = ranges.sample(pa.concat_tables(keys), global_keys, seed=task) if keys else ([], 0.0)
    return {
        "task": task,
        **(handoff or Handoff("", ())).to_row(),
        "routing_path": routing.path if routing else "",
        "routing_dests": list(routing.dests) if routing else [],
        "bad_path": bad_handoff.path if bad_handoff else "",
        "rows": counts[0],
        "bad": counts[1],
        "sample": sample,
        "sample_weight": weight,
        "partitions": sorted(partitions),
        "tally": (tally or Tally()).to_json(),
    }


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
        clock: StageClock,
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
            lambda slot: (row for batch in fn(slot, _write_token(slot)) for row in batch.to_pylist()),
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

    def assign_and_write(self, plan: stages.BatchPlan, assigned_arrow: pa.Schema) -> list[stages.WriteStatus]:
        if self.layout is Layout.ROUTING:
            return self._routed_and_written(plan, assigned_arrow)
        exchange, by_shard = self.exchange, self._by_shard()

        def assign(shard: int) -> Handoff | None:
            rows = exchange.take(by_shard, shard)
            return (
                None
                if rows is None
                else exchange.put(_file_name("assign", shard), stages.assign(plan, rows, assigned_arrow))
            )

        assigned = self._handoffs(self.shards, "assign", assign)

        def write(slot: int, token: str) -> Iterator[pa.RecordBatch]:
            rows = exchange.take(assigned, slot)
            return iter(()) if rows is None else stages.write(plan, iter(rows.to_batches()), slot, token)

        return self._written(write)

    def _routed_and_written(self, plan: stages.BatchPlan, assigned_arrow: pa.Schema) -> list[stages.WriteStatus]:
        """The assign tasks route their shard's routing columns and hand the routing on by write slot;
        each write task takes its slot's rows from the prepare tasks' files, in file-group order."""
        exchange, routing, prepared, firsts = self.exchange, self.routing, self.prepared, self.firsts

        def assign(shard: int) -> Handoff | None:
            rows = exchange.take(routing, shard)
            if rows is None:
                return None
            routed = stages.route(plan, rows)
            return exchange.put(_file_name("assign", shard), split_by(routed, routed[WRITE_SLOT].to_numpy()))

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
            rows = stages.slot_rows(pa.concat_tables(whole), routed, assigned_arrow)
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
        ordering_field = plan.assign.ordering_field
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
            order = bulk_stage.bulk_order(rows, ordering_field, global_keys)
            return bulk_stage.bulk_insert(plan, bulk_stage.in_order(rows, order), task, token, len(order))

        return self._written(insert_sorted)

    def _cut(self, kind: str, stage: str, split: Callable[[pa.Table], list[tuple[int, pa.Table]]]) -> list[Handoff]:
        """Each prepare task's file read whole and cut into (destination, rows) by ``split``, one file a
        task: rows kept whole that the next stage takes by shard or by key range."""
        exchange, prepared = self.exchange, self.prepared

        def cut(n: int) -> Handoff | None:
            rows = exchange.take([prepared[n]], None)
            return None if rows is None else exchange.put(_file_name(kind, n), split(rows))

        return self._handoffs(len(prepared), stage, cut)

    def release(self) -> None:
        """Delete the micro-batch's exchange files now that it ended."""
        self.exchange.delete()


def give_back_memory() -> None:
    """Return the C heap's free pages to the system: after each shard or write slot a task runs, and at the end
    of a prepare task. A Python worker outlives its tasks and its Arrow memory comes from the C library's malloc
    (``session.py``), which keeps what is freed for reuse, fragmented: after a 1M-row load, its two write tasks'
    workers held 0.43 GB each, freed but not returned, through every micro-batch the driver wrote after it; and a
    write slot began with 200 to 350 MB held by the prepare task and the slot before it, for none of its own
    Arrow buffers (the worker's peak went 370 to 280 MB). Where the C library has no ``malloc_trim`` (not glibc),
    nothing."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def warm_workers(spark: SparkSession) -> None:
    """Start a Python worker on every core, import the stage modules in it and run Arrow's parquet, IPC and
    compute code once, so that the first micro-batch on Spark's tasks does not pay for it (a 1M-row load on
    ``local[2]``: 2.4 s against 3.3; a fresh worker's first prepare of half of it 0.35 s against 0.56
    once warmed). Run at the job's start beside the query's; a failure only costs the first micro-batch that
    time again. Spark keeps an idle worker about a minute."""
    context = spark.sparkContext
    cores = max(1, context.defaultParallelism)
    try:
        context.parallelize(range(cores), cores).mapPartitions(_warmed).collect()
    except Exception:
        log.warning(
            "the Python workers of Spark's tasks could not be started ahead of the first micro-batch", exc_info=True
        )


def _warmed(numbers: Iterator[int]) -> Iterator[int]:
    """The stage modules imported, and a small table taken through what a micro-batch does to its rows."""
    import io

    import pyarrow.parquet as pq

    from laketide.index.hashing import hash64
    from laketide.writer import bulk_stage, exchange, landing, prepare  # noqa: F401

    n = 10_000
    rows = pa.table(
        {
            "n": np.arange(n),
            "key": pa.array(np.arange(n).astype(str)),
            "x": np.linspace(0, 1, n),
            "at": pa.array(np.arange(n), pa.timestamp("us", "UTC")),
        }
    )
    parquet = io.BytesIO()
    pq.write_table(rows, parquet, compression="zstd")
    parquet.seek(0)
    rows = pa.Table.from_batches(list(pq.ParquetFile(parquet).iter_batches()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, rows.schema) as ipc:
        ipc.write_table(rows)
    rows = pa.ipc.open_file(sink.getvalue()).read_all()
    hash64(rows["key"])
    split_by(rows.sort_by([("key", "ascending"), ("x", "descending"), ("n", "descending")]), rows["n"].to_numpy() % 4)
    pc.unique(rows["key"])
    yield from numbers
