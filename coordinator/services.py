"""Table services after commits: compaction, cleaning, archival and the mirror, under the writer's lease.

They run in a background thread, one round at a time, or inline when
``background`` is off. A background round never blocks a micro-batch; a
commit that comes while one runs starts none (the running one, or the next,
catches up). Each service is crash-safe through its own steps, so a round cut
short is finished by the next.

A completed instant stands whatever a service after it does. A failure is
logged with the instant, counted, and the service runs again after the next
micro-batch; only after ``limit`` failures in a row of one service does the
job stop (``ServiceFailures``), and then with the commits in place.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence

from laketide.coordinator.lease import LeaseLost
from laketide.coordinator.metrics import Metrics
from laketide.table.errors import LaketideError
from laketide.table.format.damage import TableDamaged

log = logging.getLogger(__name__)


class TableServiceFailed(LaketideError, RuntimeError):
    """A table service failed too many times in a row; every commit before it stands."""


class ServiceFailures:
    """Failures in a row of each table service.

    Shared by the micro-batch thread (inline services) and the table-services
    thread, so the counts and ``fatal`` are guarded by ``_lock``.
    """

    def __init__(
        self,
        limit: int = 5,
        metrics: Metrics | None = None,
        on_failure: Callable[[str, str | None, BaseException], None] | None = None,
    ):
        """``on_failure(service, instant, error)`` is told of each failure (the job's status shows them)."""
        self.limit = limit
        self.metrics = metrics or Metrics()
        self._lock = threading.Lock()
        self._in_a_row: dict[str, int] = defaultdict(int)
        self.fatal: TableServiceFailed | TableDamaged | None = None
        self.on_failure = on_failure

    def stop_with(self, damage: TableDamaged) -> None:
        """A damaged table stops the job at once: retrying cannot mend a file, and nothing more may be written."""
        with self._lock:
            if self.fatal is None or not isinstance(self.fatal, TableDamaged):
                self.fatal = damage

    def run(self, name: str, action: Callable[[], object], instant: str | None = None) -> bool:
        """Run one service; ``False`` when it failed (logged and counted). ``LeaseLost`` is not a service failure."""
        try:
            action()
        except LeaseLost:
            raise
        except TableDamaged as damage:
            self.metrics.service_failures.labels(name).inc()
            self._tell(name, instant, damage)
            log.error(
                "%s after %s found a damaged table; the job stops and writes nothing more: %s",
                name,
                instant or "start",
                damage,
            )
            self.stop_with(damage)
            return False
        except Exception as exc:
            with self._lock:
                self._in_a_row[name] += 1
                count = self._in_a_row[name]
                if count >= self.limit and self.fatal is None:
                    self.fatal = TableServiceFailed(
                        f"table service '{name}' failed {count} times in a row (last, after "
                        f"{instant or 'start'}: {exc}); "
                        "every commit stands. Fix the cause shown in the log and start the job again: the "
                        "service runs again at start "
                        f"(services.max_consecutive_failures = {self.limit})"
                    )
            self.metrics.service_failures.labels(name).inc()
            self._tell(name, instant, exc)
            log.exception(
                "%s after %s failed (%d in a row); the commit stands, and %s runs again after the next micro-batch",
                name,
                instant or "start",
                count,
                name,
            )
            return False
        with self._lock:
            self._in_a_row[name] = 0
        return True

    def _tell(self, name: str, instant: str | None, error: BaseException) -> None:
        if self.on_failure is not None:
            self.on_failure(name, instant, error)

    def raise_if_fatal(self) -> None:
        with self._lock:
            fatal = self.fatal
        if fatal is not None:
            raise fatal


class TableServices:
    def __init__(
        self,
        services: Sequence[tuple[str, Callable[[], object]]],
        background: bool = True,
        failures: ServiceFailures | None = None,
        gate: threading.Semaphore | None = None,
    ):
        """``services`` are (name, run) pairs, run in order after each commit. ``gate``: the rounds several tables'
        services may run at once (a job of a whole database shares one); a round it turns away is owed
        (``owed``) until ``after_commit`` is called again."""
        self.services = list(services)
        self.background = background
        self.failures = failures or ServiceFailures()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.gate = gate
        self.owed = False

    def after_commit(self, instant: str | None = None) -> None:
        if not self.background:
            self._run(instant)
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            gate = self.gate
            if gate is not None and not gate.acquire(blocking=False):
                self.owed = True
                return
            self.owed = False
            self._thread = threading.Thread(
                target=self._gated, args=(instant, gate), name="laketide-table-services", daemon=True
            )
            self._thread.start()

    def _gated(self, instant: str | None, gate: threading.Semaphore | None) -> None:
        try:
            self._run(instant)
        finally:
            if gate is not None:
                gate.release()

    def _run(self, instant: str | None) -> None:
        for name, run in self.services:
            try:
                if not self.failures.run(name, run, instant):
                    return  # the next round starts this one again, and it finishes what this one began
            except LeaseLost as exc:
                log.warning("%s stopped: %s", name, exc)
                return

    def finish(self) -> None:
        """One last round in this thread, after the running one: what the last commit scheduled (a
        compaction, a clean) is done before the job exits, not left for the next start."""
        self.wait()
        self._run(None)

    def wait(self, timeout: float = 300.0) -> None:
        """Wait for a running round (before the lease is released, so it is not released under it)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
