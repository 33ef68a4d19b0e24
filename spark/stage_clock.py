"""Where a micro-batch's time goes on Spark: wall seconds per driver step, and the Python seconds of each Spark stage's
tasks.

A driver step's wall time includes Spark's scheduling and the JVM; the task
seconds, summed over tasks by accumulators, are what our Python code spent
inside them. Both go into each batch report and the benchmark JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from pyspark import SparkContext

from laketide.writer.clock import Stage, StepClock, time_stage

TASK_STAGES = ("prepare", "assign", "write")


class StageClock(StepClock):
    """Created once per job: accumulators are registered with the SparkContext for good, so
    they are reused, and each micro-batch reads how much they grew."""

    def __init__(self, context: SparkContext):
        super().__init__()
        self._tasks = {name: context.accumulator(0.0) for name in TASK_STAGES}
        self._task_start: dict[str, float] = {}

    def start(self) -> None:
        super().start()
        self._task_start = {name: acc.value for name, acc in self._tasks.items()}

    def report(self) -> dict[str, float]:
        tasks = {
            f"{name}_tasks": round(acc.value - self._task_start.get(name, 0.0), 3) for name, acc in self._tasks.items()
        }
        return {**self.seconds, **{k: v for k, v in tasks.items() if v}}

    def timed(self, stage: str, fn: Stage) -> Callable[[Iterable], Iterator]:
        """``fn`` (a ``mapInArrow`` function, or a driver thread's stage) with its time added to ``stage``'s
        accumulator."""
        accumulator = self._tasks[stage]
        return time_stage(fn, lambda spent: accumulator.add(spent))
