"""What a prepare task of Spark's hands on to the stages after it (``spark_batch``), and in what shape (``Layout``):
its good rows, their routing columns, its bad rows, and its answer to the driver (``PREPARED_SCHEMA``). The files
each task attempt writes are named by the attempt, so a retried task never mixes its files with another's.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.pandas.types import from_arrow_schema

from laketide.index.columns import PARTITION, QUARANTINE_FIELDS, RAW, REASON, ROW, SHARD, SOURCE
from laketide.table.format.schema import RECORD_KEY
from laketide.writer import ranges, stages
from laketide.writer.changes.tally import Tally
from laketide.writer.exchange import HANDOFF_FIELDS, Exchange, Handoff
from laketide.writer.slots import split_by

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


def running_task() -> TaskContext:
    """The Spark task this code runs in."""
    task = TaskContext.get()
    if task is None:
        raise RuntimeError("a stage function ran outside a Spark task")
    return task


def task_file_name(kind: str, n: int) -> str:
    """The file this task attempt writes for its ``n`` (a prepare task's partition, an assign task's
    shard): an attempt's files are never another's."""
    task = running_task()
    return f"{kind}-{n}-{task.stageId()}-{task.partitionId()}-{task.taskAttemptId()}.arrow"


def task_write_token(slot: int) -> str:
    """The write token of this task attempt's files for write slot ``slot``."""
    from laketide.table.format.files import write_token

    task = running_task()
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
    task = running_task().partitionId()
    counts, bad, keys, partitions = [0, 0, 0], [], [], set()  # rows, bad rows, good rows
    rows_out, routing_out = (
        exchange.writer(task_file_name("prepare", task)),
        exchange.writer(task_file_name("routing", task)),
    )
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
    bad_handoff = exchange.put(task_file_name("bad", task), [(WHOLE, pa.concat_tables(bad))]) if bad else None
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
