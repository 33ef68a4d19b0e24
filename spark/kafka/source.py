"""Kafka topics as a Spark source of laketide's: ``spark.readStream.format("laketide-kafka")``.

For clusters without Spark's Kafka connector (``spark-sql-kafka-0-10``), on PySpark's Python data source
API and confluent-kafka, shaped as the laketide table source is (FLIP-27): the driver enumerates, the
tasks read. Offsets are Spark's Kafka source's own JSON, ``{"topic": {"partition": next offset}}``, kept
in the query's checkpoint; each topic-partition's range of a micro-batch is read from its start offset up to,
not including, its end offset, a few ranges to a task (``max_splits`` tasks at most, one consumer each, assigned
all its ranges at once). The rows have the columns of Spark's Kafka
source (key, value, topic, partition, offset, timestamp, timestampType, headers), so what follows
reads both alike.

A task checks its ranges against what the brokers still hold before it reads them (``kafka.brokers.checked``);
planning asks the brokers for nothing but the newest offsets. A reader never reads past a split's end offset,
and the ends come from the brokers' high watermarks: a broker that reports a watermark behind what it holds
(Tansu was seen to) only delays records to a later micro-batch, it never loses or repeats one.

Data loss (``failOnDataLoss``) is checked as ``kafka.brokers`` says; records are read by ``kafka.consumer``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from laketide.spark.kafka.brokers import (
    EARLIEST,
    LATEST,
    Brokers,
    KafkaDataLoss,
    OffsetRange,
    Offsets,
    cap,
    check_behind,
    checked,
    moved_back,
    named_starts,
    plan_ranges,
)
from laketide.spark.kafka.consumer import BACKLOG_FETCH_WAIT_MS, RangeConsumer
from laketide.spark.kafka.records import SCHEMA
from laketide.table.errors import Invalid

log = logging.getLogger(__name__)
NAME = "laketide-kafka"
CLIENT_PREFIX = "kafka."  # client options passed through to librdkafka, as Spark's Kafka source takes them
__all__ = ["NAME", "KafkaDataLoss", "KafkaDataSource", "KafkaSplit", "read_split"]


@dataclass(frozen=True)
class KafkaSplit(InputPartition):
    """What one task reads: the ranges of a few topic-partitions, one after another, through one consumer. Many
    topics (a job of a whole database) would otherwise be as many tasks, each making a client and waiting on a fetch."""

    ranges: tuple[OffsetRange, ...]
    client: tuple[tuple[str, str], ...]
    fail_on_data_loss: bool = True


def splits_of(
    ranges: list[OffsetRange], most: int, client: dict[str, str], fail_on_data_loss: bool = True
) -> list[KafkaSplit]:
    """``ranges`` in at most ``most`` splits of about equal records (the largest placed first, each on the
    lightest split), each split's ranges in (topic, partition) order."""
    bins: list[list[OffsetRange]] = [[] for _ in range(min(most, len(ranges)))]
    weights = [0] * len(bins)
    for r in sorted(ranges, key=lambda r: r.end - r.start, reverse=True):
        lightest = weights.index(min(weights))
        bins[lightest].append(r)
        weights[lightest] += r.end - r.start
    settings = tuple(sorted(client.items()))
    return [
        KafkaSplit(tuple(sorted(b, key=lambda r: (r.topic, r.partition))), settings, fail_on_data_loss)
        for b in bins
        if b
    ]


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Options: ``bootstrap_servers``, ``topics`` (comma-separated) or ``topic_pattern``,
    ``starting_offsets`` (``earliest``, ``latest`` or Spark's JSON), ``max_offsets_per_trigger``,
    ``fail_on_data_loss``, and ``kafka.<librdkafka option>``."""

    def __init__(self, options: dict):
        self.client = {"bootstrap.servers": options["bootstrap_servers"]}
        self.client.update({k[len(CLIENT_PREFIX) :]: v for k, v in options.items() if k.startswith(CLIENT_PREFIX)})
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
        parts = self.brokers.partitions(self.topics, self.pattern)
        newest = self.brokers.newest([(topic, p) for topic, ps in parts.items() for p in ps])
        return {topic: {str(p): newest[(topic, p)] for p in ps} for topic, ps in parts.items()}

    def initialOffset(self) -> Offsets:
        marks = self._watermarks()
        named = named_starts(self.starting, {t: list(parts) for t, parts in marks.items()})
        pick = {EARLIEST: 0, LATEST: 1}  # the watermark each names
        return {t: {p: marks[t][p][pick[o]] if o in pick else o for p, o in ps.items()} for t, ps in named.items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        latest = self.target or self._latest()
        check_behind(start, latest, self.fail_on_data_loss)
        end = {t: dict(parts) for t, parts in latest.items()}
        if isinstance(limit, ReadMaxRows):
            end = cap(start, end, limit.max_rows)
        return end

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaSplit]:
        # no request to the brokers here but for a partition made again: Spark plans the scan of every micro-batch,
        # the driver's reads too (which never run it), and the tasks check their ranges (``read_split``)
        brokers = self.brokers if moved_back(start, end) else None
        return splits_of(
            plan_ranges(start, end, brokers, self.fail_on_data_loss),
            self.max_splits,
            self.client,
            self.fail_on_data_loss,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaSplit), "Spark hands back the splits partitions() made"
        yield from read_split(partition)

    def commit(self, end: Offsets) -> None:
        pass

    def stop(self) -> None:
        self._brokers = None


def read_split(split: KafkaSplit) -> Iterator[pa.RecordBatch]:
    """The records of a split's ranges, ``[start, end)`` by offset, through one consumer assigned all of them: Arrow
    batches of one partition each, in offset order within a partition (a key's records are in one partition)."""
    ranges = checked(list(split.ranges), Brokers(dict(split.client)), split.fail_on_data_loss)
    consumer = RangeConsumer(dict(split.client), BACKLOG_FETCH_WAIT_MS)
    try:
        for _, rows in consumer.chunks(ranges):
            yield rows
    finally:
        consumer.close()


class KafkaDataSource(DataSource):
    """``format("laketide-kafka")``: Kafka records with the columns of Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        return from_arrow_schema(SCHEMA)

    def streamReader(self, schema) -> KafkaStreamReader:
        return KafkaStreamReader(dict(self.options))
