"""A running writer's parts (``RunningJob``), as the job, the API and the dashboard read and act through them: its
status, drawn from the writer's memory and the table; an operator's changes, between micro-batches; its end.

``writer.session.WriterSession`` assembles one and closes it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from laketide.config import JobConfig
from laketide.coordinator import Coordinator
from laketide.coordinator.services import TableServices
from laketide.index.state import StateIndex
from laketide.table import Table
from laketide.table.format.instant import COMPACTION, instant_to_datetime
from laketide.table.format.timeline import redrawn
from laketide.table.mirror.delta_mirror import DeltaMirror
from laketide.table.reading.view_sync import ViewSync
from laketide.writer.batch_writer import BatchWriter
from laketide.writer.job.catalog_sync import CatalogService
from laketide.writer.job.health import assess
from laketide.writer.job.operations import Operations
from laketide.writer.job.state import JobStateRecorder
from laketide.writer.job.views import IndexCoverage, WriterView
from laketide.writer.landing import landing_backlog
from laketide.writer.report import Backlog, BatchReport

log = logging.getLogger("laketide.job")
T = TypeVar("T")
WAITING_SECONDS = 10.0
FACTS_SECONDS = 5.0  # how old the table's part of the status may be


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

    writer: BatchWriter
    stop_requested: threading.Event
    services: TableServices
    mirror: DeltaMirror | None = None
    state: JobStateRecorder | None = None  # the job's last word, kept with the table
    catalog: CatalogService | None = None  # the catalog's entries, synced after each commit
    _waiting: tuple[float, Backlog | None] = field(
        default=(float("-inf"), None), init=False
    )  # (when listed, the landing backlog)
    _facts: TableFacts | None = field(default=None, init=False)

    # the writer's own table, settings, coordinator and index
    @property
    def config(self) -> JobConfig:
        return self.writer.config

    @property
    def table(self) -> Table:
        return self.writer.table

    @property
    def coordinator(self) -> Coordinator:
        return self.writer.coordinator

    @property
    def index(self) -> StateIndex:
        return self.writer.index

    def stop(self) -> None:
        """Ask the query to stop after the micro-batch in progress."""
        self.stop_requested.set()

    def status(self) -> WriterView:
        """The writer's published state, and what the table says of it (at most ``FACTS_SECONDS`` old): the API's
        threads call this as often as clients ask, so nothing here lists the table more often than that."""
        status = self.writer.status
        facts = self._table_facts(status.last_instant)
        catalog = self.catalog.view() if self.catalog is not None else None
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
                status.recent,
                status.failures,
                self.config.stream.trigger,
                landing,
                running_batch,
                facts.last_commit_at,
                catalog=catalog,
                files_per_batch=self.config.source.max_files_per_trigger,
            ),
            catalog=catalog,
        )

    def _table_facts(self, last_instant: str | None) -> TableFacts:
        """The completed writes, the index's coverage and the last commit's time, drawn again after each commit of
        the writer's and once ``FACTS_SECONDS`` passed (an operator's change). API threads may race here; the loser
        draws them again (no lock held over I/O)."""
        facts = self._facts
        if facts is not None and facts.as_of == last_instant and time.monotonic() - facts.drawn < FACTS_SECONDS:
            return facts
        self._facts = self._draw_facts(last_instant)
        return self._facts

    @redrawn
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
        path = self.config.source.path
        if self.config.source.format in ("generator", "kafka") or not done or path is None:
            return None
        at, backlog = self._waiting
        if time.monotonic() - at > WAITING_SECONDS:
            try:
                backlog = landing_backlog(path, self.config.stream.checkpoint, done[-1], self.config.storage.io_options)
            except Exception:  # only for showing: the status answers without it
                log.warning("the landing files waiting could not be counted", exc_info=True)
                backlog = None
            self._waiting = (time.monotonic(), backlog)
        return backlog

    def finish(self, ended_by_itself: bool) -> None:
        """After the last micro-batch: a run that ended by itself runs what its last commit scheduled;
        a stopped one only waits for the services round in flight. Then the mirror and the catalog catch up."""
        if ended_by_itself:
            self.services.finish()
            self.services.failures.raise_if_fatal()
        else:
            self.services.wait()
        if self.mirror is not None:
            # a commit that came while the last services round ran started none
            self.mirror.catch_up()
        if self.catalog is not None:
            # the catalog too, so an engine finds the last commit once the job is gone
            self.catalog.finish()
        _log_pending(self.table)
        if self.state is not None:
            self.state.ended()

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
        try:
            return self.writer.between_batches(action)
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
