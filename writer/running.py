"""What a running writer is made of, with Spark or without: the table opened or created, the lease,
the coordinator after recovery, the index, the synced view, the table services and the mirror.

``start`` assembles them around a ``BatchWriter`` (the Spark job passes its ``MicroBatchWriter``; the
Python write API the plain one), and ``finish`` leaves nothing pending that the last commit scheduled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import pyarrow as pa

from laketide.config import ConfigError, JobConfig
from laketide.coordinator import Coordinator, Lease, LocalLease
from laketide.coordinator.archiver import Archiver
from laketide.coordinator.cleaner import Cleaner
from laketide.coordinator.index_compaction import IndexCompaction
from laketide.coordinator.lease_choice import LeaseChoice
from laketide.coordinator.metrics import Metrics
from laketide.coordinator.savepoints import Savepoints
from laketide.coordinator.services import ServiceFailures, TableServices
from laketide.coordinator.storage_lease import StorageLease, probe_conditional_writes
from laketide.coordinator.zookeeper_lease import ZooKeeperLease
from laketide.index.state import INDEX_DIR, StateIndex
from laketide.table import FileIO, Table, TableNotFound, properties_file
from laketide.table.delta_mirror import DeltaMirror, has_mirror
from laketide.table.errors import Invalid
from laketide.table.instant import COMPACTION, instant_to_datetime
from laketide.table.timeline import drawn_again
from laketide.table.view_sync import ViewSync
from laketide.writer.batch_writer import BatchWriter
from laketide.writer.compactor import Compactor
from laketide.writer.job_health import assess
from laketide.writer.job_state import JobState, JobStateRecorder
from laketide.writer.landing import landing_backlog
from laketide.writer.operations import Operations
from laketide.writer.preflight import settled_config, table_config_for
from laketide.writer.report import Backlog, BatchReport, IndexCoverage, WriterView

log = logging.getLogger("laketide.job")
T = TypeVar("T")
WAITING_SECONDS = 10.0
FACTS_SECONDS = 5.0  # how old the table's part of the status may be
# builds the writer of micro-batches from (config, table, coordinator, index, quarantine path) and hooks
WriterFactory = Callable[..., BatchWriter]


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
    if config.coordinator.lease == "storage" and hasattr(io, "replace_versioned"):
        probe_conditional_writes(io)
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
        if recorded.kind == "zookeeper":
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


@dataclass(frozen=True)
class TableFacts:
    """What the status takes from the table rather than from the writer's memory, and when it was drawn."""

    drawn: float  # monotonic
    as_of: str | None  # the writer's last instant when they were drawn
    completed: set[str]
    start: str | None
    index: IndexCoverage
    last_commit_at: float | None  # epoch seconds of the newest completed write's instant time


@dataclass
class RunningJob:
    """The parts of a running job that the coordinator service reads and acts through."""

    config: JobConfig
    table: Table
    coordinator: Coordinator
    writer: BatchWriter
    index: StateIndex
    stop_requested: threading.Event
    services: TableServices
    mirror: DeltaMirror | None = None
    state: JobStateRecorder | None = None  # the job's last word, kept with the table
    _waiting: tuple[float, Backlog | None] = field(
        default=(float("-inf"), None), init=False
    )  # (when listed, the landing backlog)
    _facts: TableFacts | None = field(default=None, init=False)

    def stop(self) -> None:
        """Ask the query to stop after the micro-batch in progress."""
        self.stop_requested.set()

    def status(self) -> WriterView:
        """The writer's published state, and what the table says of it (at most ``FACTS_SECONDS`` old): the API's
        threads call this as often as clients ask, so nothing here lists the table more often than that."""
        status = self.writer.status
        facts = self._table_facts(status.last_instant)
        landing = self._landing_backlog(status.recent)
        running_batch = status.current_batch is not None and (
            not status.recent or status.recent[-1].batch_id != status.current_batch
        )
        return WriterView(
            running=True,
            writer_id=self.coordinator.writer_id,
            source=_describe_source(self.config),
            trigger=self.config.stream.trigger,
            stopping=self.stop_requested.is_set(),
            files_waiting=landing.files if landing is not None else None,
            current_batch=status.current_batch,
            last_instant=status.last_instant,
            recent=[replace(r, rolled_back=_rolled_back(r, facts.completed, facts.start)) for r in status.recent],
            quarantined_total=status.quarantined_total,
            records_total=status.records_total,
            index=facts.index,
            failures=status.failures,
            health=assess(
                status.recent, status.failures, self.config.stream.trigger, landing, running_batch, facts.last_commit_at
            ),
        )

    def _table_facts(self, last_instant: str | None) -> TableFacts:
        """The completed writes, the index's coverage and the last commit's time, drawn again after each commit of
        the writer's and once ``FACTS_SECONDS`` passed (an operator's change). API threads may race here; the loser
        draws them again (no lock held over I/O)."""
        facts = self._facts
        if facts is not None and facts.as_of == last_instant and time.monotonic() - facts.drawn < FACTS_SECONDS:
            return facts
        self._facts = drawn_again(lambda: self._draw_facts(last_instant))
        return self._facts

    def _draw_facts(self, last_instant: str | None) -> TableFacts:
        timeline = self.table.timeline
        completed = {i.timestamp for i in timeline.completed_writes()}
        snapshot = self.index.snapshot(completed, timeline.start)
        groups = {(s.partition, s.file_id) for s in self.writer.views.view(timeline).latest_slices()}
        last = timeline.latest_completed_write()
        index = IndexCoverage(
            shards=self.index.shards, file_groups=len(groups), covered_file_groups=len(groups & snapshot.covered)
        )
        at = instant_to_datetime(last.timestamp).timestamp() if last is not None else None
        return TableFacts(time.monotonic(), last_instant, completed, timeline.start, index, at)

    def _landing_backlog(self, recent: list[BatchReport]) -> Backlog | None:
        """A landing source's backlog, listed at most every ``WAITING_SECONDS``: the API's readers poll, and
        a landing directory can be long. Threads of the API may race on ``_waiting``; the loser lists again."""
        done = [r.batch_id for r in recent if not r.skipped and not r.empty]
        if self.config.source.format in ("generator", "kafka") or not done:
            return None
        at, backlog = self._waiting
        if time.monotonic() - at > WAITING_SECONDS:
            try:
                backlog = landing_backlog(
                    self.config.source.path, self.config.stream.checkpoint, done[-1], self.config.storage.io_options
                )
            except Exception:  # only for showing: the status answers without it
                log.warning("the landing files waiting could not be counted", exc_info=True)
                backlog = None
            self._waiting = (time.monotonic(), backlog)
        return backlog

    @property
    def views(self) -> ViewSync:
        """The writer's file-system view (thread-safe), which the API's reads share."""
        return self.writer.views

    @property
    def operations(self) -> Operations:
        """An operator's changes, on the job's coordinator, each between micro-batches; the Delta mirror then shows
        it."""
        return Operations(self.coordinator, self.index, self.mirror, self.between_batches)

    def between_batches(self, action: Callable[[], T]) -> T:
        """Run ``action`` while no micro-batch runs (under the writer's batch lock)."""
        with self.writer.batch_lock:
            try:
                return action()
            finally:
                self._facts = None  # an operator's change (a rollback, a restore) shows at the next status


def _describe_source(config: JobConfig) -> str:
    source = config.source
    if source.format == "kafka":
        return "kafka " + (", ".join(source.kafka.topics) or f"/{source.kafka.topic_pattern}/")
    if source.format == "generator":
        return f"generator ({source.generator.batches} batches of {source.generator.rows_per_batch:,} rows)"
    return f"{source.format} files in {source.path}"


def _log_pending(table: Table) -> None:
    pending = [i.timestamp for i in table.timeline.pending([COMPACTION])]
    if pending:
        log.info(
            "compactions %s are pending; the next start of the job (or laketide compact --run) runs them",
            ", ".join(pending),
        )


def _rolled_back(report: BatchReport, completed: set[str], timeline_start: str | None) -> bool:
    """A committed micro-batch whose instant left the timeline, other than by archival (older than its start)."""
    instant = report.instant
    if instant is None or report.skipped or instant in completed:
        return False
    return timeline_start is not None and instant >= timeline_start


def mirror_for(config: JobConfig, table: Table, views: ViewSync, hold: Callable[[], None]) -> DeltaMirror | None:
    """The Delta mirror, when configured or when the table already has one (it must not go stale);
    it takes the table's files from the job's synced view rather than listing the table."""
    if config.mirror.delta or has_mirror(table.io):
        return DeltaMirror(table, config.mirror.log_retention_versions, views.files, hold)
    return None


def table_services(
    config: JobConfig,
    coordinator: Coordinator,
    index: StateIndex,
    views: ViewSync,
    index_compaction: IndexCompaction,
    compactor: Compactor | None = None,
    mirror: DeltaMirror | None = None,
) -> TableServices:
    """Compaction (merge-on-read, when async), cleaning, then archival (when enabled), after each commit, on the job's
    synced view; the state index's compaction; last the Delta mirror, which publishes what they and the commit
    completed."""
    services: list = [("compact", compactor.run)] if compactor is not None and config.compaction.mode == "async" else []
    services.append(("clean", Cleaner(coordinator, config.clean.retention(), index.obsolete_runs, views.view).clean))
    if config.archive.enabled:
        archiver = Archiver(
            coordinator, config.archive.min_commits, config.archive.max_commits, index.instants, views.view
        )
        services.append(("archive", archiver.archive))
    services.append(("index compaction", index_compaction.run))
    if mirror is not None:
        services.append(("mirror", mirror.catch_up))
    failures = ServiceFailures(config.services.max_consecutive_failures, coordinator.metrics)
    return TableServices(services, background=config.clean.async_, failures=failures)


def compactor_for(
    config: JobConfig,
    table: Table,
    coordinator: Coordinator,
    views: ViewSync,
    on_step: Callable[[str, int], None] | None = None,
) -> Compactor | None:
    if table.config.table_type != "MERGE_ON_READ" or config.compaction.mode == "off":
        return None
    steps = (lambda point: on_step(point, -1)) if on_step is not None else None
    return Compactor(coordinator, config.compaction, config.write, views.view, steps)


def _after_commit(config: JobConfig, compactor: Compactor | None, services: TableServices) -> Callable[[str], None]:
    """After each commit, in the micro-batch thread: schedule a due compaction (no deltacommit is in
    flight then, so the plan holds every log of its slices), run it when inline, then the table services.
    A failure of any of them is counted, never rolls back the commit (``ServiceFailures``)."""

    def after(instant: str) -> None:
        failures = services.failures
        if (
            compactor is not None
            and failures.run("schedule compaction", compactor.schedule, instant)
            and config.compaction.mode == "inline"
        ):
            failures.run("compact", compactor.run, instant)
        services.after_commit(instant)

    return after


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


def start(
    config: JobConfig,
    table: Table,
    lease: Lease,
    writer_id: str,
    factory: WriterFactory = BatchWriter,
    on_step: Callable[[str, int], None] | None = None,
    streaming: bool = True,
    metrics: Metrics | None = None,
) -> RunningJob:
    """Everything a writer needs, under ``lease`` (held): what a previous holder left is recovered first,
    a restore cut short is finished, and a compaction left pending is run. The lease is recorded as the table's
    (``coordinator.lease_choice``) if no writer did before. A ``streaming`` job keeps its state with the table
    (``writer/job_state.py``); one ``laketide.write`` call does not speak over the last job's word. ``metrics``: where
    the table's are counted (a job of a whole database counts all its tables' in one registry)."""
    lease_choice(config).record(table.io)
    index = open_index(config, table)
    coordinator = Coordinator(table, lease, writer_id, instant_side_files=index.instant_files, metrics=metrics)
    for result in coordinator.recover():
        log.warning("rolled back %s left by a previous writer (%d files)", result.instant, len(result.files))
    Savepoints(coordinator).resume_restore()
    views = ViewSync(table)
    compactor = compactor_for(config, table, coordinator, views, on_step)
    mirror = mirror_for(config, table, views, coordinator.hold)
    index_compaction = IndexCompaction(table, index, config.write.index_compaction_deltas, coordinator.hold)
    services = table_services(config, coordinator, index, views, index_compaction, compactor, mirror)
    writer = factory(
        config=config,
        table=table,
        coordinator=coordinator,
        index=index,
        quarantine_path=quarantine_path(config),
        on_step=on_step,
        after_commit=_after_commit(config, compactor, services),
        views=views,
        failures=services.failures,
    )
    services.failures.on_failure = lambda name, instant, error: writer.status.failed(name, error, instant)
    if compactor is not None:
        compactor.finish_lock = writer.batch_lock
    index_compaction.swap_lock = writer.batch_lock
    state = _job_state(table, coordinator, writer_id) if streaming else None
    if state is not None:
        writer.observers.append(
            lambda report: None if report.skipped or report.empty else state.committed(report.batch_id, report.instant)
        )
    # a compaction the previous run left pending is finished now, not only after the next commit
    services.after_commit()
    return RunningJob(config, table, coordinator, writer, index, threading.Event(), services, mirror, state)


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


def finish(job: RunningJob, ended_by_itself: bool) -> None:
    """After the last micro-batch: a run that ended by itself runs what its last commit scheduled;
    a stopped one only waits for the services round in flight. Then the mirror catches up."""
    if ended_by_itself:
        job.services.finish()
        job.services.failures.raise_if_fatal()
    else:
        job.services.wait()
    if job.mirror is not None:
        # a commit that came while the last services round ran started none
        job.mirror.catch_up()
    _log_pending(job.table)
    if job.state is not None:
        job.state.ended()
