"""A running writer's catalog sync: after each commit, in the table services' thread, the catalog's entries are
brought up to the commit (``catalog.CatalogSync``). A catalog that fails (unreachable, or refusing) never fails the
commit, a micro-batch or the other services: the failure is counted and logged when it starts, the next tries
wait longer each time (up to ``MAX_BACKOFF_SECONDS``), and the first sync that gets through catches up to the
newest commit, whatever was missed."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from laketide.catalog import CatalogSync, open_catalog
from laketide.config import JobConfig
from laketide.coordinator.metrics import Metrics
from laketide.table import Table
from laketide.table.errors import LaketideError, first_line
from laketide.table.reading.view_sync import ViewSync

log = logging.getLogger(__name__)
FIRST_BACKOFF_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 300.0


@dataclass(frozen=True)
class CatalogState:
    """Where the catalog's entries stand, for the API: replaced whole by the services' thread, read by the API's."""

    catalog: str
    synced: str | None = None  # the commit the entries stand at
    failing_since: float | None = None
    last_error: str | None = None


class CatalogService:
    """Syncs ``table``'s entries after commits, never raising. ``clock``: monotonic seconds, for the backoff."""

    def __init__(
        self,
        sync: CatalogSync,
        table: Table,
        views: ViewSync,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.sync, self.table, self.views, self.metrics, self.clock = sync, table, views, metrics, clock
        self.state = CatalogState(sync.catalog.name)
        self._backoff = 0.0
        self._next_try = float("-inf")

    def run(self) -> None:
        """Bring the entries up to the newest commit, unless a failure's backoff has not run out."""
        if self.clock() < self._next_try:
            return
        view = self.views.view()
        try:
            result = self.sync.sync(self.table, view.timeline, view)
        except LaketideError as exc:
            self._failed(exc)
            return
        finally:
            # one connection a sync: one left open between commits would go stale behind a load balancer or a
            # restarted metastore
            self.sync.catalog.close()
        if self.state.failing_since is not None:
            log.info("%s: the catalog answers again, its entries are at %s", self.sync.catalog.name, result.instant)
        self.state = CatalogState(self.sync.catalog.name, result.instant)
        self._backoff, self._next_try = 0.0, float("-inf")

    def _failed(self, exc: LaketideError) -> None:
        self.metrics.catalog_sync_failures.inc()
        self._backoff = min(MAX_BACKOFF_SECONDS, self._backoff * 2 or FIRST_BACKOFF_SECONDS)
        self._next_try = self.clock() + self._backoff
        if self.state.failing_since is None:
            log.warning("catalog sync failed (the commits stand; tried again in %.0f s): %s", self._backoff, exc)
        self.state = CatalogState(
            self.state.catalog, self.state.synced, self.state.failing_since or time.time(), first_line(exc)
        )


def catalog_service_for(config: JobConfig, table: Table, views: ViewSync, metrics: Metrics) -> CatalogService | None:
    """The sync ``[catalog]`` asks for; none when it is unset. Nothing is called on the catalog yet: one that cannot
    be reached at start is found so at the first sync, which the job outlives."""
    section = config.catalog
    if section.kind is None or section.database is None:
        return None
    client = open_catalog(section.kind, section.uri, section.options or config.storage.options)
    sync = CatalogSync(client, section.database, section.table or table.name, section.support_timestamp)
    return CatalogService(sync, table, views, metrics)
