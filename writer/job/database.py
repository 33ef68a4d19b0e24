"""A job of a whole database: each micro-batch of Kafka records split by source table, and each table written
as a single-table job writes its own, inside one driver.

Each table is a ``WriterSession`` of its own (``writer.session``): its lease, its timeline, its index, its
services and mirror, its quarantine under its own path, its instant per micro-batch that holds its records.
A table is opened (or created, with the Kafka key's fields as its record key) at its first event of the job.
The tables share the driver's threads (one ``DriverPool``), the process' index shard cache, and a gate on how
many tables' services run at once (``database.services_at_once``).

Exactly once per table: each table's commit records the micro-batch id under the job's writer id, so a
micro-batch replayed after a crash is skipped by the tables that committed it and written by the others.

Threads: the micro-batch thread calls ``write``; the API's threads read ``tables`` (a new dict is swapped
in when a table opens, never changed in place); a table's own threads are those of a single-table job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.config import JobConfig
from laketide.config.routes import SourceTable, TableRoutes
from laketide.coordinator import LeaseHeld, LeaseLost
from laketide.coordinator.metrics import MetricFamilies, Metrics
from laketide.index.columns import DECODE_REASON, EVENT_KIND
from laketide.table import Table
from laketide.table.errors import Conflict, LaketideError, first_line
from laketide.writer import quarantine
from laketide.writer.batch_writer import WriterParts
from laketide.writer.changes.decoder import ChangeDecoder, raw_records
from laketide.writer.changes.events import ChangeSpec, Messages, change_rows
from laketide.writer.changes.routes import record_key_of, route
from laketide.writer.clock import StepClock
from laketide.writer.driver_batch import DriverPool
from laketide.writer.job.running import RunningJob
from laketide.writer.job.session import JobParts, WriterSession, check_table, quarantine_path
from laketide.writer.job.split import DriverSplit, Split
from laketide.writer.report import BatchReport

log = logging.getLogger("laketide.job")
UNROUTED = "_unrouted"  # beside the tables: the records of topics no table is known for that are not skipped


@dataclass(frozen=True)
class TableParts:
    """What only the adapter makes for a table (Spark parses a pinned ``schema``'s DDL): its declared columns, for
    the checks at its creation, the decoder of its change events, and the clock its writer's steps are timed by
    (Spark's counts its tasks' seconds too, and can be handed to them)."""

    declared: Callable[[JobConfig], pa.Schema | None]
    decoder: Callable[[JobConfig, Table], ChangeDecoder]
    clock: Callable[[], StepClock] = StepClock


@dataclass
class DatabaseTable:
    """One table of the job: its name in the job (``label``), the source table it holds, and its writer."""

    label: str
    source: SourceTable
    session: WriterSession
    job: RunningJob
    decoder: ChangeDecoder


@dataclass
class DatabaseReport:
    """What one micro-batch did across the tables: one report per table that had records."""

    batch_id: int
    tables: list[BatchReport] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # messages of no table, by kind
    unrouted: int = 0  # records of no table set aside
    failed: dict[str, str] = field(default_factory=dict)  # table -> why its write failed
    seconds: float = 0.0  # writing every table, after the records were read and routed
    read_seconds: float = 0.0  # reading the records from the source, before
    route_seconds: float = 0.0  # parsing the records' values and finding each one's table, between

    def line(self) -> str:
        written = [r for r in self.tables if not r.skipped]
        records = sum(r.records for r in written)
        parts = [f"micro-batch {self.batch_id}: tables={len(self.tables)} written={len(written)} records={records}"]
        if len(written) < len(self.tables):
            parts.append(f"already_committed={sum(1 for r in self.tables if r.skipped and not r.empty)}")
        if self.skipped:
            parts.append("skipped=" + ",".join(f"{k}:{n}" for k, n in sorted(self.skipped.items())))
        if self.unrouted:
            parts.append(f"unrouted={self.unrouted}")
        if self.failed:
            parts.append("failed=" + ",".join(sorted(self.failed)))
        times = f"seconds={self.seconds:.2f} read={self.read_seconds:.2f} route={self.route_seconds:.2f}"
        return " ".join(parts) + " " + times


class TableFailed(LaketideError):
    """A table of a database job could not be written; the micro-batch's other tables were. Its kind is its error's."""

    def __init__(self, label: str, error: BaseException):
        super().__init__(
            f"table {label}: {first_line(error) or type(error).__name__}",
            kind=error.kind if isinstance(error, LaketideError) else None,
        )


class TablesHeld(Conflict):
    """Tables of the job whose leases other writers hold (exit code as a held lease's)."""


class Database:
    """The tables of a job of a whole database, written one micro-batch at a time (``write``)."""

    def __init__(
        self,
        config: JobConfig,
        writer_id: str,
        parts: TableParts,
        job_id: str,
        on_step: Callable[[str, int], None] | None = None,
    ):
        self.config, self.writer_id, self.parts, self.job_id, self.on_step = config, writer_id, parts, job_id, on_step
        self.routes = TableRoutes(config)
        self.tables: dict[str, DatabaseTable] = {}
        self._by_source: dict[SourceTable, str] = {}
        self._topics: dict[str, SourceTable] = {}  # the source table each topic's events went to
        self.pool = DriverPool.for_writes(config.write)
        self.gate = threading.BoundedSemaphore(config.database.services_at_once)
        self.writing = threading.RLock()  # held over each micro-batch: the tables' compactions yield to all of it
        self.lost = threading.Event()  # set by any table's lease when it is lost
        self.stop_requested = threading.Event()
        self.failure: BaseException | None = None
        self.observers: list[Callable[[DatabaseReport], None]] = []
        self.metrics = MetricFamilies()  # every table's, labelled by table: one /metrics shows them all
        self.api_address: str | None = None  # the job's API, named in each table's lease (set before the query starts)

    def write(self, batch_id: int, records: pa.Table, read_seconds: float = 0.0) -> DatabaseReport:
        """Write micro-batch ``batch_id`` (Kafka records on the driver: key, value, topic, partition, offset) into its
        tables; ``read_seconds``: what reading the records took, for the micro-batch's line."""
        return self.write_split(batch_id, lambda: self._driver_split(records), read_seconds)

    def write_split(self, batch_id: int, split: Callable[[], Split], read_seconds: float = 0.0) -> DatabaseReport:
        """Write micro-batch ``batch_id``, its records split by table by ``split()`` (on the driver, or in Spark's
        tasks), into its tables."""
        try:
            with self.writing:
                started = time.monotonic()
                routed = split()
                return self._write(batch_id, routed, read_seconds, time.monotonic() - started)
        except BaseException as failure:
            self.failure = failure  # as raised: Spark hands the query's waiter only its text
            raise

    @property
    def topics_seen(self) -> dict[str, SourceTable]:
        """The source table each topic's events went to so far (``routes.route`` updates it)."""
        return self._topics

    def label_of(self, source: SourceTable) -> str:
        """The label of the table that holds the events of ``source``."""
        key = self.routes.key(source)
        return self._by_source.get(key) or self.routes.label(self.routes.path_of(key))

    def topics_of(self, label: str) -> set[str]:
        """The topics whose events went to table ``label``."""
        source = self.tables[label].source
        return {topic for topic, seen in self._topics.items() if self.routes.key(seen) == source}

    def _write(self, batch_id: int, split: Split, read_seconds: float, route_seconds: float) -> DatabaseReport:
        started = time.monotonic()
        report = DatabaseReport(batch_id, read_seconds=read_seconds, route_seconds=route_seconds)
        tables = split.tables()
        failures = self._open_new(tables, split)
        for label in sorted(tables):
            if label in failures:
                continue
            try:
                report.tables.append(self._write_table(self.tables[label], batch_id, split))
            except LeaseLost:
                raise
            except Exception as error:
                failures[label] = error
        report.failed = {label: first_line(error) or type(error).__name__ for label, error in failures.items()}
        unrouted = split.unrouted()
        if unrouted is not None:
            self._unrouted(batch_id, *unrouted, report)
        self._owed_services()
        report.seconds = time.monotonic() - started
        log.info(report.line())
        for observer in self.observers:
            observer(report)
        self._after_failures(batch_id, failures, split, tables)
        return report

    def _driver_split(self, records: pa.Table) -> DriverSplit:
        """``records`` routed on the driver, by the label of their table."""
        # one copy into contiguous columns: a take from Kafka's many fetched chunks concatenates them all first, so
        # each table's take would copy the whole micro-batch
        records = records.combine_chunks()
        routed = route(records, self._topics)
        out: dict[str, tuple[SourceTable, list[np.ndarray]]] = {}
        for source, at in routed.tables.items():
            out.setdefault(self.label_of(source), (self.routes.key(source), []))[1].append(at)
        by_table = {label: (key, np.sort(np.concatenate(parts))) for label, (key, parts) in out.items()}
        return DriverSplit(records, routed, by_table)

    def _open_new(self, tables: dict[str, SourceTable], split: Split) -> dict[str, BaseException]:
        """Open (or create) the tables seen for the first time, each under its lease, and return why those that did not
        open did not (``database.on_table_failure`` decides). Tables whose lease another job holds stop the job,
        named together."""
        new = [label for label in tables if label not in self.tables]
        held, failures = [], {}
        opened = dict(self.tables)
        for label in sorted(new):
            source = tables[label]
            try:
                opened[label] = self._open(label, source, lambda label=label: split.keys(label))
            except LeaseHeld as error:
                held.append(f"{label} ({first_line(error)})")
            except LeaseLost:
                raise
            except Exception as error:
                log.error("table %s (source table %s) could not be opened: %s", label, source.name, first_line(error))
                failures[label] = error
        self.tables = opened
        if held:
            raise TablesHeld(
                f"{len(held)} table(s) of this database are written by another job: {'; '.join(held)}. Nothing was "
                "written to them; stop the other job, or give this one another table.path"
            )
        return failures

    def _open(self, label: str, source: SourceTable, keys: Callable[[], pa.Array]) -> DatabaseTable:
        """Table ``label``, opened under its lease, or created with the record key ``keys()`` names."""
        config = self.routes.config_for(source)
        opened = check_table(config, lambda: record_key_of(keys(), source.name))
        session = WriterSession(
            config,
            self.writer_id,
            job_id=f"{self.job_id}-{label}",
            opened=opened,
            source=self.parts.declared(config),
            parts=JobParts(
                lease_wait=self.config.database.lease_wait,
                on_lost=self.lost.set,
                api_address=self.api_address,
                metrics=Metrics(label, self.metrics),
                services_gate=self.gate,
                batch_running=self.writing,
                writer=WriterParts(clock=self.parts.clock(), driver_pool=self.pool, label=label, on_step=self.on_step),
            ),
        )
        job = session.open()
        self._by_source[source] = label
        log.info("table %s opened for source table %s at %s", label, source.name, job.table.uri)
        return DatabaseTable(label, source, session, job, self.parts.decoder(config, job.table))

    def _write_table(self, table: DatabaseTable, batch_id: int, split: Split) -> BatchReport:
        writer = table.job.writer
        report = writer.write(batch_id, split.loader(table))
        log.info(report.line())  # not ``announce``: a service's failure after the commit must not count as the write's
        for observer in writer.observers:
            observer(report)
        return report

    def _owed_services(self) -> None:
        """The tables whose services the gate turned away after their commit get their turn, as slots free up."""
        for table in self.tables.values():
            if table.job.services.owed:
                table.job.services.after_commit()

    def _unrouted(self, batch_id: int, records: pa.Table, messages: Messages, report: DatabaseReport) -> None:
        """Records of no table: messages that are not row changes are counted; the rest go to quarantine beside the
        tables."""
        rows = change_rows(
            messages, records["topic"].combine_chunks().cast(pa.string()), ChangeSpec(pa.schema([]), ())
        ).rows
        kinds = rows[EVENT_KIND].combine_chunks()
        report.skipped.update({k: n for k, n in Counter(kinds.drop_null().to_pylist()).items()})
        bad = pc.is_null(kinds)
        if not pc.any(bad).as_py():
            return
        reasons = pc.coalesce(
            rows[DECODE_REASON].combine_chunks(),
            pa.scalar("a change event that names no source table, from a topic no table of this job is known for"),
        ).filter(bad)
        taken = records.filter(bad)
        target = f"{self.routes.folder}{UNROUTED}/writer={self.writer_id}/batch_id={batch_id}"
        _quarantine(taken, reasons, target, self.config.storage.io_options)
        report.unrouted = len(taken)
        log.warning("micro-batch %s: %d records of no table quarantined under %s", batch_id, len(taken), target)

    def _after_failures(
        self,
        batch_id: int,
        failures: dict[str, BaseException],
        split: Split,
        tables: dict[str, SourceTable],
    ) -> None:
        """``database.on_table_failure``: stop with the first failing table's error, or set its records aside and go
        on."""
        if not failures:
            return
        if self.config.database.on_table_failure == "stop":
            label, error = sorted(failures.items())[0]
            raise TableFailed(label, error) from error
        for label, error in sorted(failures.items()):
            self._set_aside(label, self.routes.config_for(tables[label]), batch_id, split.records(label), error)

    def _set_aside(self, label: str, config: JobConfig, batch_id: int, records: pa.Table, error: BaseException) -> None:
        """A failed table's records of the micro-batch, under its quarantine path, with the error as their reason."""
        target = f"{quarantine_path(config)}/writer={self.writer_id}/batch_id={batch_id}"
        reason = f"table {label} could not be written: {first_line(error) or type(error).__name__}"
        _quarantine(records, pa.repeat(pa.scalar(reason), records.num_rows), target, config.storage.io_options)
        log.error(
            "micro-batch %s: table %s failed; its %d records were set aside under %s (database.on_table_failure "
            "= 'quarantine')",
            batch_id,
            label,
            records.num_rows,
            target,
        )

    def finish(self, ended_by_itself: bool) -> None:
        """After the last micro-batch, every table's end (``RunningJob.finish``)."""
        for table in self.tables.values():
            table.job.finish(ended_by_itself)

    def close(self, failure: BaseException | None = None) -> None:
        """Close every table's session (``failure``: what ended the job, each table's last word), then the threads."""
        errors = []
        for table in self.tables.values():
            try:
                table.session.close(failure)
            except BaseException as error:  # every other table's lease is still released
                errors.append(error)
        self.pool.shutdown()
        if errors:
            raise errors[0]


def _quarantine(records: pa.Table, reasons: pa.Array, target: str, options: dict[str, str]) -> None:
    """Kafka records set aside under ``target`` with their reasons: each in the raw form every Kafka record in
    quarantine has (``changes.decoder.raw_records``), and where it was."""
    raws = raw_records(records, reasons)
    places = pc.binary_join_element_wise(
        records["topic"].combine_chunks().cast(pa.string()),
        "/",
        records["partition"].combine_chunks().cast(pa.string()),
        "@",
        records["offset"].combine_chunks().cast(pa.string()),
        "",
    )
    quarantine.clear(target, options)
    quarantine.write_part(target, quarantine.quarantine_rows("", reasons, raws, places), options=options)
