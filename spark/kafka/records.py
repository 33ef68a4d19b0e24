"""Kafka messages as Arrow, in Spark's Kafka source's columns: what one ``consume`` returned, made into one batch a
column at a time, then cut by topic-partition.

confluent-kafka hands on a Python object a message, and reading it costs a call a field: a message at a time
(a tuple each, then a column of each) took eight times as long as a column at a time (10,000 messages: 40 ms
against 5). Routing the messages one by one to their partition's list cost as much again; cutting the batch by
its partition column costs one sort.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message

from laketide.spark.kafka.brokers import Place

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
# Spark's Kafka source's columns
SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(HEADER)),
    ]
)


def as_batch(messages: list[Message]) -> pa.RecordBatch:
    """Messages that are records (no error events), of any partitions, as one batch of Spark's Kafka columns."""
    n = len(messages)
    stamps = [m.timestamp() for m in messages]
    kinds = pa.array([kind for kind, _ in stamps], pa.int32())
    millis = pa.array([at if kind else None for kind, at in stamps], pa.int64())
    headers = [m.headers() for m in messages]
    if any(headers):
        listed = pa.array([[{"key": k, "value": v} for k, v in (h or [])] for h in headers], pa.list_(HEADER))
    else:  # none: an empty list each, as a record without headers has
        listed = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADER))
    columns = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.array([m.topic() for m in messages], pa.string()),
        pa.array([m.partition() for m in messages], pa.int32()),
        pa.array([m.offset() for m in messages], pa.int64()),
        pc.multiply(millis, 1000).cast(SCHEMA.field("timestamp").type),
        kinds,
        listed,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def by_place(batch: pa.RecordBatch) -> Iterator[tuple[Place, pa.RecordBatch]]:
    """``batch``'s rows by topic-partition, each partition's in the order they had (librdkafka hands on a
    partition's records in offset order)."""
    if not batch.num_rows:
        return
    topics = pc.dictionary_encode(batch.column("topic"))
    names = topics.dictionary.to_pylist()
    codes = (topics.indices.to_numpy().astype(np.int64) << 32) | batch.column("partition").to_numpy()
    if codes[0] == codes[-1] and not (codes != codes[0]).any():
        yield (names[int(codes[0] >> 32)], int(codes[0] & 0xFFFFFFFF)), batch
        return
    order = np.argsort(codes, kind="stable")
    codes = codes[order]
    ordered = batch.take(pa.array(order))
    starts = np.concatenate(([0], np.flatnonzero(codes[1:] != codes[:-1]) + 1, [len(codes)]))
    for start, stop in itertools.pairwise(starts):
        code = int(codes[start])
        yield (names[code >> 32], code & 0xFFFFFFFF), ordered.slice(int(start), int(stop - start))


def value_bytes(batch: pa.RecordBatch) -> int:
    """The bytes of ``batch``'s values (of its slice only, where it is one)."""
    values = batch.column("value")
    if not len(values):
        return 0
    offsets = np.frombuffer(values.buffers()[1], np.int32, count=len(values) + 1, offset=4 * values.offset)
    return int(offsets[-1] - offsets[0])
