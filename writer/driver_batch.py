"""A micro-batch the driver writes itself: one Arrow table, the stage functions in threads, no Spark stage.

Every Spark stage costs its scheduling, a shuffle and a round trip through
the Python workers, however small the micro-batch: a 5,000-row micro-batch
took about a second that way, and a 100,000-row one spent most of its time
there. A micro-batch whose input is small (``write.driver_batch_bytes``) is
collected once as Arrow, prepared, and run through the same stage functions
(``writer.stages``) in a thread pool. Arrow and parquet release the GIL, so
the threads use the driver's cores. The stages, the markers and the write
statuses are the same as on the executors; only who runs them differs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.columns import PARTITION, QUARANTINE_FIELDS, RAW, REASON, SHARD, SOURCE, WRITE_SLOT
from laketide.table.format.encoding import records_dictionary_columns
from laketide.table.format.files import write_token
from laketide.writer import bulk_stage, quarantine, ranges, stages
from laketide.writer.changes.tally import Tally
from laketide.writer.prepare import PrepareSpec, batch_arrival, prepare_in_order, set_aside, with_earlier_values
from laketide.writer.slots import present, split_lazily

# the rows a micro-batch's dictionary encodings are decided from, once for all its files: a quarter of a
# file's sample (``encoding.DICTIONARY_SAMPLE_ROWS``), since the decision is on the batch's path (9 ms against 2.5)
DICTIONARY_BATCH_SAMPLE_ROWS = 4096
# a part of a micro-batch for one worker: its rows, or a function that takes them
Part = pa.Table | Callable[[], pa.Table]
# wraps a stage function so that its seconds are charged to a stage of the clock
Timed = Callable[[str, Callable[[Iterator], Iterator]], Callable[[Iterator], Iterator]]
T = TypeVar("T")
R = TypeVar("R")


class DriverPool:
    """The driver's worker threads: one pool per writer, made once and used by every driver-written
    micro-batch (a pool per stage call would start and join its threads each time).

    Only the micro-batch thread submits work, one stage at a time; the workers share nothing but
    the rows they are handed and the stage clock (``timed``), which is thread-safe."""

    def __init__(self, threads: int):
        self.threads = max(1, threads)
        self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="laketide-driver")

    @classmethod
    def for_writes(cls, write) -> DriverPool:
        """The pool of ``write`` (the job's ``[write]``): the driver's cores, or fewer tasks (``write.parallelism``)."""
        return cls(min(write.parallelism, os.cpu_count() or 1))

    def run(
        self, timed: Timed, stage: str, run_part: Callable[[int, Iterator], Iterator], parts: list[tuple[int, Part]]
    ) -> list:
        """``run_part(slot, batches)`` over each (slot, rows), its seconds charged to ``stage``; what they yield, in
        slot order. Rows given as a function (``slots.split_lazily``) are taken in the worker, as part of the stage."""
        return self.start(timed, stage, run_part, parts)()

    def start(
        self, timed: Timed, stage: str, run_part: Callable[[int, Iterator], Iterator], parts: list[tuple[int, Part]]
    ) -> Callable[[], list]:
        """``run``, handed to the workers now; the function returned waits for what they yield. The
        micro-batch thread works on meanwhile, rather than wait idle."""

        def run(item: tuple[int, Part]) -> list:
            slot, part = item

            def batches() -> Iterator[pa.RecordBatch]:
                rows: pa.Table = part() if callable(part) else part
                yield from rows.to_batches()

            return list(timed(stage, lambda rows: run_part(slot, rows))(batches()))

        results = self._executor.map(run, parts)  # submits every part at once
        return lambda: [out for outs in results for out in outs]

    def map(self, timed: Timed, stage: str, work: Callable[[T], Iterator[R]], items: list[T]) -> list[R]:
        """``work(item)`` over each item in the workers, its seconds charged to ``stage``: what they yield, in order."""
        done = self._executor.map(lambda item: list(timed(stage, lambda _: work(item))(iter(()))), items)
        return [out for outs in done for out in outs]

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


class DriverBatch:
    """The prepared rows of one micro-batch, held by the driver."""

    ran_on = "driver"

    def __init__(self, prepared: pa.Table, pool: DriverPool, timed: Timed, tally: Tally | None = None):
        self.rows = prepared
        self.tally = tally or Tally()
        self._records = prepared.num_rows
        self.pool = pool
        self.threads = pool.threads
        self._timed = timed
        self._bad = (
            pc.is_valid(prepared[REASON]).to_numpy(zero_copy_only=False) if prepared.num_rows else np.zeros(0, bool)
        )

    @classmethod
    def prepare(
        cls, landed: pa.Table, spec: PrepareSpec, pool: DriverPool, timed: Timed, arrival: pa.Array | None = None
    ) -> DriverBatch:
        """Rows prepared in as many slices as threads, once their arrival order is known: ``arrival``, one
        number per row, where the reader knows it (``landing.read_landed_parquet``), else from the rows.
        Messages that are not rows (a change feed's transaction markers, heartbeats, ...) are set aside first."""
        landed, tally = set_aside(landed)
        landed = with_earlier_values(landed, spec)
        if arrival is None:
            arrival_file, arrival_row = batch_arrival(landed)
        else:
            arrival_file, arrival_row = pa.repeat(pa.scalar("", pa.string()), landed.num_rows), arrival
        step = max(1, -(-landed.num_rows // pool.threads))
        slices = [(start, landed.slice(start, step)) for start in range(0, landed.num_rows, step)] or [(0, landed)]

        def prepare_slice(start: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
            rows = pa.Table.from_batches(list(batches), landed.schema)
            yield prepare_in_order(
                rows, spec, arrival_file.slice(start, rows.num_rows), arrival_row.slice(start, rows.num_rows)
            )

        return cls(pa.concat_tables(pool.run(timed, "prepare", prepare_slice, slices)), pool, timed, tally)

    @property
    def records(self) -> int:
        return self._records

    @property
    def bad_rows(self) -> int:
        return int(self._bad.sum())

    def write_quarantine(self, instant: str, more: list[tuple[str, str]], target: str, options: dict[str, str]) -> None:
        """The rows that go to quarantine, with ``more`` (reason, raw) rows, as one parquet file under ``target``."""
        bad = self.rows.filter(pa.array(self._bad))
        reasons = pa.concat_arrays([bad[REASON].combine_chunks(), pa.array([r for r, _ in more], pa.string())])
        raws = pa.concat_arrays([bad[RAW].combine_chunks(), pa.array([r for _, r in more], pa.string())])
        sources = pa.concat_arrays([bad[SOURCE].combine_chunks(), pa.nulls(len(more), pa.string())])
        quarantine.clear(target, options)
        quarantine.write_part(target, quarantine.quarantine_rows(instant, reasons, raws, sources), options=options)

    def good(self) -> pa.Table:
        good = self.rows.filter(pa.array(~self._bad)) if self.bad_rows else self.rows
        return good.drop_columns(QUARANTINE_FIELDS)

    def release(self) -> None:
        self.rows = self.rows.slice(0, 0)

    def partitions(self) -> list[str]:
        return sorted(pc.unique(self.good()[PARTITION]).to_pylist())

    def assign_and_write(self, plan: stages.BatchPlan, assigned_schema: pa.Schema) -> list[stages.WriteStatus]:
        """The assign stage per index shard, on the rows' routing columns, then the write stage per write
        slot, on the rows it routed: each write thread takes its whole rows once, in file-group order."""
        # The driver holds the batch and about one copy of it in the write threads' parts at a time
        # (``write.driver_batch_bytes`` is sized on that).
        sample = self.rows.slice(0, DICTIONARY_BATCH_SAMPLE_ROWS)
        good = self._take_good()
        narrow = stages.routing_columns(good, plan.assign.ordering_field)
        by_shard = split_lazily(narrow, narrow[SHARD].to_numpy())
        routing_done = self.pool.start(
            self._timed, "assign", lambda shard, batches: _routing_batches(plan, batches), by_shard
        )
        write_plan = self._with_dictionary(plan, sample)  # while the workers route
        routed = routing_done()
        del by_shard, narrow, sample
        if not routed:
            return []
        routing = pa.concat_tables(routed, promote_options="default")
        del routed
        # each write worker orders its own slot's rows by file group (``_routed``), side by side
        parts = [
            (slot, partial(_routed, good, part, assigned_schema))
            for slot, part in split_lazily(routing, routing[WRITE_SLOT].to_numpy())
        ]
        return _statuses(
            self.pool.run(
                self._timed,
                "write",
                lambda slot, batches: stages.write(write_plan, batches, slot, write_token(slot)),
                parts,
            )
        )

    def _with_dictionary(self, plan: stages.BatchPlan, sample: pa.Table | None = None) -> stages.BatchPlan:
        """The plan with the columns every file of the micro-batch dictionary-encodes, decided once here
        from the first rows (``sample``, default the batch's), rather than by each write task and each new base file."""
        sample = self.rows.slice(0, DICTIONARY_BATCH_SAMPLE_ROWS) if sample is None else sample
        return dataclasses.replace(plan, dictionary=records_dictionary_columns(sample))

    def _take_good(self) -> pa.Table:
        """The good rows, which the batch no longer holds: they live as long as the caller's parts of them."""
        good = self.good()
        self.release()
        return good

    def bulk_insert(self, plan: stages.BatchPlan) -> list[stages.WriteStatus]:
        """The good rows cut into one key range per thread (``writer.ranges``), as Spark's tasks cut them; each
        thread orders its range by ``bulk_sort_keys`` and writes it, side by side with the others (sorting the
        whole batch first kept one core idle for a third of a 1M-row load): each new file group holds a
        contiguous range of keys."""
        global_keys = plan.index.global_keys
        plan = self._with_dictionary(plan)
        good = self._take_good().drop_columns([SHARD])
        cuts = ranges.cut_points([ranges.sample(good, global_keys)], self.threads, plan.assign.new_group_records)
        numbers = ranges.range_numbers(good, cuts, global_keys)
        tasks = [(task, np.flatnonzero(numbers == task)) for task in present(numbers)]
        del numbers
        written = bulk_stage.written_columns(good)

        def write_range(task_rows: tuple[int, np.ndarray]) -> Iterator[pa.RecordBatch]:
            # taken in order at once: taken a piece at a time (``bulk_stage.in_order``), the range's write took
            # twice as long, in more and smaller appends to its files
            task, at = task_rows
            ordered = written.take(pa.array(bulk_stage.bulk_order(good, plan.assign.ordering_field, global_keys, at)))
            return bulk_stage.bulk_insert(plan, iter(ordered.to_batches()), task, write_token(task), ordered.num_rows)

        return _statuses(self.pool.map(self._timed, "write", write_range, tasks))


def _routing_batches(plan: stages.BatchPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
    """``stages.route`` over one part's routing columns, as a stage function."""
    yield stages.route(plan, pa.Table.from_batches(list(batches)))


def _routed(good: pa.Table, routing: Callable[[], pa.Table], schema: pa.Schema) -> pa.Table:
    return stages.slot_rows(good, routing(), schema)


def _statuses(batches: list[pa.RecordBatch]) -> list[stages.WriteStatus]:
    rows = pa.Table.from_batches(batches, stages.STATUS_SCHEMA).to_pylist() if batches else []
    return [stages.WriteStatus.from_row(row) for row in rows]
