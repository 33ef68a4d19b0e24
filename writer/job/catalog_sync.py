"""A running writer's catalog sync: after each commit the catalog's entries are brought up to the commit
(``catalog.CatalogSync``), in a thread of the sync's own, so that a catalog that hangs until its timeout holds up
neither the micro-batches nor the services after it (a compaction waiting behind a sync would leave a merge-on-read
table's logs growing). A catalog that fails (unreachable, or refusing) never fails the commit, a micro-batch or the
other services: the failure is counted and logged when it starts, and a retry is timed, each waiting twice as long
(from ``catalog.retry_seconds`` up to ``catalog.retry_max_seconds``), so the entries catch up after an outage even
when no commit follows it. The first sync that gets through catches up to the newest commit, whatever was missed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from laketide.catalog import CatalogSync, open_catalog
from laketide.config import JobConfig
from laketide.coordinator.metrics import Metrics
from laketide.table import Table
from laketide.table.errors import LaketideError, first_line
from laketide.table.reading.view_sync import ViewSync
from laketide.writer.job.views import CatalogView

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _State:
    synced: str | None = None
    failing_since: float | None = None
    failures: int = 0
    last_error: str | None = None


class CatalogService:
    """Syncs ``table``'s entries after commits, never raising. ``retry``: the first wait after a failure and the
    longest (the waits double between); ``clock``: monotonic seconds, for the backoff;
    ``timer``: makes the thread a sync runs in, at once after a commit or timed after a failure
    (``threading.Timer``'s signature).

    Threads: the services' thread calls ``run`` after each commit, which starts a sync's thread; the job's thread
    calls ``finish``. One sync runs at a time (``_one``); a thread that finds one running has it run once more when
    done (``_again``), so the newest commit is not missed. ``_state`` is replaced whole: the API's threads read it
    without a lock."""

    def __init__(
        self,
        sync: CatalogSync,
        table: Table,
        views: ViewSync,
        metrics: Metrics,
        retry: tuple[float, float] = (5.0, 300.0),
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[float, Callable[[], None]], threading.Timer] = threading.Timer,
    ):
        self.sync, self.table, self.views, self.metrics = sync, table, views, metrics
        self.clock, self.timer = clock, timer
        self._first_retry, self._longest_retry = retry
        self._state = _State()
        self._backoff = 0.0
        self._next_try = float("-inf")
        self._one = threading.Lock()  # held by the sync running
        self._again = False
        self._lock = threading.Lock()  # guards the two fields below
        self._retry: threading.Timer | None = None
        self._finished = False

    def run(self) -> None:
        """Have the entries brought up to the newest commit, in the sync's own thread; nothing while a failure's
        backoff runs (its timed retry comes then)."""
        if self.clock() >= self._next_try:
            self._start(0.0)

    def finish(self) -> None:
        """The job ends: no more retries, and one last try whatever the backoff, so that an engine finds the last
        commit once the job is gone."""
        self.stop()
        with self._one:  # after the sync running, if one is
            self._once()

    def stop(self) -> None:
        """No more timed retries (a job that failed, or ends)."""
        with self._lock:
            self._finished = True
            retry, self._retry = self._retry, None
        if retry is not None:
            retry.cancel()

    def view(self) -> CatalogView:
        state, sync = self._state, self.sync
        retry = max(0.0, self._next_try - self.clock()) if state.failing_since is not None else None
        return CatalogView(
            catalog=sync.catalog.name,
            database=sync.database,
            table=sync.name,
            synced=state.synced,
            failing_since=state.failing_since,
            failures=state.failures,
            last_error=state.last_error,
            retry_in_seconds=round(retry, 1) if retry is not None else None,
        )

    def _sync(self) -> None:
        # the lock is released before ``_again`` is read again: a call that came meanwhile either set it in time
        # or finds the lock free and syncs itself
        self._again = True
        while self._again and self._one.acquire(blocking=False):
            try:
                self._again = False
                synced = self._once()
            finally:
                self._one.release()
            if not synced:
                return  # the timed retry comes

    def _once(self) -> bool:
        view = self.views.view()
        try:
            result = self.sync.sync(self.table, view.timeline, view)
        except Exception as exc:  # a catalog's failure, or a bug in its client: the job outlives both
            self._failed(exc)
            return False
        finally:
            # one connection a sync: one left open between commits would go stale behind a load balancer or a
            # restarted metastore
            self.sync.catalog.close()
        if self._state.failing_since is not None:
            log.info(
                "%s: the catalog answers again after %d failed syncs; its entries are at %s",
                self.sync.catalog.name,
                self._state.failures,
                result.instant,
            )
        self._state = _State(result.instant)
        self._backoff, self._next_try = 0.0, float("-inf")
        return True

    def _failed(self, exc: Exception) -> None:
        self.metrics.catalog_sync_failures.inc()
        self._backoff = min(self._longest_retry, self._backoff * 2 or self._first_retry)
        self._next_try = self.clock() + self._backoff
        state = self._state
        if state.failing_since is None:
            log.warning(
                "catalog sync failed (the commits stand; tried again in %.0f s, and after each commit): %s",
                self._backoff,
                exc,
                exc_info=not isinstance(exc, LaketideError),
            )
        self._state = _State(state.synced, state.failing_since or time.time(), state.failures + 1, first_line(exc))
        self._start(self._backoff)

    def _start(self, delay: float) -> None:
        """A sync in a thread of its own, at once or (a retry) after ``delay`` seconds; none once the job finished."""
        with self._lock:
            if self._finished:
                return
            thread = self.timer(delay, self._sync)
            thread.daemon = True  # a sync hanging on a catalog never holds the process up
            if delay:
                if self._retry is not None:
                    self._retry.cancel()
                self._retry = thread
        thread.start()


def catalog_service_for(config: JobConfig, table: Table, views: ViewSync, metrics: Metrics) -> CatalogService | None:
    """The sync ``[catalog]`` asks for; none when it is unset. Nothing is called on the catalog yet: one that cannot
    be reached at start is found so at the first sync, which the job outlives."""
    section = config.catalog
    if section.kind is None or section.database is None:
        return None
    client = open_catalog(section.kind, section.uri, section.options or config.storage.options)
    sync = CatalogSync(
        client, section.database, section.table or table.name, section.support_timestamp, section.delta_table
    )
    return CatalogService(sync, table, views, metrics, (section.retry_seconds, section.retry_max_seconds))
