"""Kafka topics as a Spark source of laketide's: ``spark.readStream.format("laketide-kafka")``.

For clusters without Spark's Kafka connector (``spark-sql-kafka-0-10``), on PySpark's Python data source
API and confluent-kafka, shaped as the laketide table source is (FLIP-27): the driver enumerates, the
tasks read. Offsets are Spark's Kafka source's own JSON, ``{"topic": {"partition": next offset}}``, kept
in the query's checkpoint; each topic-partition's range of a micro-batch is read from its start offset up to,
not including, its end offset, a few ranges to a task (``max_splits`` tasks at most, one consumer each, assigned
all its ranges at once). The rows have the columns of Spark's Kafka
source (key, value, topic, partition, offset, timestamp, timestampType, headers), so what follows
reads both alike.

A reader never reads past a split's end offset, and the ends come from the brokers' high watermarks:
a broker that reports a watermark behind what it holds (Tansu was seen to) only delays records to a
later micro-batch, it never loses or repeats one.

Data loss, as Spark's ``failOnDataLoss`` names it: a start offset below what the broker still keeps
(retention passed it), or a partition or topic that is gone, stops the query with an error naming the
partitions and the offsets lost; with ``fail_on_data_loss = false`` the reader goes on from the earliest
offset still there and logs, at ERROR, every range it skipped.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from laketide.table.errors import Invalid, Refused, Unavailable
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

log = logging.getLogger(__name__)
NAME = "laketide-kafka"
CLIENT_PREFIX = "kafka."  # client options passed through to librdkafka, as Spark's Kafka source takes them
HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()), ("headers", pa.list_(HEADER)),
])
READ_TIMEOUT = 120.0  # seconds a split may wait for the records the broker said it has


class KafkaDataLoss(Refused):
    """Offsets a micro-batch needs are gone from the broker (retention, a deleted topic or partition):
    refused, as losing them silently would break exactly-once (exit code 4)."""


Offsets = dict[str, dict[str, int]]  # topic -> partition (as a string, as in JSON) -> next offset


@dataclass(frozen=True)
class PartitionRange(InputPartition):
    """One topic-partition's records ``[start, end)``."""

    topic: str
    partition: int
    start: int
    end: int
    client: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class KafkaSplit(InputPartition):
    """What one task reads: the ranges of a few topic-partitions, one after another, through one consumer. Many
    topics (a job of a whole database) would otherwise be as many tasks, each making a client and waiting on a fetch."""

    ranges: tuple[PartitionRange, ...]


def splits_of(ranges: list[PartitionRange], most: int) -> list[KafkaSplit]:
    """``ranges`` in at most ``most`` splits of about equal records (the largest placed first, each on the
    lightest split), each split's ranges in (topic, partition) order."""
    bins: list[list[PartitionRange]] = [[] for _ in range(min(most, len(ranges)))]
    weights = [0] * len(bins)
    for r in sorted(ranges, key=lambda r: r.end - r.start, reverse=True):
        lightest = weights.index(min(weights))
        bins[lightest].append(r)
        weights[lightest] += r.end - r.start
    return [KafkaSplit(tuple(sorted(b, key=lambda r: (r.topic, r.partition)))) for b in bins if b]


class Brokers:
    """The driver's view of the topics: their partitions and offsets, through one admin client.

    The offsets of every partition asked for come in one ListOffsets request per broker for the earliest
    and one for the newest, so planning a micro-batch costs the same round trips for 3 partitions or 300.
    Under ``isolation.level = read_committed`` the newest is the last stable offset, as a consumer of that
    level sees it."""

    def __init__(self, client: dict[str, str]):
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient(client)
        self.read_committed = client.get("isolation.level") == "read_committed"

    def partitions(self, topics: list[str], pattern: str | None) -> dict[str, list[int]]:
        try:
            metadata = self.admin.list_topics(timeout=30)
        except Exception as error:
            raise Unavailable(f"the Kafka brokers did not answer ({error}); check source.kafka.bootstrap_servers") from None
        found = {name: sorted(t.partitions) for name, t in metadata.topics.items() if t.error is None}
        if pattern:
            return {name: parts for name, parts in found.items() if re.fullmatch(pattern, name) and not name.startswith("__")}
        return {name: found.get(name, []) for name in topics}

    def watermarks(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(earliest, next) offset of each (topic, partition)."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        level = IsolationLevel.READ_COMMITTED if self.read_committed else IsolationLevel.READ_UNCOMMITTED
        ends: dict[tuple[str, int], list[int]] = {place: [0, 0] for place in partitions}
        if not ends:
            return {}
        for which, spec in enumerate((OffsetSpec.earliest(), OffsetSpec.latest())):
            asked = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in ends}, isolation_level=level, request_timeout=30)
            for place, answer in asked.items():
                try:
                    ends[(place.topic, place.partition)][which] = answer.result().offset
                except Exception as error:
                    raise Unavailable(f"the Kafka brokers did not give the offsets of {place.topic} partition {place.partition} "
                                      f"({error}); check source.kafka.bootstrap_servers") from None
        return {place: (low, high) for place, (low, high) in ends.items()}

    def close(self) -> None:
        pass  # an admin client has nothing to leave: its connections close with it


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Options: ``bootstrap_servers``, ``topics`` (comma-separated) or ``topic_pattern``,
    ``starting_offsets`` (``earliest``, ``latest`` or Spark's JSON), ``max_offsets_per_trigger``,
    ``fail_on_data_loss``, and ``kafka.<librdkafka option>``."""

    def __init__(self, options: dict):
        self.client = {"bootstrap.servers": options["bootstrap_servers"]}
        self.client.update({k[len(CLIENT_PREFIX):]: v for k, v in options.items() if k.startswith(CLIENT_PREFIX)})
        self.topics = [t.strip() for t in options.get("topics", "").split(",") if t.strip()]
        self.pattern = options.get("topic_pattern") or None
        if bool(self.topics) == bool(self.pattern):
            raise Invalid("give source.kafka.topics or source.kafka.topic_pattern, one of them")
        self.starting = options.get("starting_offsets", "earliest")
        self.max_offsets = int(options["max_offsets_per_trigger"]) if options.get("max_offsets_per_trigger") else None
        self.fail_on_data_loss = options.get("fail_on_data_loss", "true").lower() != "false"
        self.max_splits = int(options.get("max_splits") or 8)  # tasks a micro-batch's read takes at most
        self.target: Offsets | None = None
        self._brokers: Brokers | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_brokers": None}  # the driver's client stays on the driver

    @property
    def brokers(self) -> Brokers:
        if self._brokers is None:
            self._brokers = Brokers(self.client)
        return self._brokers

    # -- offsets ------------------------------------------------------------

    def _watermarks(self) -> dict[str, dict[str, tuple[int, int]]]:
        """(earliest, next) offset of every partition of the topics, as the brokers say now."""
        parts = self.brokers.partitions(self.topics, self.pattern)
        marks = self.brokers.watermarks([(topic, p) for topic, ps in parts.items() for p in ps])
        return {topic: {str(p): marks[(topic, p)] for p in ps} for topic, ps in parts.items()}

    def _latest(self) -> Offsets:
        return {topic: {p: high for p, (_, high) in parts.items()} for topic, parts in self._watermarks().items()}

    def initialOffset(self) -> Offsets:
        marks = self._watermarks()
        which = {"earliest": 0, "latest": 1}.get(self.starting)
        if which is not None:
            return {topic: {p: pair[which] for p, pair in parts.items()} for topic, parts in marks.items()}
        try:
            given = json.loads(self.starting)
        except ValueError:
            raise Invalid(f"source.kafka.starting_offsets = {self.starting!r} is not 'earliest', 'latest' or JSON such as {{\"orders\": {{\"0\": 42}}}}") from None
        # -2 is earliest and -1 latest, as in Spark's JSON
        return {t: {p: (marks[t][p][0] if o == -2 else marks[t][p][1] if o == -1 else o) for p, o in parts.items()} for t, parts in given.items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        latest = self.target or self._latest()
        self._check_behind(start, latest)
        end = {t: dict(parts) for t, parts in latest.items()}
        if isinstance(limit, ReadMaxRows):
            end = cap(start, end, limit.max_rows)
        return end

    def _check_behind(self, start: Offsets, latest: Offsets) -> None:
        """A partition whose newest offset is below where the stream stands was deleted and made again."""
        behind = [(t, p, o, latest[t][p]) for t, parts in start.items() for p, o in parts.items() if t in latest and p in latest[t] and latest[t][p] < o]
        for topic, partition, at, newest in behind:
            lost = f"{topic} partition {partition} ends at offset {newest}, before offset {at} where this stream stands (was the topic deleted and created again?)"
            if self.fail_on_data_loss:
                raise KafkaDataLoss(f"{lost}. To read it again from its earliest offset, set source.kafka.fail_on_data_loss = false and start the job again.")
            log.error("DATA LOSS: %s; reading it again from its earliest offset because source.kafka.fail_on_data_loss = false", lost)

    def reportLatestOffset(self) -> Offsets:
        return self._latest()

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaSplit]:
        ranges = []
        marks = self.brokers.watermarks([(topic, int(p)) for topic, parts in end.items() for p in parts])
        for topic, parts in end.items():
            for p, stop in parts.items():
                begin = start.get(topic, {}).get(p, 0)
                begin = self._still_there(topic, int(p), begin, stop, marks[(topic, int(p))])
                if begin < stop:
                    ranges.append(PartitionRange(topic, int(p), begin, stop, tuple(sorted(self.client.items()))))
        self._check_gone(start, end)
        return splits_of(ranges, self.max_splits)

    def _still_there(self, topic: str, partition: int, begin: int, stop: int, marks: tuple[int, int]) -> int:
        low, high = marks
        if begin > high:  # made again since (``_check_behind`` decided to go on): from its start
            return low
        if begin >= low:
            return begin
        lost = f"{topic} partition {partition}: offsets {begin} to {min(low, stop) - 1} are gone from the broker (retention or a deleted topic)"
        if self.fail_on_data_loss:
            raise KafkaDataLoss(f"{lost}. Nothing was written for them. To go on from the earliest offset still there, "
                                "set source.kafka.fail_on_data_loss = false and start the job again; the skipped ranges are logged.")
        log.error("DATA LOSS: %s; going on from offset %d because source.kafka.fail_on_data_loss = false", lost, low)
        return low

    def _check_gone(self, start: Offsets, end: Offsets) -> None:
        gone = [f"{t} partition {p}" for t, parts in start.items() for p in parts if p not in end.get(t, {})]
        if gone and self.fail_on_data_loss:
            raise KafkaDataLoss(f"{', '.join(gone)} no longer exist on the broker. To go on without them, set "
                                "source.kafka.fail_on_data_loss = false and start the job again.")
        for name in gone:
            log.error("DATA LOSS: %s no longer exists; going on without it", name)

    def read(self, split: KafkaSplit) -> Iterator[pa.RecordBatch]:
        yield from read_split(split)

    def commit(self, end: Offsets) -> None:
        pass

    def stop(self) -> None:
        if self._brokers is not None:
            self._brokers.close()


def cap(start: Offsets, end: Offsets, max_rows: int) -> Offsets:
    """``end`` brought back so the micro-batch holds at most ``max_rows`` offsets, shared across the
    partitions in proportion to their backlog, every partition with a backlog getting at least one."""
    backlog = {(t, p): max(0, o - start.get(t, {}).get(p, 0)) for t, parts in end.items() for p, o in parts.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return end
    capped = {t: dict(parts) for t, parts in end.items()}
    for (t, p), n in backlog.items():
        if n > 0:
            capped[t][p] = start.get(t, {}).get(p, 0) + max(1, n * max_rows // total)
    return capped


def read_split(split: KafkaSplit, batch_rows: int = 10_000) -> Iterator[pa.RecordBatch]:
    """The records of a split's ranges, ``[start, end)`` by offset, through one consumer assigned all of them: Arrow
    batches of one partition each, in offset order within a partition (a key's records are in one partition)."""
    from confluent_kafka import KafkaError, TopicPartition

    ranges = {(r.topic, r.partition): r for r in split.ranges if r.start < r.end}
    if not ranges:
        return
    position = {place: r.start for place, r in ranges.items()}
    rows: dict[tuple[str, int], list[tuple]] = {place: [] for place in ranges}
    consumer = _consumer(split.ranges[0].client)
    consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges.values()])
    reading, deadline = set(ranges), time.monotonic() + READ_TIMEOUT
    try:
        while reading:
            # no more than the ranges still hold: consume waits until it has as many as asked, or its timeout
            left = sum(ranges[place].end - position[place] for place in reading)
            messages = consumer.consume(max(1, min(batch_rows, left)), timeout=1.0)
            for message in messages:
                place = (message.topic(), message.partition())
                if place not in reading:
                    continue  # past its range: the next micro-batch's
                end, error = ranges[place].end, message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    # the partition's end: offsets before it that no record came for are gone (a compacted
                    # topic) or transaction markers, which a consumer never sees
                    position[place] = max(position[place], min(message.offset(), end))
                elif error is not None:
                    raise Unavailable(f"reading {place[0]} partition {place[1]} at offset {position[place]}: {error}")
                elif message.offset() >= end:
                    position[place] = end
                else:
                    rows[place].append(_row(message))
                    position[place] = message.offset() + 1
                if position[place] >= end:
                    reading.discard(place)
                if len(rows[place]) >= batch_rows or (place not in reading and rows[place]):
                    yield _batch(rows[place])
                    rows[place] = []
            if messages:
                deadline = time.monotonic() + READ_TIMEOUT
            elif time.monotonic() > deadline:
                waiting = ", ".join(f"{t} partition {p} offsets {position[(t, p)]} to {ranges[(t, p)].end - 1}" for t, p in sorted(reading))
                raise Unavailable(f"no record within {READ_TIMEOUT:.0f}s at {waiting}, though the broker reported them")
    finally:
        consumer.close()


def _consumer(client: tuple[tuple[str, str], ...]):
    from confluent_kafka import Consumer

    return Consumer({**dict(client), "group.id": f"laketide-{uuid.uuid4()}", "enable.auto.commit": False, "enable.partition.eof": True})


def _row(message) -> tuple:
    kind, millis = message.timestamp()
    headers = [{"key": k, "value": v} for k, v in (message.headers() or [])]
    return (message.key(), message.value(), message.topic(), message.partition(), message.offset(), millis * 1000 if kind else None, kind, headers)


def _batch(rows: list[tuple]) -> pa.RecordBatch:
    columns = list(zip(*rows))
    return pa.RecordBatch.from_arrays([pa.array(column, field.type) for column, field in zip(columns, SCHEMA)], schema=SCHEMA)


class KafkaDataSource(DataSource):
    """``format("laketide-kafka")``: Kafka records with the columns of Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        return from_arrow_schema(SCHEMA)

    def streamReader(self, schema) -> KafkaStreamReader:
        return KafkaStreamReader(dict(self.options))
