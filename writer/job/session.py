"""A writer's life on one table, with Spark or without (``WriterSession``): the table opened or created, its lease
taken, what a previous holder left recovered, and the parts of a running writer assembled (``RunningJob``: the
coordinator, the index, the synced view, the table services, the mirror, the ``BatchWriter``); at its end the
services waited for, the writer closed and the lease released, whatever happened.

The streaming job, ``laketide.write`` and every table of a database job write through one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pyarrow as pa

from laketide.config import ConfigError, JobConfig
from laketide.coordinator import Coordinator, Lease, LocalLease
from laketide.coordinator.index_compaction import IndexCompaction
from laketide.coordinator.lease_choice import LeaseChoice
from laketide.coordinator.metrics import Metrics
from laketide.coordinator.savepoints import Savepoints
from laketide.coordinator.storage_lease import StorageLease, probe_conditional_writes
from laketide.coordinator.zookeeper_lease import ZooKeeperLease
from laketide.index.state import INDEX_DIR, StateIndex
from laketide.table import FileIO, Table, TableNotFound
from laketide.table.errors import Invalid
from laketide.table.format import properties_file
from laketide.table.reading.view_sync import ViewSync
from laketide.table.storage.object_io import ObjectStoreFileIO
from laketide.writer.batch_writer import BatchWriter, WriterParts
from laketide.writer.job.catalog_sync import catalog_service_for
from laketide.writer.job.running import RunningJob
from laketide.writer.job.services import after_commit, compactor_for, mirror_for, table_services
from laketide.writer.job.state import JobState, JobStateRecorder
from laketide.writer.preflight import settled_config, table_config_for
from laketide.writer.report import WriterStatus

log = logging.getLogger("laketide.job")


@dataclass(frozen=True)
class JobParts:
    """What the adapter running a writer hands its session. ``api_address`` names the holder in the lease beside the
    job id; ``on_lost`` is called when the lease is lost; ``lease_wait``: how long to wait for it (default
    ``coordinator.lease_wait``). A ``streaming`` writer keeps its state with the table (``writer/job/state.py``), and
    a failure that ends its session is recorded there as its last word; one ``laketide.write`` call does not speak
    over the last job's. ``metrics``: where the table's are counted (a job of a whole database counts all its
    tables' in one registry), ``services_gate`` how many tables' services run at once, and ``batch_running`` is
    held over each of its micro-batches, which compaction yields to rather than to its own table's write.
    ``writer``: what the adapter hands the ``BatchWriter`` itself (its clock, driver pool, label, steps); the
    session adds its own parts (the services after each commit, the view, the batch lock, the status)."""

    lease_wait: float | None = None
    on_lost: Callable[[], None] | None = None
    api_address: str | None = None
    streaming: bool = True
    metrics: Metrics | None = None
    services_gate: threading.Semaphore | None = None
    batch_running: threading.RLock | None = None
    writer: WriterParts = field(default_factory=WriterParts)


class WriterSession:
    """One writer's life on one table, as a context manager whose value is the ``RunningJob``::

        with WriterSession(config, writer_id, job_id="orders-1a2b") as job:
            report = job.writer.run(batch_id, load)
            job.finish(ended_by_itself=True)

    ``table``: the table, when the caller opened it already (the streaming job opens it before its checkpoint is
    touched); else it is opened here, with ``opened``, what ``check_table`` found when the caller ran the checks
    before anything else started, or after running them here. ``source``: the source's columns, which a new table
    takes and an existing one is checked against. ``job_id`` names the holder in the lease; ``parts``, what the
    adapter running the writer hands it (``JobParts``).

    Not thread-safe: one thread opens and closes a session; the running job's own parts say what they share.
    """

    def __init__(
        self,
        config: JobConfig,
        writer_id: str,
        *,
        job_id: str,
        table: Table | None = None,
        opened: tuple[FileIO, Table | None] | None = None,
        source: pa.Schema | None = None,
        parts: JobParts | None = None,
    ):
        self.config, self.writer_id, self.job_id = config, writer_id, job_id
        self.table, self.opened, self.source = table, opened, source
        self.parts = parts or JobParts()
        self.lease_wait = config.coordinator.lease_wait if self.parts.lease_wait is None else self.parts.lease_wait
        self.lease: Lease | None = None
        self.job: RunningJob | None = None

    def open(self) -> RunningJob:
        """Open (or create) the table once every check passed, take its lease and assemble the running writer; a
        failure on the way releases the lease."""
        config = self.config
        table = self.table or open_table(config, self.source, self.opened or check_table(config))
        lease = make_lease(config, table, self.job_id, self.parts.api_address, self.parts.on_lost, probed=True)
        holder = lease.acquire(self.lease_wait)
        log.info("lease of %s taken: %s", table.uri, holder.describe())
        try:
            self.job = _assemble(config, table, lease, self.writer_id, self.parts)
        except BaseException:
            lease.release()
            raise
        self.lease = lease
        return self.job

    def close(self, failure: BaseException | None = None) -> None:
        """Record ``failure`` as a streaming writer's last word (not when the lease is what was lost: the new holder
        speaks then), wait for the services round in flight, close the writer, and release the lease."""
        job, lease = self.job, self.lease
        self.job = self.lease = None
        if lease is None:
            return
        try:
            if job is not None:
                if failure is not None and job.state is not None:
                    job.state.ended(failure)
                if job.catalog is not None:
                    job.catalog.stop()
                job.services.wait()
                job.writer.close()
        finally:
            lease.release()

    def __enter__(self) -> RunningJob:
        return self.open()

    def __exit__(self, kind, failure, trace) -> None:
        self.close(failure)


def _assemble(config: JobConfig, table: Table, lease: Lease, writer_id: str, parts: JobParts) -> RunningJob:
    """Everything a writer needs, under ``lease`` (held): what a previous holder left is recovered first,
    a restore cut short is finished, and a compaction left pending is run. The lease is recorded as the table's
    (``coordinator.lease_choice``) if no writer did before."""
    lease_choice(config).record(table.io)
    index = open_index(config, table)
    coordinator = Coordinator(table, lease, writer_id, instant_side_files=index.instant_files, metrics=parts.metrics)
    for result in coordinator.recover():
        log.warning("rolled back %s left by a previous writer (%d files)", result.instant, len(result.files))
    Savepoints(coordinator).resume_restore()
    views = ViewSync(table)
    # held while a micro-batch runs; the services' steps that change what it reads take it too
    batch_lock = threading.RLock()
    compactor = compactor_for(config, table, coordinator, views, parts.writer.on_step, batch_lock, parts.batch_running)
    mirror = mirror_for(config, table, views, coordinator.hold)
    index_compaction = IndexCompaction(table, index, config.write.index_compaction_deltas, coordinator.hold, batch_lock)
    status = WriterStatus()
    catalog = catalog_service_for(config, table, views, coordinator.metrics)
    services = table_services(
        config,
        coordinator,
        index,
        views,
        index_compaction,
        compactor,
        mirror,
        batch_lock,
        catalog=catalog,
        status=status,
        gate=parts.services_gate,
    )
    writer_parts = replace(
        parts.writer,
        after_commit=after_commit(config, compactor, services),
        views=views,
        failures=services.failures,
        batch_lock=batch_lock,
        status=status,
    )
    writer = BatchWriter(config, table, coordinator, index, quarantine_path(config), writer_parts)
    state = _job_state(table, coordinator, writer_id) if parts.streaming else None
    if state is not None:
        writer.observers.append(
            lambda report: None if report.skipped or report.empty else state.committed(report.batch_id, report.instant)
        )
    # a compaction the previous run left pending is finished now, not only after the next commit
    services.after_commit()
    return RunningJob(writer, threading.Event(), services, mirror, state, catalog)


def _job_state(table: Table, coordinator: Coordinator, writer_id: str) -> JobStateRecorder:
    holder = coordinator.lease.holder
    now = time.time()
    state = JobState(
        state="running",
        writer_id=writer_id,
        job_id=holder.job_id if holder else None,
        host=holder.host if holder else None,
        pid=holder.pid if holder else None,
        started_at=now,
        updated_at=now,
    )
    recorder = JobStateRecorder(table.io, coordinator.hold, state)
    recorder.started()
    return recorder


def _opened(config: JobConfig) -> tuple[FileIO, Table | None]:
    """The table's storage, and the table when there is one yet."""
    io = FileIO.for_uri(config.table.path, config.storage.io_options)
    properties_file.recover(io)
    try:
        return io, Table.open(config.table.path, io)
    except TableNotFound:
        return io, None


def open_table(config: JobConfig, source: pa.Schema | None, opened: tuple[FileIO, Table | None] | None = None) -> Table:
    """Open the table (or create it) once every check has passed; a refused job writes nothing. ``opened``:
    what ``check_table`` found, so that a job does not open the table twice at start."""
    io, existing = opened or _opened(config)
    current = existing.schema() if existing is not None else None
    settled = table_config_for(config.table, existing.config if existing else None, current, source, io.full_path(""))
    return existing or Table.create_from_config(config.table.path, settled, io=io)


def check_table(config: JobConfig, new_table_key: Callable[[], list[str]] | None = None) -> tuple[FileIO, Table | None]:
    """The checks that need neither Spark nor the source's columns, run before Spark starts so that a refused job
    stops at once with its reason alone: the table's format and the keys the job must agree with, or a new
    table's record key (``new_table_key`` gives it when the settings do not); and, under the storage lease, the
    store's conditional writes. Returns what it opened, for ``open_table``."""
    io, existing = _opened(config)
    if existing is None and not config.table.record_key and new_table_key is not None:
        config.table.record_key = new_table_key()
    settled_config(config.table, existing.config if existing else None, io.full_path(""))
    if existing is not None:
        take_recorded_lease(config, io)
    lease = config.coordinator.lease
    if lease == "local" and not io.is_local:  # before the table is opened: a refused job writes nothing
        raise ConfigError(
            f"coordinator.lease = 'local' needs a table on the local file system; {io.full_path('')} is not. Use "
            "'storage' or 'zookeeper'. Nothing was written."
        )
    if isinstance(io, ObjectStoreFileIO):
        # the commit fence's create-if-absent under every lease; the storage lease's replace-if-match too
        probe_conditional_writes(io, replace=lease == "storage")
    return io, existing


def take_recorded_lease(config: JobConfig, io: FileIO) -> None:
    """The lease the table's writers recorded (``coordinator.lease_choice``) becomes this job's when its settings
    name none; settings that name another are refused."""
    recorded = LeaseChoice.read(io)
    if recorded is None:
        return
    given = config.coordinator.model_fields_set & {"lease", "zookeeper", "zookeeper_root"}
    if not given:
        config.coordinator.lease = recorded.kind
        if recorded.kind == "zookeeper" and recorded.zookeeper and recorded.root:
            config.coordinator.zookeeper, config.coordinator.zookeeper_root = recorded.zookeeper, recorded.root
        return
    lease_choice(config).agree(recorded, io)


def lease_choice(config: JobConfig) -> LeaseChoice:
    """The lease the job's settings name (``coordinator.lease_choice``: every writer of a table takes one)."""
    coordinator = config.coordinator
    if coordinator.lease == "zookeeper":
        return LeaseChoice("zookeeper", coordinator.zookeeper, coordinator.zookeeper_root)
    return LeaseChoice(coordinator.lease)


def make_lease(
    config: JobConfig, table: Table, job_id: str, api_address: str | None = None, on_lost=None, probed: bool = False
) -> Lease:
    """``probed``: the store's conditional writes were proven already (``check_table``)."""
    coordinator = config.coordinator
    if coordinator.lease == "storage":
        return StorageLease(
            table.io,
            job_id=job_id,
            api_address=api_address,
            ttl=coordinator.lease_ttl,
            on_lost=on_lost,
            probe=not probed,
        )
    if coordinator.lease == "local":
        if not table.io.is_local:
            raise ConfigError(
                f"coordinator.lease = 'local' needs a table on the local file system; {table.uri} is not. Use "
                "'storage' or 'zookeeper'."
            )
        return LocalLease.for_table(table.uri, job_id=job_id, api_address=api_address)
    return ZooKeeperLease.connect_to(
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


def open_index(config: JobConfig, table: Table) -> StateIndex:
    """The table's state index, keyed as ``index.global`` (or its default) says."""
    partitioned = bool(table.config.partition_fields)
    global_keys = config.global_index(partitioned)
    try:
        return StateIndex.open(table.io, config.write.index_shards, global_keys)
    except ValueError:
        if config.index.global_ is not None or not global_keys:
            raise
        # a change feed's table indexed per partition by an earlier version: its key-only deletes were dropped
        raise Invalid(
            f"the state index of {table.uri} finds keys per partition, but change events (source.envelope = "
            "'debezium') into a "
            "partitioned table need a key found in any partition. With no job running, delete the folder "
            f"{table.io.full_path(INDEX_DIR)}: the next job rebuilds it, keyed by the record key alone"
        ) from None
