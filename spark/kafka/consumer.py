"""Records of offset ranges through one Kafka consumer, as Arrow, without Spark: what a task of laketide's Kafka
source reads (a consumer made for its split), and what the driver reads of a micro-batch small enough for it (one
consumer kept open for the whole job).

A kept consumer pays for its connections and its first fetch once. Between micro-batches librdkafka keeps
fetching ahead, and what a read took past its ranges' ends is held for the next read, which, starting where
the last ended, finds its records waiting: on Tansu, 10,000 records 50,000 deep in a 3-partition topic took a
new consumer 0.8-1 s and a kept one 0.05 s. A partition fetches only what the reads are likely to ask of it: once
it holds as many records past its range as that range spanned (the next read's likely share), or the consumer
holds twice the bytes its last read took (``HOLD_BYTES`` at least), it is parked (unassigned, what is held of it
kept), and assigned again where its held records end by the read or read-ahead that next needs it. Without that,
partitions whose ranges were done went on filling the fetches: on Tansu, 20 topics of 3 partitions and 4 KB
events, a 20,000-record read held 45,000 records of partitions it did not wait on and still took 1 s waiting for
the rest; any broker spends its fetches' bytes on records nobody asked for yet. Parked, not paused: librdkafka
took 0.6 s from a partition's resume to its first record, and 0.02-0.03 s from its assignment at an offset.

A range that does not start where its partition's last read ended (a restart, a skip past lost offsets) is read
afresh from its start. The driver's consumer also reads ahead (``read_ahead``): from one read to the next a thread
of its own consumes and makes Arrow of the records the next read will likely ask for, while the job writes the
micro-batch just read and Spark plans the next.

A read never hands on a record outside its ranges, and never skips one inside: offsets no record comes for
are gone (a compacted topic) or transaction markers, known by the next record's offset or the partition's end.
A range that starts where the broker no longer holds records (retention passed it) stops the read with
``OffsetsGone`` (the consumer never resets on its own); a read that fails leaves every partition to be read afresh.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from laketide.spark.kafka.brokers import OffsetRange, Place
from laketide.spark.kafka.records import SCHEMA, as_batch, by_place, value_bytes
from laketide.table.errors import Unavailable

log = logging.getLogger(__name__)
READ_TIMEOUT = 120.0  # seconds a read may wait for the records the broker said it has
# values held past the ranges' ends, at least, before every partition not waited on is parked: twice what the last
# read took, when more, so a read-ahead holds a next micro-batch like the last whatever each partition's fetch
# brought past its share
HOLD_BYTES = 64 * 2**20
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
# a read-ahead's wait in one consume: the read that stops it waits for that call to end
AHEAD_WAIT = 0.005


class OffsetsGone(Unavailable):
    """A range starts at offsets the broker no longer holds: the caller plans again from what it holds."""


@dataclass
class _Partition:
    """What the consumer has of one topic-partition. ``handed``: where the last read's range ended; ``known``:
    every offset below it was delivered (handed on, held, or found absent); ``held``: records past the last range,
    in offset order; ``span``: how many offsets the last read's range held, what a read-ahead fetches."""

    handed: int
    known: int
    held: list[pa.RecordBatch] = field(default_factory=list)
    held_rows: int = 0
    held_bytes: int = 0
    span: int = 0
    parked: bool = False

    def hold(self, rows: pa.RecordBatch) -> None:
        self.held.append(rows)
        self.held_rows += rows.num_rows
        self.held_bytes += value_bytes(rows)

    def take_held(self, end: int) -> list[pa.RecordBatch]:
        """The held records below offset ``end``, no longer held."""
        taken: list[pa.RecordBatch] = []
        while self.held:
            batch = self.held[0]
            cut = int(np.searchsorted(batch.column("offset").to_numpy(), end))
            if cut < batch.num_rows:
                if cut:
                    taken.append(batch.slice(0, cut))
                    self.held[0] = batch.slice(cut)
                break
            taken.append(self.held.pop(0))
        for rows in taken:
            self.held_rows -= rows.num_rows
            self.held_bytes -= value_bytes(rows)
        return taken


class RangeConsumer:
    """One consumer, assigned the partitions its reads ask for. Used by one thread at a time, and from
    ``read_ahead`` to the next call by the read-ahead's own thread alone: every other method stops it first, and
    waits for it."""

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
        self._read_bytes = 0  # the values' bytes the last read handed on
        self._ahead: tuple[threading.Thread, threading.Event] | None = None  # the read-ahead running, and its stop

    def read(self, ranges: list[OffsetRange]) -> pa.Table:
        """Every record of ``ranges``, in (topic, partition, offset) order, with Spark's Kafka columns."""
        chunks: dict[Place, list[pa.RecordBatch]] = {(r.topic, r.partition): [] for r in ranges}
        for place, rows in self.chunks(ranges):
            chunks[place].append(rows)
        return pa.Table.from_batches([rows for listed in chunks.values() for rows in listed], schema=SCHEMA)

    def chunks(self, ranges: list[OffsetRange], batch_rows: int = 10_000) -> Iterator[tuple[Place, pa.RecordBatch]]:
        """The records of ``ranges``, a partition's in offset order, at most about ``batch_rows`` a chunk. A read that
        fails, or is left unfinished, drops what the consumer held: the next reads start afresh."""
        self._settle()
        try:
            read_bytes = 0
            for place, rows in self._chunks([r for r in ranges if r.start < r.end], batch_rows):
                read_bytes += value_bytes(rows)
                yield place, rows
            self._read_bytes = read_bytes
        except BaseException:
            self._forget(list(self._partitions))
            raise

    def _chunks(self, ranges: list[OffsetRange], batch_rows: int) -> Iterator[tuple[Place, pa.RecordBatch]]:
        ends = {(r.topic, r.partition): r.end for r in ranges}
        self._place(ranges)
        out: dict[Place, list[pa.RecordBatch]] = {}
        for place, state in self._partitions.items():
            state.span = ends[place] - state.handed if place in ends else 0
            if place in ends:
                out[place] = state.take_held(ends[place])
        waiting = {place for place, end in ends.items() if self._partitions[place].known < end}
        self._park_satisfied(waiting)
        yield from _ready(out, waiting, batch_rows)
        deadline = time.monotonic() + READ_TIMEOUT
        while waiting:
            left = sum(ends[place] - self._partitions[place].known for place in waiting)
            # consume waits until it has as many as asked, or its timeout: records of other partitions count, so
            # asking for the few a range still lacks while others stream in made a call per few records
            messages = self._consumer.consume(min(batch_rows, max(left, ASK_AT_LEAST)), timeout=CONSUME_WAIT)
            self._file(messages, ends, out)
            waiting = {place for place in waiting if self._partitions[place].known < ends[place]}
            yield from _ready(out, waiting, batch_rows)
            if messages:
                deadline = time.monotonic() + READ_TIMEOUT
            elif time.monotonic() > deadline:
                gaps = ", ".join(
                    f"{t} partition {p} offsets {self._partitions[(t, p)].known} to {ends[(t, p)] - 1}"
                    for t, p in sorted(waiting)
                )
                raise Unavailable(f"no record within {READ_TIMEOUT:.0f}s at {gaps}, though the broker reported them")
            self._park_satisfied(waiting)
        for place, end in ends.items():
            self._partitions[place].handed = end

    def read_ahead(self) -> None:
        """Go on reading past the last read's ranges in a thread of its own until the next call: as many records
        again of each partition it read (up to ``_over_hold_limit`` in all), held as Arrow. The next read, starting
        where the last ended, finds them decoded: on the driver the fetch and the decoding then run while the job
        writes and Spark plans, not in the next micro-batch's read."""
        self._settle()
        wanted = [place for place, s in self._partitions.items() if s.held_rows < s.span]
        self._unpark(wanted)
        if wanted:
            stop = threading.Event()
            thread = threading.Thread(target=self._fill, args=(wanted, stop), name="laketide-kafka-ahead", daemon=True)
            self._ahead = (thread, stop)
            thread.start()

    def _fill(self, wanted: list[Place], stop: threading.Event) -> None:
        """The read-ahead's thread: consume until stopped, or until each partition of ``wanted`` holds its share and
        is parked (a partition at its end goes on fetching, for the records still to come)."""
        try:
            while not stop.is_set() and not self._over_hold_limit():
                self._file(self._consumer.consume(ASK_AT_LEAST, timeout=AHEAD_WAIT), {}, {})
                self._park_satisfied(set())
                if all(self._partitions[place].parked for place in wanted if place in self._partitions):
                    return
        except Exception as failure:
            # the next read of these partitions starts afresh, and meets the failure again where it is raised
            log.info("reading ahead stopped (%s); the next read fetches afresh", failure)
            self._forget(list(self._partitions))

    def _settle(self) -> None:
        """Stop the read-ahead, if one runs, and wait for its thread: the consumer is the caller's again."""
        if self._ahead is not None:
            thread, stop = self._ahead
            stop.set()
            thread.join()
            self._ahead = None

    def _file(self, messages: list[Message], ends: dict[Place, int], out: dict[Place, list[pa.RecordBatch]]) -> None:
        """A consume's messages filed: records of ``out``'s ranges there, records past them held, and the events
        (a partition's end, errors) taken note of, after the records they follow."""
        errors = [m.error() for m in messages]
        events = [m for m, error in zip(messages, errors) if error is not None]
        records = [m for m, error in zip(messages, errors) if error is None] if events else messages
        if records:
            for place, rows in by_place(as_batch(records)):
                self._file_rows(place, rows, ends.get(place) if place in out else None, out)
        for event in events:
            self._note(event)

    def _file_rows(self, place: Place, rows: pa.RecordBatch, end: int | None, out: dict) -> None:
        """One partition's records, in offset order: those below ``end`` (``None``: none is read now) to ``out``,
        those from it held; those below what was delivered already dropped."""
        state = self._partitions.get(place)
        if state is None:
            return  # of a partition unassigned since it was fetched
        offsets = rows.column("offset").to_numpy()
        first = int(np.searchsorted(offsets, state.known))
        if first == len(offsets):
            return
        cut = max(first, int(np.searchsorted(offsets, end))) if end is not None else first
        if cut > first:
            out[place].append(rows.slice(first, cut - first))
        if cut < len(offsets):
            state.hold(rows.slice(cut))
        state.known = int(offsets[-1]) + 1

    def _note(self, event: Message) -> None:
        """An event of the consumer's: a partition's end, or an error, raised."""
        place = _place(event)
        state = self._partitions.get(place)
        if state is None:
            return  # of no partition of this consumer's, or one unassigned since
        error = event.error()
        assert error is not None, "only events are noted"
        if error.code() == KafkaError._PARTITION_EOF:
            # the partition's end: offsets before it that no record came for are gone or transaction markers
            state.known = max(state.known, _offset(event))
        elif error.code() == KafkaError._AUTO_OFFSET_RESET:
            raise OffsetsGone(f"{place[0]} partition {place[1]}: offset {state.known} is no longer on the broker")
        else:
            raise Unavailable(f"reading {place[0]} partition {place[1]} at offset {state.known}: {error}")

    def _place(self, ranges: list[OffsetRange]) -> None:
        """Assign the partitions new to this consumer; read afresh those whose range does not start where their
        last ended; assign again the parked ones the ranges need."""
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
        self._unpark([(r.topic, r.partition) for r in ranges])

    def _unpark(self, places: list[Place]) -> None:
        """Fetch the parked of ``places`` again, each from where what it holds ends."""
        parked = [place for place in places if self._partitions[place].parked]
        if parked:
            self._consumer.incremental_assign([TopicPartition(t, p, self._partitions[(t, p)].known) for t, p in parked])
            for place in parked:
                self._partitions[place].parked = False

    def _forget(self, places: list[Place]) -> None:
        """Unassign ``places``: a later read of them starts afresh at its range's start."""
        places = [place for place in places if place in self._partitions]
        assigned = [TopicPartition(t, p) for t, p in places if not self._partitions[(t, p)].parked]
        if assigned:
            self._consumer.incremental_unassign(assigned)
        for place in places:
            del self._partitions[place]

    def newest(self, place: Place) -> int | None:
        """The partition's next offset as the consumer's last fetch told it (no request); ``None`` when not known."""
        self._settle()
        if place not in self._partitions:
            return None
        high = self._consumer.get_watermark_offsets(TopicPartition(*place), cached=True)[1]
        return high if high >= 0 else None

    def _over_hold_limit(self) -> bool:
        """Whether the values held reach twice the bytes the last read took (``HOLD_BYTES`` at least)."""
        return sum(s.held_bytes for s in self._partitions.values()) >= max(HOLD_BYTES, 2 * self._read_bytes)

    def _park_satisfied(self, waiting: set[Place]) -> None:
        """Park the partitions not in ``waiting`` that hold their likely next share (``span`` records; none for a
        partition the last read did not ask of), or every one of them once ``_over_hold_limit``: what librdkafka
        queued of them is dropped, and fetched again from where the held rows end once they are assigned again."""
        over = self._over_hold_limit()
        idle = [
            place
            for place, s in self._partitions.items()
            if place not in waiting and not s.parked and (over or s.held_rows >= s.span)
        ]
        if idle:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in idle])
            for place in idle:
                self._partitions[place].parked = True

    def close(self) -> None:
        self._settle()
        self._consumer.close()


def _ready(
    out: dict[Place, list[pa.RecordBatch]], waiting: set[Place], batch_rows: int
) -> Iterator[tuple[Place, pa.RecordBatch]]:
    """The records of ``out`` to hand on now, taken out of it: a partition's whole range, or ``batch_rows`` of it."""
    for place, listed in out.items():
        if listed and (place not in waiting or sum(rows.num_rows for rows in listed) >= batch_rows):
            out[place] = []
            yield place, listed[0] if len(listed) == 1 else pa.concat_batches(listed)


def _place(message: Message) -> Place:
    """A message's (topic, partition). confluent_kafka types both optional (an error not about a partition has none);
    such an error names no partition of this consumer's, and is told apart by the empty topic."""
    topic, partition = message.topic(), message.partition()
    return (topic or "", partition if partition is not None else -1)


def _offset(message: Message) -> int:
    """A message's offset; librdkafka's invalid offset (-1) when it has none."""
    offset = message.offset()
    return offset if offset is not None else -1
