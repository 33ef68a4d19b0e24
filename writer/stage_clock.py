"""Where a micro-batch's time goes: wall seconds per driver step, and the Python seconds of each Spark stage's tasks.

A driver step's wall time includes Spark's scheduling and the JVM; the task
seconds, summed over tasks by accumulators, are what our Python code spent
inside them. Both go into each batch report and the benchmark JSON.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from pyspark import SparkContext

TASK_STAGES = ("prepare", "assign", "write")


class StageClock:
    """Created once per job: accumulators are registered with the SparkContext for good, so
    they are reused, and each micro-batch reads how much they grew."""

    def __init__(self, context: SparkContext):
        self._tasks = {name: context.accumulator(0.0) for name in TASK_STAGES}
        self.seconds: dict[str, float] = {}
        self._last = 0.0
        self._task_start: dict[str, float] = {}

    def start(self) -> None:
        self.seconds = {}
        self._last = time.monotonic()
        self._task_start = {name: acc.value for name, acc in self._tasks.items()}

    def lap(self, step: str) -> None:
        """Charge the time since the last lap to ``step``."""
        now = time.monotonic()
        self.seconds[step] = round(self.seconds.get(step, 0.0) + now - self._last, 3)
        self._last = now

    def report(self) -> dict[str, float]:
        tasks = {f"{name}_tasks": round(acc.value - self._task_start.get(name, 0.0), 3) for name, acc in self._tasks.items()}
        return {**self.seconds, **{k: v for k, v in tasks.items() if v}}

    def timed(self, stage: str, fn: Callable[[Iterator], Iterator]) -> Callable[[Iterator], Iterator]:
        """``fn`` (a ``mapInArrow`` function) with the time spent producing its output added to ``stage``'s accumulator."""
        accumulator = self._tasks[stage]

        def run(batches: Iterator) -> Iterator:
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
            accumulator.add(spent)

        return run
