"""Shuffles send each index shard to its own task and spread file groups evenly over the write tasks."""

from __future__ import annotations

from pyspark.sql import functions as F

from laketide.spark.routing import hash_routes, routed, spark_int_hash
from laketide.writer.slots import balanced_slots


def test_our_int_hash_is_sparks(spark):
    values = [0, 1, -1, 42, 2**31 - 1, -(2**31), 123456789, -987654321]
    got = spark.createDataFrame([(v,) for v in values], "v INT").select(F.hash("v").alias("h")).collect()
    assert [r.h for r in got] == [spark_int_hash(v) for v in values]


def test_routing_by_route_value_sends_each_slot_to_its_own_task(spark):
    for tasks in (1, 4, 7):
        routes = hash_routes(tasks)
        slots = spark.range(tasks * 50).select((F.col("id") % tasks).cast("int").alias("slot"))
        placed = slots.repartition(tasks, routed(F.col("slot"), routes)).select("slot", F.spark_partition_id().alias("task")).distinct().collect()
        assert sorted((r.slot, r.task) for r in placed) == [(t, t) for t in range(tasks)]


def test_balanced_slots_even_out_sizes():
    sizes = {f"g{i}": size for i, size in enumerate([100, 90, 10, 10, 10, 50, 40, 30])}
    slots = balanced_slots(sizes, 3)
    loads = [sum(sizes[g] for g, s in slots.items() if s == t) for t in range(3)]
    assert set(slots) == set(sizes) and max(loads) - min(loads) <= 20
    equal = list(balanced_slots({f"g{i}": 7 for i in range(16)}, 4).values())
    assert [equal.count(t) for t in range(4)] == [4, 4, 4, 4]
