"""The timeline steps of every action that is not a write: clean, rollback, savepoint, restore, compaction, archival.

Each goes requested → inflight → completed, one file per step, every step retried (``RetryPolicy``), and
a completed file written once (an earlier attempt that landed counts). ``TimelineAction`` gives each step
one meaning for all of them. What an action does between its steps, and the order of its file deletions,
stays in the action's own module: the crash tests pin that order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from laketide.table.format.instant import Instant, State
from laketide.table.format.timeline import Timeline

if TYPE_CHECKING:
    from laketide.coordinator.lifecycle import Coordinator


class TimelineAction:
    """The steps of one kind of action (``clean``, ``rollback``, ...) on the timeline of one coordinator's table."""

    def __init__(self, coordinator: Coordinator, action: str):
        self.coordinator = coordinator
        self.action = action
        self._writer = coordinator.timeline_writer

    def new_time(self, timeline: Timeline) -> str:
        """A new instant time, after everything on ``timeline``."""
        return self.coordinator.clock.next(after=timeline.last_timestamp)

    def request(self, instant_time: str, plan: bytes = b"") -> Instant:
        """Write the requested file, with the action's plan."""
        return self._run(Instant(instant_time, self.action, State.REQUESTED), plan, "plan")

    def start(self, instant_time: str, body: bytes = b"", once: bool = False) -> Instant:
        """Write the inflight file; ``once``: keep one an earlier attempt wrote."""
        inflight = Instant(instant_time, self.action, State.INFLIGHT)
        if once and self._writer.exists(inflight):
            return inflight
        return self._run(inflight, body, "start")

    def complete(self, instant_time: str, metadata: bytes) -> Instant:
        """Write the completed file once: an earlier attempt that landed with the same metadata counts."""
        completed = Instant(instant_time, self.action, State.COMPLETED)
        return self.coordinator.retry.run(
            lambda: self.coordinator.write_completed(completed, metadata), f"complete {self.action} {instant_time}"
        )

    def exists(self, instant_time: str, state: State) -> bool:
        return self._writer.exists(Instant(instant_time, self.action, state))

    def remove(self, *instants: Instant) -> None:
        """Delete timeline files, in the order given (each action's order is its own)."""
        for instant in instants:
            self._writer.delete(instant)

    def remove_all_states(self, instant_time: str, action: str) -> None:
        """Completed, then inflight, then requested: a crash part way leaves a pending instant, never a dangling one."""
        self._writer.delete_all_states(instant_time, action)

    def _run(self, instant: Instant, body: bytes, verb: str) -> Instant:
        return self.coordinator.retry.run(
            lambda: self._writer.write(instant, body), f"{verb} {self.action} {instant.timestamp}"
        )
