"""The job's catalog sync (``writer/job/catalog_sync.py``) against a catalog that fails and comes back: the retry is
timed with a growing backoff, a call during it does nothing, the first sync that gets through catches up, the
job's end tries once whatever the backoff. Pure logic: the catalog is an in-memory one, the clock and the timer
are the test's; the metastore itself is in ``tests/catalog``."""

from __future__ import annotations

from writes import history

from laketide.catalog import CatalogSync
from laketide.catalog.catalog import CatalogUnavailable
from laketide.coordinator.metrics import Metrics
from laketide.table.reading.view_sync import ViewSync
from laketide.writer.job.catalog_sync import CatalogService
from laketide.writer.job.health import assess

NOW = 1_800_000_000.0


class MemoryCatalog:
    """A catalog in a dict, down while ``down`` is set."""

    name = "memory"

    def __init__(self):
        self.down = False
        self.tables: dict = {}
        self.parts: dict = {}
        self.closed = 0

    def _answer(self):
        if self.down:
            raise CatalogUnavailable("memory: no answer")

    def ensure_database(self, database):
        self._answer()

    def table(self, database, name):
        self._answer()
        return self.tables.get(name)

    def create_table(self, database, entry):
        self._answer()
        self.tables[entry.name] = entry

    def alter_table(self, database, entry, cascade):
        self._answer()
        self.tables[entry.name] = entry

    def partitions(self, database, name):
        self._answer()
        return list(self.parts.get(name, {}).values())

    def add_partitions(self, database, name, partitions):
        self._answer()
        self.parts.setdefault(name, {}).update({p.values: p for p in partitions})

    def drop_partitions(self, database, name, partitions):
        self._answer()
        for p in partitions:
            self.parts.get(name, {}).pop(p.values, None)

    def close(self):
        self.closed += 1


class Timers:
    """``threading.Timer``'s signature: a sync asked for after a commit (no delay) runs when started, in the test's
    thread; a timed retry is listed in ``made`` and fired by the test."""

    def __init__(self):
        self.made: list[Timers.Timer] = []

    class Timer:
        def __init__(self, interval, function):
            self.interval, self.function, self.started, self.cancelled, self.daemon = (
                interval,
                function,
                False,
                False,
                False,
            )

        def start(self):
            self.started = True
            if not self.interval:
                self.function()

        def cancel(self):
            self.cancelled = True

    def __call__(self, interval, function):
        timer = Timers.Timer(interval, function)
        if interval:
            self.made.append(timer)
        return timer


FIRST_RETRY, LONGEST_RETRY = 5.0, 12.0


def _service(tmp_path, catalog):
    table, instants, _, _ = history(tmp_path / "t", width=4)
    clock = [0.0]
    timers = Timers()
    service = CatalogService(
        CatalogSync(catalog, "lake", "t"),
        table,
        ViewSync(table),
        Metrics("t"),
        (FIRST_RETRY, LONGEST_RETRY),
        lambda: clock[0],
        timers,
    )
    return service, instants, clock, timers


def test_an_outage_is_retried_on_a_timer_with_a_growing_backoff_and_caught_up_without_a_commit(tmp_path):
    catalog = MemoryCatalog()
    catalog.down = True
    service, instants, clock, timers = _service(tmp_path, catalog)
    service.run()
    view = service.view()
    assert view.failing_since is not None and view.failures == 1 and view.synced is None
    assert "no answer" in (view.last_error or "") and view.retry_in_seconds == FIRST_RETRY
    assert [t.interval for t in timers.made] == [FIRST_RETRY] and timers.made[0].daemon
    service.run()  # a commit during the backoff: no call on the catalog
    assert service.view().failures == 1 and len(timers.made) == 1
    clock[0] = FIRST_RETRY
    timers.made[-1].function()  # still down: the next wait is twice as long
    assert service.view().failures == 2 and timers.made[-1].interval == 2 * FIRST_RETRY
    clock[0] += 2 * FIRST_RETRY
    timers.made[-1].function()  # the wait doubles no further than the longest
    assert service.view().failures == 3 and timers.made[-1].interval == LONGEST_RETRY
    catalog.down = False
    clock[0] += LONGEST_RETRY
    timers.made[-1].function()  # back, and no commit came: the timer's try catches up
    view = service.view()
    assert view.failing_since is None and view.failures == 0 and view.last_error is None
    assert view.synced == instants[-1] and catalog.tables["t"].parameters["last_commit_time_sync"] == instants[-1]
    assert len(timers.made) == 3, "no retry is timed once a sync got through"
    assert catalog.closed == 4, "a connection a sync"


def test_the_jobs_end_tries_once_whatever_the_backoff_and_times_no_more_retries(tmp_path):
    catalog = MemoryCatalog()
    catalog.down = True
    service, instants, clock, timers = _service(tmp_path, catalog)
    service.run()
    catalog.down = False
    service.finish()
    assert timers.made[0].cancelled and service.view().synced == instants[-1]
    catalog.down = True
    service.run()
    clock[0] += 1000
    service.run()
    assert len(timers.made) == 1, "a finished job times no retry"


def test_a_failing_catalog_makes_a_healthy_job_behind_and_says_where_the_entries_stand(tmp_path):
    catalog = MemoryCatalog()
    service, instants, _, _ = _service(tmp_path, catalog)
    service.run()
    catalog.down = True
    service.run()  # no commit came, but a sync was asked for: the first failure
    view = service.view()
    assert view.synced == instants[-1]
    health = assess([], [], None, None, False, NOW, NOW, catalog=view.model_copy(update={"failing_since": NOW - 60}))
    assert health.state == "behind"
    assert "memory catalog has failed 1 sync over 60 s" in health.summary and instants[-1] in health.summary
    assert assess([], [], None, None, False, NOW, NOW, catalog=None).state == "idle"
