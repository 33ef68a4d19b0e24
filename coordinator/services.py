"""Table services after commits: cleaning, then archival, under the writer's lease.

They run in a background thread, one round at a time, or inline when
``background`` is off. A background round never blocks a micro-batch; a
commit that comes while one runs starts none (the running one, or the next,
catches up). Each service is crash-safe through its own steps, so a round cut
short is finished by the next.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from laketide.coordinator.lease import LeaseLost

log = logging.getLogger(__name__)


class TableServices:
    def __init__(self, services: Sequence[tuple[str, Callable[[], object]]], background: bool = True):
        """``services`` are (name, run) pairs, run in order after each commit."""
        self.services = list(services)
        self.background = background
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def after_commit(self) -> None:
        if not self.background:
            self._run()
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._run, name="laketide-table-services", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        for name, run in self.services:
            try:
                run()
            except LeaseLost as exc:
                log.warning("%s stopped: %s", name, exc)
                return
            except Exception:
                log.exception("%s failed; the next commit starts it again, and it finishes what this one began", name)
                return

    def wait(self, timeout: float = 300.0) -> None:
        """Wait for a running round (before the lease is released, so it is not released under it)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
