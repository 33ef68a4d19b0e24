"""Which task a shuffle sends each row to: one index shard per assign task, file groups balanced over the write tasks.

``repartition(n, column)`` sends a row to ``pmod(murmur3(value), n)``, so two
shards can share a task and leave another idle: with 4 shards in 4 tasks, one
task often gets half the micro-batch. A route table names, for each of the n
tasks, a value that Spark's own hash sends there; repartitioning by
``routes[slot]`` makes the slot the task.
"""

from __future__ import annotations

import heapq

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F


def hash_routes(spark: SparkSession, tasks: int) -> tuple[int, ...]:
    """For each of ``tasks`` shuffle partitions, an int that Spark's hash partitioning sends there."""
    routes: dict[int, int] = {}
    candidates = 0
    while len(routes) < tasks:
        start, candidates = candidates, max(64, candidates * 2) * tasks
        values = spark.range(start, candidates).select(F.col("id").cast("int").alias("value"))
        # the expression HashPartitioning evaluates: pmod(murmur3 hash with seed 42, tasks)
        for row in values.select("value", F.pmod(F.hash("value"), F.lit(tasks)).alias("task")).collect():
            routes.setdefault(row.task, row.value)
    return tuple(routes[task] for task in range(tasks))


def routed(slot: Column, routes: tuple[int, ...]) -> Column:
    """The value to hash-partition by so that a row goes to task ``slot``."""
    return F.element_at(F.array(*[F.lit(r) for r in routes]), slot + 1)


def balanced_slots(sizes: dict[str, int], tasks: int) -> dict[str, int]:
    """Each file group's write task: the largest groups first, each to the least loaded task."""
    loads = [(0, task) for task in range(tasks)]
    slots = {}
    for file_id, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        load, task = heapq.heappop(loads)
        slots[file_id] = task
        heapq.heappush(loads, (load + max(size, 1), task))
    return slots
