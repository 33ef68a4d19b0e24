"""The brokers' side of reading Kafka, without Spark: the topics' partitions and offsets, and the offset ranges a
micro-batch reads, checked for data loss. Laketide's Spark source plans its tasks' reads with it
(``kafka.source``), and the driver its own reads (``kafka.consumer``).

Offsets are Spark's Kafka source's own JSON, ``{"topic": {"partition": next offset}}``.

Data loss, as Spark's ``failOnDataLoss`` names it: a start offset below what the broker still keeps
(retention passed it), or a partition or topic that is gone, stops the query with an error naming the
partitions and the offsets lost; with ``fail_on_data_loss = false`` the reader goes on from the earliest
offset still there and logs, at ERROR, every range it skipped.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from laketide.table.errors import Invalid, Refused, Unavailable

log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]  # topic -> partition (as a string, as in JSON) -> next offset
Place = tuple[str, int]  # a topic-partition
EARLIEST, LATEST = -2, -1  # a start offset that names a place in the partition, as in Spark's JSON


class KafkaDataLoss(Refused):
    """Offsets a micro-batch needs are gone from the broker (retention, a deleted topic or partition):
    refused, as losing them silently would break exactly-once (exit code 4)."""


class OffsetRange(NamedTuple):
    """One topic-partition's records ``[start, end)``."""

    topic: str
    partition: int
    start: int
    end: int


class Brokers:
    """The driver's view of the topics: their partitions and offsets, through one admin client.

    The offsets of every partition asked for come in one ListOffsets request per broker for the earliest
    and one for the newest, so planning a micro-batch costs the same round trips for 3 partitions or 300.
    Under ``isolation.level = read_committed`` the newest is the last stable offset, as a consumer of that
    level sees it."""

    def __init__(self, client: dict[str, str]):
        from confluent_kafka.admin import AdminClient

        conf: dict[str, str | int | float | bool] = {**client}
        self.admin = AdminClient(conf)
        self.read_committed = client.get("isolation.level") == "read_committed"

    def partitions(self, topics: list[str], pattern: str | None) -> dict[str, list[int]]:
        try:
            metadata = self.admin.list_topics(timeout=30)
        except Exception as error:
            raise Unavailable(
                f"the Kafka brokers did not answer ({error}); check source.kafka.bootstrap_servers"
            ) from None
        found = {name: sorted(t.partitions) for name, t in metadata.topics.items() if t.error is None}
        if pattern:
            return {
                name: parts
                for name, parts in found.items()
                if re.fullmatch(pattern, name) and not name.startswith("__")
            }
        return {name: found.get(name, []) for name in topics}

    def watermarks(self, partitions: list[Place]) -> dict[Place, tuple[int, int]]:
        """(earliest, next) offset of each (topic, partition): both asked at once."""
        # confluent_kafka's public name, which its package re-exports without declaring it so
        from confluent_kafka.admin import OffsetSpec  # pyright: ignore[reportPrivateImportUsage]

        earliest, latest = self._ask(partitions, OffsetSpec.earliest()), self._ask(partitions, OffsetSpec.latest())
        low, high = self._answers(earliest), self._answers(latest)
        return {place: (low[place], high[place]) for place in partitions}

    def newest(self, partitions: list[Place]) -> dict[Place, int]:
        """The next offset of each (topic, partition): what planning a micro-batch needs, one request (some brokers,
        Tansu among them, take longer over it the more a partition holds)."""
        # confluent_kafka's public name, which its package re-exports without declaring it so
        from confluent_kafka.admin import OffsetSpec  # pyright: ignore[reportPrivateImportUsage]

        return self._answers(self._ask(partitions, OffsetSpec.latest()))

    def _ask(self, partitions: list[Place], spec) -> dict:
        from confluent_kafka import IsolationLevel, TopicPartition

        if not partitions:
            return {}
        level = IsolationLevel.READ_COMMITTED if self.read_committed else IsolationLevel.READ_UNCOMMITTED
        return self.admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in partitions}, isolation_level=level, request_timeout=30
        )

    @staticmethod
    def _answers(asked: dict) -> dict[Place, int]:
        offsets = {}
        for place, answer in asked.items():
            try:
                offsets[(place.topic, place.partition)] = answer.result().offset
            except Exception as error:
                raise Unavailable(
                    f"the Kafka brokers did not give the offsets of {place.topic} partition {place.partition} "
                    f"({error}); check source.kafka.bootstrap_servers"
                ) from None
        return offsets


def named_starts(starting: str, parts: Mapping[str, Sequence[str]]) -> Offsets:
    """Where ``source.kafka.starting_offsets`` starts each of ``parts`` (topic -> partitions): an offset, or
    ``EARLIEST`` / ``LATEST``. JSON must name every partition, as Spark's Kafka source requires."""
    which = {"earliest": EARLIEST, "latest": LATEST}.get(starting)
    if which is not None:
        return {t: {p: which for p in ps} for t, ps in parts.items()}
    try:
        given = json.loads(starting)
        named = {t: {p: int(o) for p, o in ps.items()} for t, ps in given.items()}
    except (ValueError, TypeError, AttributeError):
        raise Invalid(
            f"source.kafka.starting_offsets = {starting!r} is not 'earliest', 'latest' or JSON such as "
            '{"orders": {"0": 42, "1": -2}} (-2: earliest, -1: latest)'
        ) from None
    missing = [f"{t}/{p}" for t, ps in parts.items() for p in ps if p not in named.get(t, {})]
    if missing:
        raise Invalid(
            f"source.kafka.starting_offsets names no start for {', '.join(missing)}: give every partition of the "
            "topics read an offset (-2: earliest, -1: latest)"
        )
    return {t: {p: named[t][p] for p in ps} for t, ps in parts.items()}


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


def plan_ranges(start: Offsets, end: Offsets, brokers: Brokers | None, fail_on_data_loss: bool) -> list[OffsetRange]:
    """The ranges a micro-batch from ``start`` to ``end`` reads, in (topic, partition) order, from where each
    partition stands (0 for one new since ``start``). Given ``brokers``, each is ``checked``; without, the ranges are
    as the offsets say, for a reader that finds offsets gone itself (``kafka.consumer.OffsetsGone``)."""
    ranges = [
        OffsetRange(topic, int(p), start.get(topic, {}).get(p, 0), stop)
        for topic, parts in sorted(end.items())
        for p, stop in sorted(parts.items(), key=lambda item: int(item[0]))
    ]
    _check_gone(start, end, fail_on_data_loss)
    if brokers is not None:
        return checked(ranges, brokers, fail_on_data_loss)
    return [r for r in ranges if r.start < r.end]


def checked(ranges: list[OffsetRange], brokers: Brokers, fail_on_data_loss: bool) -> list[OffsetRange]:
    """``ranges`` read from where the brokers still hold them: from a partition's earliest offset where retention
    passed the start, or where the partition was made again since, when ``fail_on_data_loss`` is off (else
    ``KafkaDataLoss``). Costs a request for the earliest and one for the newest offsets, at once."""
    marks = brokers.watermarks([(r.topic, r.partition) for r in ranges])
    moved = [
        r._replace(
            start=_still_there(r.topic, r.partition, r.start, r.end, marks[(r.topic, r.partition)], fail_on_data_loss)
        )
        for r in ranges
    ]
    return [r for r in moved if r.start < r.end]


def moved_back(start: Offsets, end: Offsets) -> bool:
    """Whether a partition ends before where the stream stood: made again since (``check_behind`` let it go on)."""
    return any(o < start.get(t, {}).get(p, 0) for t, parts in end.items() for p, o in parts.items())


def _still_there(
    topic: str, partition: int, begin: int, stop: int, marks: tuple[int, int], fail_on_data_loss: bool
) -> int:
    low, high = marks
    if begin > high:  # made again since (``check_behind`` decided to go on): from its start
        return low
    if begin >= low:
        return begin
    lost = (
        f"{topic} partition {partition}: offsets {begin} to {min(low, stop) - 1} are gone from the broker "
        "(retention or a deleted topic)"
    )
    if fail_on_data_loss:
        raise KafkaDataLoss(
            f"{lost}. Nothing was written for them. To go on from the earliest offset still there, "
            "set source.kafka.fail_on_data_loss = false and start the job again; the skipped ranges are logged."
        )
    log.error("DATA LOSS: %s; going on from offset %d because source.kafka.fail_on_data_loss = false", lost, low)
    return low


def _check_gone(start: Offsets, end: Offsets, fail_on_data_loss: bool) -> None:
    gone = [f"{t} partition {p}" for t, parts in start.items() for p in parts if p not in end.get(t, {})]
    if gone and fail_on_data_loss:
        raise KafkaDataLoss(
            f"{', '.join(gone)} no longer exist on the broker. To go on without them, set "
            "source.kafka.fail_on_data_loss = false and start the job again."
        )
    for name in gone:
        log.error("DATA LOSS: %s no longer exists; going on without it", name)


def check_behind(start: Offsets, latest: Offsets, fail_on_data_loss: bool) -> None:
    """A partition whose newest offset is below where the stream stands was deleted and made again."""
    behind = [
        (t, p, o, latest[t][p])
        for t, parts in start.items()
        for p, o in parts.items()
        if t in latest and p in latest[t] and latest[t][p] < o
    ]
    for topic, partition, at, newest in behind:
        lost = (
            f"{topic} partition {partition} ends at offset {newest}, before offset {at} where this stream stands "
            "(was the topic deleted and created again?)"
        )
        if fail_on_data_loss:
            raise KafkaDataLoss(
                f"{lost}. To read it again from its earliest offset, set source.kafka.fail_on_data_loss = false "
                "and start the job again."
            )
        log.error(
            "DATA LOSS: %s; reading it again from its earliest offset because source.kafka.fail_on_data_loss = false",
            lost,
        )
