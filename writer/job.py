"""The streaming job: open the table, take the lease, recover, and run the query."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import pyarrow as pa

from laketide.config import ConfigError, JobConfig
from laketide.coordinator import Coordinator, Lease, LeaseLost, LocalLease
from laketide.coordinator.archiver import Archiver
from laketide.coordinator.cleaner import Cleaner
from laketide.coordinator.lease import ZooKeeperLease
from laketide.coordinator.savepoints import Savepoints
from laketide.coordinator.services import ServiceFailures, TableServiceFailed, TableServices
from laketide.index.state import StateIndex
from laketide.table import FileIO, Table, TableNotFound, properties_file
from laketide.table.delta_mirror import DeltaMirror, has_mirror
from laketide.table.instant import COMPACTION
from laketide.table.view_sync import ViewSync
from laketide.writer.compactor import Compactor
from laketide.writer.pipeline import MicroBatchWriter
from laketide.writer.operations import Operations
from laketide.writer.report import BatchReport, IndexCoverage, WriterView
from laketide.writer.preflight import check_quarantine_path, table_config_for
from laketide.writer.session import spark_session
from laketide.writer.sources import read_stream, source_schema

log = logging.getLogger("laketide.job")
T = TypeVar("T")
WRITER_ID_FILE = "laketide-writer-id"


def writer_id_for(checkpoint: str) -> str:
    """The writer id lives in the checkpoint: a new checkpoint is a new writer with its own batch ids."""
    io = FileIO.for_uri(checkpoint)
    if io.exists(WRITER_ID_FILE):
        return io.read_text(WRITER_ID_FILE).strip()
    writer_id = uuid.uuid4().hex
    io.write_atomic(WRITER_ID_FILE, writer_id.encode(), overwrite=False)
    return writer_id


def open_table(config: JobConfig, source: pa.Schema) -> Table:
    """Open the table (or create it) once every check has passed; a refused job writes nothing."""
    io = FileIO.for_uri(config.table.path)
    properties_file.recover(io)
    try:
        existing = Table.open(config.table.path, io)
    except TableNotFound:
        existing = None
    current = existing.schema() if existing is not None else None
    settled = table_config_for(config.table, existing.config if existing else None, current, source, io.full_path(""))
    return existing or Table.create_from_config(config.table.path, settled, io=io)


def make_lease(config: JobConfig, table: Table, job_id: str, api_address: str | None = None, on_lost=None) -> Lease:
    coordinator = config.coordinator
    if coordinator.lease == "local":
        if not table.io.is_local:
            raise ConfigError(f"coordinator.lease = 'local' needs a table on the local file system; {table.uri} is not. Use 'zookeeper'.")
        return LocalLease.for_table(table.uri, job_id=job_id, api_address=api_address)
    return ZooKeeperLease(
        coordinator.zookeeper,
        coordinator.zookeeper_root,
        table.uri,
        job_id=job_id,
        api_address=api_address,
        session_timeout=coordinator.zookeeper_session_timeout,
        on_lost=on_lost,
    )


def quarantine_path(config: JobConfig) -> str:
    return config.write.quarantine_path or config.table.path.rstrip("/") + "_quarantine"


@dataclass
class RunningJob:
    """The parts of a running job that the coordinator service reads and acts through."""

    config: JobConfig
    table: Table
    coordinator: Coordinator
    writer: MicroBatchWriter
    index: StateIndex
    stop_requested: threading.Event
    services: TableServices
    mirror: DeltaMirror | None = None

    def stop(self) -> None:
        """Ask the query to stop after the micro-batch in progress."""
        self.stop_requested.set()

    def status(self) -> WriterView:
        status = self.writer.status
        timeline = self.table.timeline
        completed = {i.timestamp for i in timeline.completed_writes()}
        snapshot = self.index.snapshot(completed, timeline.start)
        groups = {(s.partition, s.file_id) for s in self.writer.views.view(timeline).latest_slices()}
        return WriterView(
            running=True,
            writer_id=self.coordinator.writer_id,
            current_batch=status.current_batch,
            last_instant=status.last_instant,
            recent=[replace(r, rolled_back=_rolled_back(r, completed, timeline.start)) for r in status.recent],
            quarantined_total=status.quarantined_total,
            index=IndexCoverage(shards=self.index.shards, file_groups=len(groups), covered_file_groups=len(groups & snapshot.covered)),
        )

    @property
    def operations(self) -> Operations:
        """An operator's changes, on the job's coordinator, each between micro-batches; the Delta mirror then shows it."""
        return Operations(self.coordinator, self.index, self.mirror, self.between_batches)

    def between_batches(self, action: Callable[[], T]) -> T:
        """Run ``action`` while no micro-batch runs (under the writer's batch lock)."""
        with self.writer.batch_lock:
            return action()


def _log_pending(table: Table) -> None:
    pending = [i.timestamp for i in table.timeline.pending([COMPACTION])]
    if pending:
        log.info("compactions %s are pending; the next start of the job (or laketide compact --run) runs them", ", ".join(pending))


def _rolled_back(report: BatchReport, completed: set[str], timeline_start: str | None) -> bool:
    """A committed micro-batch whose instant left the timeline, other than by archival (older than its start)."""
    instant = report.instant
    if instant is None or report.skipped or instant in completed:
        return False
    return timeline_start is not None and instant >= timeline_start


def mirror_for(config: JobConfig, table: Table, views: ViewSync) -> DeltaMirror | None:
    """The Delta mirror, when configured or when the table already has one (it must not go stale);
    it takes the table's files from the job's synced view rather than listing the table."""
    if config.mirror.delta or has_mirror(table.io):
        return DeltaMirror(table, config.mirror.log_retention_versions, views.files)
    return None


def table_services(
    config: JobConfig, coordinator: Coordinator, index: StateIndex, views: ViewSync, compactor: Compactor | None = None, mirror: DeltaMirror | None = None
) -> TableServices:
    """Compaction (merge-on-read, when async), cleaning, then archival (when enabled), after each commit, on the job's
    synced view; last the Delta mirror, which publishes what they and the commit completed."""
    services: list = [("compact", compactor.run)] if compactor is not None and config.compaction.mode == "async" else []
    services.append(("clean", Cleaner(coordinator, config.clean.retention(), index.obsolete_runs, views.view).clean))
    if config.archive.enabled:
        archiver = Archiver(coordinator, config.archive.min_commits, config.archive.max_commits, index.instants, views.view)
        services.append(("archive", archiver.archive))
    if mirror is not None:
        services.append(("mirror", mirror.catch_up))
    failures = ServiceFailures(config.services.max_consecutive_failures, coordinator.metrics)
    return TableServices(services, background=config.clean.async_, failures=failures)


def compactor_for(
    config: JobConfig, table: Table, coordinator: Coordinator, views: ViewSync, on_step: Callable[[str, int], None] | None = None
) -> Compactor | None:
    if table.config.table_type != "MERGE_ON_READ" or config.compaction.mode == "off":
        return None
    steps = (lambda point: on_step(point, -1)) if on_step is not None else None
    return Compactor(coordinator, config.compaction, config.write.bloom_type, views.view, steps)


def _after_commit(config: JobConfig, compactor: Compactor | None, services: TableServices) -> Callable[[str], None]:
    """After each commit, in the micro-batch thread: schedule a due compaction (no deltacommit is in
    flight then, so the plan holds every log of its slices), run it when inline, then the table services.
    A failure of any of them is counted, never rolls back the commit (``ServiceFailures``)."""

    def after(instant: str) -> None:
        failures = services.failures
        if compactor is not None and failures.run("schedule compaction", compactor.schedule, instant) and config.compaction.mode == "inline":
            failures.run("compact", compactor.run, instant)
        services.after_commit(instant)

    return after


def run(
    config: JobConfig,
    on_step: Callable[[str, int], None] | None = None,
    on_ready: Callable[[RunningJob], None] | None = None,
) -> MicroBatchWriter:
    """Run the job until its trigger ends it (available-now) or it is stopped.

    ``on_ready`` gets the running job once the lease is held and the table
    recovered, before the first micro-batch (the service starts its API there).
    """
    check_quarantine_path(quarantine_path(config))
    spark = spark_session(config.spark)
    spark.sparkContext.setLogLevel("WARN")
    table = open_table(config, source_schema(spark, config.source))
    writer_id = writer_id_for(config.stream.checkpoint)
    lost, stop_requested = threading.Event(), threading.Event()
    lease = make_lease(config, table, job_id=f"{config.stream.query_name}-{writer_id[:8]}", on_lost=lost.set)
    holder = lease.acquire(config.coordinator.lease_wait)
    log.info("lease of %s taken: %s", table.uri, holder.describe())
    services = None
    try:
        index = StateIndex.open(table.io, config.write.index_shards, config.index.global_)
        coordinator = Coordinator(table, lease, writer_id, instant_side_files=index.instant_files)
        for result in coordinator.recover():
            log.warning("rolled back %s left by a previous writer (%d files)", result.instant, len(result.files))
        Savepoints(coordinator).resume_restore()
        views = ViewSync(table)
        compactor = compactor_for(config, table, coordinator, views, on_step)
        mirror = mirror_for(config, table, views)
        services = table_services(config, coordinator, index, views, compactor, mirror)
        writer = MicroBatchWriter(
            spark, config, table, coordinator, index, quarantine_path(config), on_step,
            after_commit=_after_commit(config, compactor, services), views=views, failures=services.failures,
        )
        if compactor is not None:
            compactor.finish_lock = writer.batch_lock
        # a compaction the previous run left pending is finished now, not only after the next commit
        services.after_commit()
        if on_ready is not None:
            on_ready(RunningJob(config, table, coordinator, writer, index, stop_requested, services, mirror))
        stream = (
            read_stream(spark, config.source)
            .writeStream.queryName(config.stream.query_name)
            .option("checkpointLocation", config.stream.checkpoint)
            .foreachBatch(writer)
        )
        if config.stream.trigger == "available-now":
            stream = stream.trigger(availableNow=True)
        else:
            stream = stream.trigger(processingTime=config.stream.trigger)
        query = stream.start()
        try:
            while not query.awaitTermination(1):
                if lost.is_set():
                    query.stop()
                    raise LeaseLost(f"the lease of {table.uri} was lost; the job stopped writing")
                if services.failures.fatal is not None:
                    query.stop()
                    services.failures.raise_if_fatal()
                if stop_requested.is_set():
                    query.stop()
        except KeyboardInterrupt:
            log.info("stopping the query")
            query.stop()
        except TableServiceFailed:
            raise
        except Exception as failure:
            if lost.is_set() or "LeaseLost" in str(failure):
                raise LeaseLost(f"the lease of {table.uri} was lost; the job stopped writing, and nothing uncommitted stays visible") from None
            # a service that failed too often stops the query from inside a micro-batch, after its commit
            services.failures.raise_if_fatal()
            raise
        if config.stream.trigger == "available-now" and not stop_requested.is_set():
            # a run that ends by itself leaves nothing pending that its last commit scheduled
            services.finish()
            services.failures.raise_if_fatal()
        else:
            services.wait()
        if mirror is not None:
            # a commit that came while the last services round ran started none
            mirror.catch_up()
        _log_pending(table)
        return writer
    finally:
        if services is not None:
            services.wait()
        lease.release()
