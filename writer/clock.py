"""Where a micro-batch's time goes: wall seconds per step, and the seconds each stage function spent.

A step's wall time (read, plan, write, commit, ...) is charged by ``lap``; a stage function wrapped by
``timed`` charges the time it spent producing rows to ``<stage>_tasks``. The Spark adapter's
``StageClock`` sums those over Spark's tasks with accumulators instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# a stage function: what Spark's mapPartitions and mapInArrow take (an iterator of its input, one of its output)
Stage = Callable[[Any], Iterator]


def time_stage(fn: Stage, charge: Callable[[float], None]) -> Callable[[Iterable], Iterator]:
    """``fn`` with the time spent producing its output passed to ``charge`` once it is done."""

    def run(batches: Iterable) -> Iterator:
        spent = 0.0
        produced = fn(batches)
        while True:
            started = time.perf_counter()
            try:
                batch = next(produced)
            except StopIteration:
                break
            finally:
                spent += time.perf_counter() - started
            yield batch
        charge(spent)

    return run


class StepClock:
    """The clock of one writer, restarted for each micro-batch.

    The micro-batch thread laps it; the driver's worker threads charge stage time at once, so
    ``_spent`` is guarded by ``_lock``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = 0.0
        self._lock = threading.Lock()
        self._spent: dict[str, float] = {}

    def start(self) -> None:
        self.seconds = {}
        self._last = time.monotonic()
        with self._lock:
            self._spent = {}

    def lap(self, step: str) -> None:
        """Charge the time since the last lap to ``step``."""
        now = time.monotonic()
        self.seconds[step] = round(self.seconds.get(step, 0.0) + now - self._last, 3)
        self._last = now

    def report(self) -> dict[str, float]:
        with self._lock:
            spent = {f"{name}_tasks": round(seconds, 3) for name, seconds in self._spent.items() if seconds}
        return {**self.seconds, **spent}

    def timed(self, stage: str, fn: Stage) -> Callable[[Iterable], Iterator]:
        return time_stage(fn, lambda spent: self._charge(stage, spent))

    def _charge(self, stage: str, spent: float) -> None:
        with self._lock:
            self._spent[stage] = self._spent.get(stage, 0.0) + spent
