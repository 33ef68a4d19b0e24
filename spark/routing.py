"""Which task a shuffle sends each row to: one index shard per assign task, file groups balanced over the write tasks.

``repartition(n, column)`` sends a row to ``pmod(murmur3(value), n)``, so two
shards can share a task and leave another idle: with 4 shards in 4 tasks, one
task often gets half the micro-batch. A route table names, for each of the n
tasks, a value that Spark's own hash sends there; repartitioning by
``routes[slot]`` makes the slot the task.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_int_hash(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an int (``Murmur3_x86_32.hashInt``, seed 42): what its hash partitioning computes."""
    k1 = _rotl((value & _MASK) * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h1 = (_rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the length in bytes
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & _MASK
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def hash_routes(tasks: int) -> tuple[int, ...]:
    """For each of ``tasks`` shuffle partitions, an int that Spark's hash partitioning (``pmod(hash(v), tasks)``) sends there."""
    routes: dict[int, int] = {}
    value = 0
    while len(routes) < tasks:
        routes.setdefault(spark_int_hash(value) % tasks, value)
        value += 1
    return tuple(routes[task] for task in range(tasks))


def routed(slot: Column, routes: tuple[int, ...]) -> Column:
    """The value to hash-partition by so that a row goes to task ``slot``."""
    return F.element_at(F.array(*[F.lit(r) for r in routes]), slot + 1)
