"""Which table services a writer runs after each commit, and in what order: compaction (merge-on-read), cleaning,
archival, the state index's compaction, then the Delta mirror, which publishes what they and the commit completed,
and last the catalog's entries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from laketide.config import JobConfig
from laketide.coordinator import Coordinator
from laketide.coordinator.archiver import Archiver
from laketide.coordinator.cleaner import Cleaner
from laketide.coordinator.index_compaction import IndexCompaction
from laketide.coordinator.services import ServiceFailures, TableServices
from laketide.index.state import StateIndex
from laketide.table import Table
from laketide.table.mirror.delta_mirror import DeltaMirror, has_mirror
from laketide.table.reading.view_sync import ViewSync
from laketide.writer.job.catalog_sync import CatalogService
from laketide.writer.job.compactor import Compactor
from laketide.writer.report import WriterStatus


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
    batch_lock: AbstractContextManager | None = None,
    *,
    catalog: CatalogService | None = None,
    status: WriterStatus | None = None,
    gate: threading.Semaphore | None = None,
) -> TableServices:
    """Compaction (merge-on-read, when async), cleaning, then archival (when enabled), after each commit, on the job's
    synced view; the state index's compaction; the Delta mirror, which publishes what they and the commit
    completed; last the catalog's entries (``catalog``). ``batch_lock``: the writer's, which archival's deletes take
    (``Archiver``); ``status``: the writer's, told of each failure; ``gate``: shared by the tables of a database job
    (``TableServices``)."""
    services: list = [("compact", compactor.run)] if compactor is not None and config.compaction.mode == "async" else []
    services.append(("clean", Cleaner(coordinator, config.clean.retention(), index.obsolete_runs, views.view).clean))
    if config.archive.enabled:
        archiver = Archiver(
            coordinator, config.archive.min_commits, config.archive.max_commits, index.instants, views.view, batch_lock
        )
        services.append(("archive", archiver.archive))
    services.append(("index compaction", index_compaction.run))
    if mirror is not None:
        services.append(("mirror", mirror.catch_up))
    if catalog is not None:
        services.append(("catalog", catalog.run))
    told = (lambda name, instant, error: status.failed(name, error, instant)) if status is not None else None
    failures = ServiceFailures(config.services.max_consecutive_failures, coordinator.metrics, told)
    return TableServices(services, background=config.clean.async_, failures=failures, gate=gate)


def compactor_for(
    config: JobConfig,
    table: Table,
    coordinator: Coordinator,
    views: ViewSync,
    on_step: Callable[[str, int], None] | None = None,
    finish_lock: threading.RLock | None = None,
    yield_to: threading.RLock | None = None,
) -> Compactor | None:
    if table.config.table_type != "MERGE_ON_READ" or config.compaction.mode == "off":
        return None
    steps = (lambda point: on_step(point, -1)) if on_step is not None else None
    return Compactor(coordinator, config.compaction, config.write, views.view, steps, finish_lock, yield_to)


def after_commit(config: JobConfig, compactor: Compactor | None, services: TableServices) -> Callable[[str], None]:
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
