"""Records of offset ranges through one Kafka consumer, as Arrow, without Spark: what a task of laketide's Kafka
source reads (a consumer made for its split), and what the driver reads of a micro-batch small enough for it (one
consumer kept open for the whole job).

A kept consumer pays for its connections and its first fetch once. Between micro-batches librdkafka keeps
fetching ahead, and what a read took past its ranges' ends is held for the next read, which, starting where
the last ended, finds its records waiting: on Tansu, 10,000 records 50,000 deep in a 3-partition topic took a
new consumer 0.8-1 s and a kept one 0.05 s. What is held is bounded (``HOLD_BYTES``): past it, partitions the
read does not wait on are paused, and resumed by the read that next needs them. A range that does not start
where its partition's last read ended (a restart, a skip past lost offsets) is read afresh from its start.

A read never hands on a record outside its ranges, and never skips one inside: offsets no record comes for
are gone (a compacted topic) or transaction markers, known by the next record's offset or the partition's end.
A range that starts where the broker no longer holds records (retention passed it) stops the read with
``OffsetsGone`` (the consumer never resets on its own); a read that fails leaves its partitions to be read afresh.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from laketide.spark.kafka_brokers import OffsetRange, Place
from laketide.table.errors import Unavailable

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
READ_TIMEOUT = 120.0  # seconds a read may wait for the records the broker said it has
HOLD_BYTES = 64 * 2**20  # values held past the ranges' ends before partitions not waited on are paused
# librdkafka's queue of fetched records, for all partitions (its default is 64 MiB)
QUEUE_KBYTES = 32 * 1024
# how long a broker may hold a fetch that finds no new record (librdkafka's default is 500 ms). Kafka answers a
# held fetch as soon as records arrive; Tansu does not, so its newest records waited that long (records' time to a
# kept consumer at 10,000 a second: p50/p99 0.10-0.17/0.28 s at 500 ms, 0.08/0.14 s at 100, 0.07/0.12 at 10). Too
# short a wait starves a deep read there instead: Tansu (memory storage) answers nothing to a fetch it cannot build
# within the wait, so a kept consumer 50,000 records deep took 0.4-1.6 s a 10,000-record read at 50 ms and 0.01-0.09 s
# at 250 or 500, and two consumers fetching at once at 50 ms got nothing within 120 s
FETCH_WAIT_MS = 250
# a consumer made to read one backlog and closed (a Spark task's): only its last fetch can wait
BACKLOG_FETCH_WAIT_MS = 500
# records a consume asks for at least, and the seconds it waits for them: it returns early only once it has them
# all, so a read's last call waited this long for records that had come
ASK_AT_LEAST, CONSUME_WAIT = 1_000, 0.02


class OffsetsGone(Unavailable):
    """A range starts at offsets the broker no longer holds: the caller plans again from what it holds."""


@dataclass
class _Partition:
    """What the consumer has of one topic-partition. ``handed``: where the last read's range ended; ``known``:
    every offset below it was delivered (handed on, held, or found absent); ``held``: messages past the last range."""

    handed: int
    known: int
    held: list[Message] = field(default_factory=list)
    held_bytes: int = 0
    paused: bool = False


class RangeConsumer:
    """One consumer, assigned the partitions its reads ask for. Used by one thread at a time."""

    def __init__(self, client: dict[str, str], fetch_wait_ms: int = FETCH_WAIT_MS):
        """``fetch_wait_ms``: ``FETCH_WAIT_MS`` for a consumer kept between reads, ``BACKLOG_FETCH_WAIT_MS`` for one
        made for a read; the client's own ``fetch.wait.max.ms`` wins over either."""
        settings = {"queued.max.messages.kbytes": QUEUE_KBYTES, "fetch.wait.max.ms": fetch_wait_ms, **client}
        self._consumer = Consumer(
            {
                **settings,
                "group.id": f"laketide-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
            }
        )
        self._partitions: dict[Place, _Partition] = {}

    def read(self, ranges: list[OffsetRange]) -> pa.Table:
        """Every record of ``ranges``, in (topic, partition, offset) order, with Spark's Kafka columns."""
        chunks = {(r.topic, r.partition): [] for r in ranges}
        try:
            for place, messages in self.chunks(ranges):
                chunks[place].extend(messages)
        except BaseException:
            self._forget([(r.topic, r.partition) for r in ranges])  # what was read of them is dropped
            raise
        return pa.Table.from_batches([as_batch(messages) for messages in chunks.values() if messages], schema=SCHEMA)

    def chunks(self, ranges: list[OffsetRange], batch_rows: int = 10_000) -> Iterator[tuple[Place, list[Message]]]:
        """The records of ``ranges`` as messages (``as_batch`` makes them Arrow), a partition's in offset order, at most
        ``batch_rows`` a chunk."""
        ranges = [r for r in ranges if r.start < r.end]
        ends = {(r.topic, r.partition): r.end for r in ranges}
        self._place(ranges)
        out: dict[Place, list[Message]] = {place: [] for place in ends}
        for place, end in ends.items():
            yield from self._from_held(place, end, out[place])
        waiting = {place for place, end in ends.items() if self._partitions[place].known < end}
        deadline = time.monotonic() + READ_TIMEOUT
        while waiting:
            left = sum(ends[place] - self._partitions[place].known for place in waiting)
            # consume waits until it has as many as asked, or its timeout: records of other partitions count, so
            # asking for the few a range still lacks while others stream in made a call per few records
            messages = self._consumer.consume(min(batch_rows, max(left, ASK_AT_LEAST)), timeout=CONSUME_WAIT)
            for message in messages:
                place = self._take(message, ends, out)
                if place in waiting and self._partitions[place].known >= ends[place]:
                    waiting.discard(place)
                if place in out and out[place] and (len(out[place]) >= batch_rows or place not in waiting):
                    yield place, out[place]
                    out[place] = []
            if messages:
                deadline = time.monotonic() + READ_TIMEOUT
            elif time.monotonic() > deadline:
                gaps = ", ".join(
                    f"{t} partition {p} offsets {self._partitions[(t, p)].known} to {ends[(t, p)] - 1}"
                    for t, p in sorted(waiting)
                )
                raise Unavailable(f"no record within {READ_TIMEOUT:.0f}s at {gaps}, though the broker reported them")
            self._bound_held(waiting)
        for place, end in ends.items():
            self._partitions[place].handed = end

    def _place(self, ranges: list[OffsetRange]) -> None:
        """Assign the partitions new to this consumer; read afresh those whose range does not start where their
        last ended; resume the paused ones the ranges need."""
        self._forget(
            [
                (r.topic, r.partition)
                for r in ranges
                if (r.topic, r.partition) in self._partitions
                and self._partitions[(r.topic, r.partition)].handed != r.start
            ]
        )
        new = [r for r in ranges if (r.topic, r.partition) not in self._partitions]
        if new:
            self._consumer.incremental_assign([TopicPartition(r.topic, r.partition, r.start) for r in new])
            self._partitions.update({(r.topic, r.partition): _Partition(r.start, r.start) for r in new})
        paused = [
            TopicPartition(r.topic, r.partition) for r in ranges if self._partitions[(r.topic, r.partition)].paused
        ]
        if paused:
            self._consumer.resume(paused)
            for tp in paused:
                self._partitions[(tp.topic, tp.partition)].paused = False

    def _forget(self, places: list[Place]) -> None:
        """Unassign ``places``: a later read of them starts afresh at its range's start."""
        places = [place for place in places if place in self._partitions]
        if places:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in places])
            for place in places:
                del self._partitions[place]

    def newest(self, place: Place) -> int | None:
        """The partition's next offset as the consumer's last fetch told it (no request); ``None`` when not known."""
        if place not in self._partitions:
            return None
        high = self._consumer.get_watermark_offsets(TopicPartition(*place), cached=True)[1]
        return high if high >= 0 else None

    def _from_held(self, place: Place, end: int, out: list[Message]) -> Iterator[tuple[Place, list[Message]]]:
        """The held messages of ``place`` below ``end`` moved to ``out`` (yielded at once when the range is whole)."""
        state = self._partitions[place]
        taken = 0
        while taken < len(state.held) and _offset(state.held[taken]) < end:
            taken += 1
        if taken:
            out.extend(state.held[:taken])
            state.held_bytes -= sum(len(m.value() or b"") for m in state.held[:taken])
            del state.held[:taken]
        if out and state.known >= end:
            yield place, list(out)
            out.clear()

    def _take(self, message: Message, ends: dict[Place, int], out: dict[Place, list[Message]]) -> Place:
        """One message or event into its partition's messages of this read, held messages or known offsets."""
        place = _place(message)
        state = self._partitions.get(place)
        error = message.error()
        if state is None:
            return place  # of a partition unassigned since it was fetched
        if error is not None and error.code() == KafkaError._PARTITION_EOF:
            # the partition's end: offsets before it that no record came for are gone or transaction markers
            state.known = max(state.known, _offset(message))
        elif error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET:
            raise OffsetsGone(f"{place[0]} partition {place[1]}: offset {state.known} is no longer on the broker")
        elif error is not None:
            raise Unavailable(f"reading {place[0]} partition {place[1]} at offset {state.known}: {error}")
        elif (offset := _offset(message)) >= state.known:
            if place in out and offset < ends[place]:
                out[place].append(message)
            else:  # past this read's range: the next read's
                state.held.append(message)
                state.held_bytes += len(message.value() or b"")
            state.known = offset + 1
        return place

    def _bound_held(self, waiting: set[Place]) -> None:
        """Past ``HOLD_BYTES`` held, pause the partitions this read does not wait on: what librdkafka queued of them
        is dropped, and fetched again from where the held rows end once a read resumes them."""
        if sum(s.held_bytes for s in self._partitions.values()) <= HOLD_BYTES:
            return
        idle = [place for place, s in self._partitions.items() if place not in waiting and not s.paused]
        if idle:
            self._consumer.pause([TopicPartition(t, p) for t, p in idle])
            for place in idle:
                self._partitions[place].paused = True

    def close(self) -> None:
        self._consumer.close()


def as_batch(messages: list[Message]) -> pa.RecordBatch:
    """Messages of one partition, at least one (``RangeConsumer.chunks``), as one Arrow batch of Spark's Kafka columns,
    a column at a time: a tuple a message, then a column of each, took eight times as long (10,000 messages: 40 ms
    against 5)."""
    n, first = len(messages), messages[0]
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
        pa.repeat(pa.scalar(first.topic(), pa.string()), n),
        pa.repeat(pa.scalar(first.partition(), pa.int32()), n),
        pa.array([m.offset() for m in messages], pa.int64()),
        pc.multiply(millis, 1000).cast(SCHEMA.field("timestamp").type),
        kinds,
        listed,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _place(message: Message) -> Place:
    """A message's (topic, partition). confluent_kafka types both optional (an error not about a partition has none);
    such an error names no partition of this consumer's, and is told apart by the empty topic."""
    topic, partition = message.topic(), message.partition()
    return (topic or "", partition if partition is not None else -1)


def _offset(message: Message) -> int:
    """A message's offset; librdkafka's invalid offset (-1) when it has none."""
    offset = message.offset()
    return offset if offset is not None else -1
