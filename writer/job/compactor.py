"""Compaction of a merge-on-read table under the writer's lease: schedule a plan, then execute it.

Scheduling runs between micro-batches (the job calls it after a commit, in
the micro-batch thread), so no deltacommit is in flight when a plan is made.
Executing merges each planned slice (base file and logs, under the table's
merge mode) into a new base file at the compaction instant; it runs in the
table-services thread beside ingestion. Deltacommits go on writing logs on
the planned slices meanwhile; the last step, between two micro-batches
(``finish_lock``), copies those logs onto the new slice and completes the
instant as a ``commit``, so no reader ever misses an update. A compaction cut
short is executed again from its plan (files of the earlier attempt are
deleted by their markers at commit), so recovery finishes it. A plan whose
input files are gone (a restore or a rollback took them) is never run: it is
rolled back, with a warning that names it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from laketide.config import CompactionSection, WriteSection
from laketide.coordinator import Coordinator, LeaseLost
from laketide.coordinator.actions import TimelineAction
from laketide.index.bloom import BloomSpec
from laketide.index.key_order import by_key
from laketide.table.format.commit import BATCHES_KEY, NULL_COMMIT, WriteStat
from laketide.table.format.compaction import (
    CompactionOperation,
    CompactionPlan,
    carried_name,
    compaction_plan,
    groups_under_compaction,
    late_logs,
    pending_compactions,
    plan_for,
    slices_to_compact,
)
from laketide.table.format.files import BaseFile, write_token
from laketide.table.format.instant import COMMIT, COMPACTION, Instant
from laketide.table.format.markers import CREATE, WriteMarkers
from laketide.table.format.schema import (
    avro_schema_json,
    with_meta_schema,
)
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSystemView
from laketide.table.reading.log_merge import MergeRule
from laketide.table.reading.slice_reader import merge_slice_batches
from laketide.writer.files.base_file import BaseFileWriter
from laketide.writer.files.bucket_writer import conform, without_file_name
from laketide.writer.planning import average_record_size, bloom_spec

log = logging.getLogger("laketide.compaction")


@dataclass
class CompactionResult:
    instant: str
    file_groups: int
    records: int = 0
    seconds: float = 0.0


class Compactor:
    def __init__(
        self,
        coordinator: Coordinator,
        settings: CompactionSection,
        write: WriteSection | None = None,
        view: Callable[[Timeline], FileSystemView] | None = None,
        on_step: Callable[[str], None] | None = None,
        finish_lock: threading.RLock | None = None,
        yield_to: threading.RLock | None = None,
    ):
        """``on_step(point)`` is called before each base file is closed ("compaction-closing"), when the base
        files are written ("compaction-written") and when the late logs are carried over ("compaction-carried");
        crash tests kill or pause the process there. ``finish_lock``: the job's batch lock, held while a
        micro-batch runs; the last step of a compaction takes it. Without a job (``laketide compact``) it is
        one of its own, which nothing else holds. ``yield_to``: held while the micro-batch a slice waits for runs
        (``_yield_to_batch``): ``finish_lock``, or a job of a whole database's, held over all its tables' writes."""
        self.coordinator = coordinator
        self._on_step = on_step or (lambda point: None)
        self.table = coordinator.table
        self.settings = settings
        self.write = write or WriteSection()  # how new base files size their bloom filters
        self.steps = TimelineAction(coordinator, COMPACTION)
        self._view = view or self.table.file_system_view
        self.finish_lock = finish_lock or threading.RLock()
        self._yield_to = yield_to or self.finish_lock

    def schedule(self) -> str | None:
        """Plan a compaction of the slices past the thresholds; ``None`` when none is due."""
        coordinator = self.coordinator
        coordinator.hold()
        timeline = self.table.timeline
        busy = groups_under_compaction(timeline)
        due = slices_to_compact(
            self._view(timeline).latest_slices(), self.settings.delta_commits, self.settings.max_log_bytes, busy
        )
        if not due:
            return None
        plan = plan_for(due)
        instant = self.steps.new_time(timeline)
        self.steps.request(instant, plan.to_bytes())
        log.info("compaction %s scheduled: %d file groups", instant, len(plan.operations))
        return instant

    def run(self, progress: Callable[[int, int], None] | None = None) -> list[CompactionResult]:
        """Execute every pending compaction whose inputs are all there, oldest first; roll back the others."""
        timeline = self.table.timeline
        results = []
        for instant in pending_compactions(timeline):
            plan = compaction_plan(timeline, instant)
            missing = self._missing_inputs(plan)
            if missing:
                log.warning(
                    "compaction %s cannot run: %d of the files it compacts are gone (%s); rolling it back",
                    instant.timestamp,
                    len(missing),
                    ", ".join(missing[:3]),
                )
                self.coordinator.rollback(instant.timestamp)
                continue
            results.append(self._execute(instant, plan, progress))
        return results

    def _missing_inputs(self, plan: CompactionPlan) -> list[str]:
        io = self.table.io
        inputs = [f.path for op in plan.operations for f in op.file_slice().files]
        return [path for path in inputs if not io.is_file(path)]

    def _execute(
        self, instant: Instant, plan: CompactionPlan, progress: Callable[[int, int], None] | None
    ) -> CompactionResult:
        coordinator, io = self.coordinator, self.table.io
        coordinator.hold()
        started = time.monotonic()
        self.steps.start(instant.timestamp, plan.to_bytes(), once=True)
        timeline = self.table.timeline
        schema = self.table.schema(timeline)
        rule = self.table.merge_rule
        visible = self._view(timeline).visibility()
        bloom = bloom_spec(self.write, average_record_size(timeline))
        markers = WriteMarkers(io, instant.timestamp)
        stats, records = [], 0
        for done, op in enumerate(plan.operations, 1):
            self._yield_to_batch()
            coordinator.hold()
            stat = self._compact(op, instant.timestamp, schema, rule, visible, markers, bloom)
            stats.append(stat)
            records += stat.num_writes
            if progress is not None:
                progress(done, len(plan.operations))
        self._on_step("compaction-written")
        with self.finish_lock:
            timeline = self.table.timeline
            stats += self._carry_late_logs(plan, instant.timestamp, timeline, markers)
            self._on_step("compaction-carried")
            # the streaming batches committed so far travel with every commit, so archival never loses them
            extra = {BATCHES_KEY: json.dumps(coordinator.committed_batches(timeline))}
            coordinator.commit(
                instant.timestamp, stats, extra, action=COMMIT, operation="COMPACT", pending_action=COMPACTION
            )
        result = CompactionResult(instant.timestamp, len(stats), records, time.monotonic() - started)
        log.info(
            "compaction %s: %d file groups, %d records, %.2f s",
            result.instant,
            result.file_groups,
            result.records,
            result.seconds,
        )
        return result

    def _yield_to_batch(self) -> None:
        """Wait, at most ``compaction.yield_seconds``, for the micro-batch being written to finish (the job
        holds ``yield_to`` while it writes one): on a driver of two cores, a slice compacted beside a
        micro-batch made it a fifth slower. In a job of a whole database that is the whole micro-batch, not its
        own table's write, a small part of it. The wait is bounded, so back-to-back micro-batches delay a
        compaction but never stop it. Asked before each slice only: waiting between a slice's steps too made
        compactions under a steady stream three times as long."""
        if self.settings.yield_seconds > 0 and self._yield_to.acquire(timeout=self.settings.yield_seconds):
            self._yield_to.release()

    def _carry_late_logs(
        self, plan: CompactionPlan, instant_time: str, timeline: Timeline, markers: WriteMarkers
    ) -> list[WriteStat]:
        """Copy the logs committed on planned slices since the plan onto the slices the compaction starts. Version 8
        needs none: those logs' deltacommits completed after the compaction was requested, which puts them on the
        new slices (``FileSystemView._slice``)."""
        if self.table.config.version >= 8:
            return []
        io = self.table.io
        current = {(s.partition, s.file_id): s for s in self._view(timeline).latest_slices()}
        stats = []
        for op in plan.operations:
            for version, log_file in enumerate(late_logs(op, current.get((op.partition, op.file_id))), 1):
                copy = carried_name(log_file, instant_time, version)
                markers.create(copy.path, CREATE)
                data = io.read_bytes(log_file.path)
                io.write_bytes(copy.path, data)
                stats.append(
                    WriteStat(
                        file_id=op.file_id,
                        path=copy.path,
                        partition_path=op.partition,
                        prev_commit=instant_time,
                        total_write_bytes=len(data),
                        file_size_in_bytes=len(data),
                        base_file="",
                        log_files=[copy.name],
                        log_version=version,
                        log_offset=0,
                    )
                )
        if stats:
            log.info(
                "compaction %s: %d logs written since its plan carried over to the new slices", instant_time, len(stats)
            )
        return stats

    def _compact(
        self,
        op: CompactionOperation,
        instant_time: str,
        schema: pa.Schema,
        rule: MergeRule,
        visible,
        markers: WriteMarkers,
        bloom: BloomSpec,
    ) -> WriteStat:
        """One slice merged into a new base file, a key range at a time (bounded memory): records keep
        their commit time and sequence number."""
        io = self.table.io
        # each attempt its own name: the files of an attempt cut short are deleted by their markers at commit
        new_file = BaseFile(op.partition, op.file_id, write_token(0, 0, time.time_ns() // 1000 % 10**12), instant_time)
        markers.create(new_file.path, CREATE)
        full = with_meta_schema(schema)
        writer = BaseFileWriter(
            io,
            new_file.path,
            full,
            avro_schema_json(full, self.table.name),
            bloom,
            compression=self.write.parquet_compression,
        )
        try:
            # key ranges come in order; within one, kept base rows and log records are sorted together
            for rows in merge_slice_batches(io, op.file_slice(), visible, rule):
                writer.write(conform(by_key(rows), without_file_name(full), {}))
            # the file appears on an object store when it is closed: a writer paused while it merged may have lost
            # its lease meanwhile, and another may have completed this compaction; a second base file of one
            # instant in a file group would make readers refuse the table (what slips past is swept,
            # ``coordinator.sweep``)
            self._on_step("compaction-closing")
            self.coordinator.hold()
            result = writer.close()
        except BaseException:
            writer.abort()
            raise
        try:
            self.coordinator.hold()
        except LeaseLost:
            io.delete(new_file.path)  # lost while it closed: gone at once rather than at the next writer's sweep
            raise
        return WriteStat(
            file_id=op.file_id,
            path=new_file.path,
            partition_path=op.partition,
            prev_commit=op.base_instant or NULL_COMMIT,
            num_writes=result.num_rows,
            num_update_writes=result.num_rows,
            total_write_bytes=result.size,
            file_size_in_bytes=result.size,
        )
