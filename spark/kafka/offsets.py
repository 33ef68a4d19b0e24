"""What the checkpoint and the brokers tell of a Kafka query's micro-batches: each one's offset range, the lag
after it, how many records the first spans, and its records read on the driver.

A micro-batch small enough for the driver (``write.driver_batch_bytes``) is read here rather than by the query's
own scan, which is then never run: no Spark job, no Python worker, no consumer made per task. Its end offsets are
the offset log's entry for it (Spark writes it before ``foreachBatch`` runs), its start the entry before; the
records come through one consumer kept for the job (``kafka.consumer.RangeConsumer``), under the same data-loss
rules as the scan (``kafka.brokers.plan_ranges``). The brokers are asked only when the consumer finds offsets
gone or a partition ends before where the stream stood: a micro-batch costs no request but its fetches, and its
lag is the consumer's last fetch's view. The query's first micro-batch, whose start the offset log does not hold,
starts where ``source.kafka.starting_offsets`` puts it: the brokers' earliest offsets then (as the source's
``initialOffset`` asked them at the query's start; records that retention removed in between are not read by either),
or the offsets it names. Under ``latest`` only the source knew where the query started: the scan reads that one.
"""

from __future__ import annotations

import logging
from collections import deque

import pyarrow as pa

from laketide.config import KAFKA_RECORD_BYTES, JobConfig
from laketide.spark.change_feed import kafka_client
from laketide.spark.kafka.brokers import (
    EARLIEST,
    LATEST,
    Brokers,
    Offsets,
    Place,
    moved_back,
    named_starts,
    plan_ranges,
)
from laketide.spark.kafka.consumer import OffsetsGone, RangeConsumer
from laketide.table.errors import Invalid
from laketide.writer.landing import source_offsets

log = logging.getLogger("laketide.job")
# a Kafka record weighs ``KAFKA_RECORD_BYTES`` on the driver, for the driver-or-tasks choice, until it has read some:
# then twice their keys' and values' bytes (the values and their decoded rows are held at once), over the last
# ``WEIGHED_BATCHES`` it read. A fixed 1 KB sent a backlog of 68,000 change events of 430 bytes to Spark's tasks,
# where its read took 175 s in one run (about 2 s on the driver).
WEIGHED_BATCHES = 16


class KafkaOffsets:
    """A Kafka query's offsets and the driver's reads; the brokers' clients are made at the first question. Used by
    the micro-batch thread."""

    def __init__(self, config: JobConfig):
        self.config = config
        self._brokers: Brokers | None = None
        self._consumer: RangeConsumer | None = None
        self._logged: dict[int, Offsets | None] = {}  # the offset log's last entries read, by micro-batch
        self._marks: tuple[int, Offsets, dict[Place, tuple[int, int]]] | None = None  # one micro-batch's watermarks
        # the partitions' newest offsets as the consumer knew them when it had read a micro-batch, for its lag
        self._newest: tuple[int, dict[Place, int | None]] = (-1, {})
        self._weighed: deque[tuple[int, int]] = deque(
            maxlen=WEIGHED_BATCHES
        )  # (records, their bytes) of the last reads

    @property
    def brokers(self) -> Brokers:
        if self._brokers is None:
            self._brokers = Brokers(kafka_client(self.config.source.kafka))
        return self._brokers

    def logged(self, batch_id: int) -> Offsets | None:
        """The end offsets of micro-batch ``batch_id`` as the offset log holds them (``None``: not there)."""
        if batch_id not in self._logged:
            self._logged = {
                b: o for b, o in self._logged.items() if b >= batch_id - 2
            }  # a micro-batch asks of itself and the one before
            self._logged[batch_id] = source_offsets(
                self.config.stream.checkpoint, batch_id, self.config.storage.io_options
            )
        return self._logged[batch_id]

    def records(self, batch_id: int) -> int | None:
        """How many offsets micro-batch ``batch_id`` spans (records, less any a compacted topic dropped): from the
        offset log, or for the query's first micro-batch as ``first_records`` says. ``None`` when unknown."""
        end, start = self.logged(batch_id), self.logged(batch_id - 1)
        if end is not None and start is not None:
            return sum(int(o) - int(start.get(t, {}).get(p, 0)) for t, parts in end.items() for p, o in parts.items())
        return self.first_records(batch_id)

    def record_weight(self) -> int:
        """The bytes a record of the next micro-batch is taken to weigh on the driver (``KAFKA_RECORD_BYTES``)."""
        records, size = sum(r for r, _ in self._weighed), sum(b for _, b in self._weighed)
        return max(1, 2 * size // records) if records else KAFKA_RECORD_BYTES

    def read(self, batch_id: int) -> pa.Table | None:
        """The records of micro-batch ``batch_id`` (Spark's Kafka columns, in (topic, partition, offset) order), read
        on the driver; ``None`` for the query's first micro-batch, whose start the offset log does not hold."""
        end, start = self.logged(batch_id), self._start(batch_id)
        if end is None or start is None:
            return None
        fail = self.config.source.kafka.fail_on_data_loss
        if self._consumer is None:
            self._consumer = RangeConsumer(kafka_client(self.config.source.kafka))
        records = None
        if not moved_back(start, end):
            try:
                records = self._consumer.read(plan_ranges(start, end, None, fail))
            except OffsetsGone as gone:
                log.warning("micro-batch %s: %s; planning its read from what the brokers hold", batch_id, gone)
        if records is None:
            records = self._consumer.read(plan_ranges(start, end, self.brokers, fail))
        if records.num_rows:
            self._weighed.append((records.num_rows, records["key"].nbytes + records["value"].nbytes))
        consumer = self._consumer
        self._newest = batch_id, {(t, int(p)): consumer.newest((t, int(p))) for t, ps in end.items() for p in ps}
        # the next micro-batch's records are fetched and made Arrow while this one is written and the next planned:
        # started only once Spark planned it, a 20,000-event read of 4 KB events still waited 0.5-1.5 s on the rest
        consumer.read_ahead()
        return records

    def _start(self, batch_id: int) -> Offsets | None:
        """Where micro-batch ``batch_id`` starts: the offset log's entry before it, or for the query's first where
        ``starting_offsets`` puts it; ``None`` where only the query's source knows (``latest``)."""
        start = self.logged(batch_id - 1)
        if start is not None or batch_id != 0:
            return start
        end = self.logged(batch_id) or {}
        try:
            named = named_starts(self.config.source.kafka.starting_offsets, {t: list(ps) for t, ps in end.items()})
        except Invalid:  # the setting changed since the query started: only its source knows where that was
            return None
        offsets = [o for ps in named.values() for o in ps.values()]
        if LATEST in offsets:  # the newest when the query started
            return None
        marks = self._end_and_watermarks(batch_id)[1] if EARLIEST in offsets else {}
        return {t: {p: marks[(t, int(p))][0] if o == EARLIEST else o for p, o in ps.items()} for t, ps in named.items()}

    def lag(self, batch_id: int) -> dict[str, int]:
        """Per ``topic/partition``, the brokers' newest offset minus the micro-batch's end: 0 once it caught up.
        Only for reporting: a failure to ask is logged, and the lag left out (empty)."""
        try:
            end = self.logged(batch_id) or {}
            places = [(t, int(p)) for t, parts in end.items() for p in parts]
            read_at, newest = self._newest
            consumer = self._consumer
            if read_at != batch_id:  # not read on the driver (Spark's tasks, or the query's first from its scan)
                newest = {place: consumer.newest(place) for place in places} if consumer is not None else {}
            seen = {place: n for place, n in newest.items() if n is not None}
            if len(seen) < len(places):  # a partition the consumer has not fetched: the brokers say
                seen = self.brokers.newest(places)
            return {
                f"{t}/{p}": max(0, seen[(t, int(p))] - int(o)) for t, parts in end.items() for p, o in parts.items()
            }
        except Exception:
            log.warning("micro-batch %s: the Kafka lag could not be read", batch_id, exc_info=True)
            return {}

    def first_records(self, batch_id: int) -> int | None:
        """At most how many offsets the query's first Kafka micro-batch spans, whose start the checkpoint does not
        log: its cap (``JobConfig.kafka_offsets_per_trigger``; the cap gives each partition with a backlog at least one,
        so a few more at most) or its end offsets less the brokers' earliest, whichever is less. Without it the first
        micro-batch of every new job went to Spark's tasks, a few seconds more however few its records. ``None`` when
        unknown."""
        cap = self.config.kafka_offsets_per_trigger()
        try:
            end, marks = self._end_and_watermarks(batch_id)
        except Exception:
            log.warning("micro-batch %s: the brokers' earliest offsets could not be read", batch_id, exc_info=True)
            return cap
        if not end:
            return None
        spanned = sum(max(0, int(o) - marks[(t, int(p))][0]) for t, parts in end.items() for p, o in parts.items())
        return min(spanned, cap) if cap else spanned

    def _end_and_watermarks(self, batch_id: int) -> tuple[dict, dict[tuple[str, int], tuple[int, int]]]:
        """The micro-batch's end offsets (from the checkpoint) and the brokers' (earliest, newest) of each partition,
        asked once a micro-batch (the first one's size and its start both need them)."""
        if self._marks is None or self._marks[0] != batch_id:
            end = self.logged(batch_id) or {}
            self._marks = batch_id, end, self.brokers.watermarks([(t, int(p)) for t, ps in end.items() for p in ps])
        return self._marks[1], self._marks[2]

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
