"""`laketide run` fed by Kafka (Tansu, started here) with Debezium change events, read back by hudi-rs.

The broker runs without Spark's Kafka connector on the classpath, so the job reads with laketide's own
Kafka source (``source.kafka.reader = "auto"`` picks it); ``reader = "spark"`` is refused with the way out.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import signal
import subprocess
import time

import httpx
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from chaoslib import Job, free_port, run_here, wait_until
from debezium import COLUMNS, ROW_DDL, ChangeModel, event, row
from opslib import CLI, ENV
from readback import hudi_read, rows

TOPIC = "dbserver.public.orders"


def job_conf(root, bootstrap: str, **more: str) -> list[str]:
    settings = {
        "table.path": str(root / "table"),
        "table.name": "orders",
        "table.record_key": '["id"]',
        "table.partition_by": '["region"]',
        "table.ordering_field": "_event_position",
        "source.format": "kafka",
        "source.kafka.bootstrap_servers": bootstrap,
        "source.kafka.topics": f'["{TOPIC}"]',
        "source.schema": ROW_DDL,
        "source.envelope": "debezium",
        "stream.checkpoint": str(root / "checkpoint"),
        "stream.trigger": "available-now",
        "write.index_shards": "2",
        "write.parallelism": "2",
        **more,
    }
    return [a for k, v in settings.items() for a in ("--conf", f"{k}={v}")]


def run(root, bootstrap: str, expect: int = 0, **more: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [CLI, "run", *job_conf(root, bootstrap, **more)], capture_output=True, text=True, env=ENV, timeout=600
    )
    with open(root / "runs.log", "a") as log:  # the whole of each run, for when one fails
        log.write(done.stderr)
    assert done.returncode == expect, (
        f"laketide run exited {done.returncode} (all of it in {root / 'runs.log'}):\n{done.stderr[-3000:]}"
    )
    return done


def prepare(root, bootstrap: str, **more: str) -> None:
    """The same job on this test process's Spark session, for a run that only builds a test's starting state."""
    run_here([CLI, "run", *job_conf(root, bootstrap, **more)])


def send(kafka, events: list[dict]) -> None:
    """Each event to the partition of its key, as Debezium's producer does (here: id mod 3)."""
    for e in events:
        payload = e["payload"]
        image = payload["before"] if payload["op"] == "d" else payload["after"]
        kafka.produce(TOPIC, image["id"] % 3, {"id": image["id"]}, e)


def table_rows(root) -> list[dict]:
    return rows(hudi_read(root / "table"), "id", COLUMNS)


def quarantined(root) -> list[dict]:
    """Every row the job set aside, from the quarantine beside the table."""
    return [r for f in (root / "table_quarantine").rglob("*.parquet") for r in pq.read_table(f).to_pylist()]


def test_debezium_events_from_kafka_land_as_the_model(kafka, tmp_path):
    """Creates, updates, deletes, a key change, events out of order within a micro-batch and across
    micro-batches, a tombstone and a malformed message, over a 3-partition topic, in two runs."""
    kafka.create_topic(TOPIC, 3)
    model = ChangeModel()
    first = [event("r", 10 + i, after=row(i, 1)) for i in range(12)]  # the snapshot
    first += [
        event("u", 40, before=row(1, 1), after=row(1, 2)),
        event("u", 39, before=row(1, 1), after=row(1, 9)),
    ]  # out of order in the batch
    first += [event("d", 41, before=row(2, 1))]
    send(kafka, first)
    kafka.produce(TOPIC, 2, {"id": 2}, None)  # the tombstone after a delete
    kafka.produce(TOPIC, 0, {"id": 3}, b"{not json")  # malformed
    model.apply(first)
    started = run(tmp_path, kafka.bootstrap)
    assert table_rows(tmp_path) == model.expected()
    # the query's first micro-batch, whose start the checkpoint does not log, is sized from the brokers'
    # earliest offsets: a few events are written by the driver, not by Spark's tasks
    assert re.search(r"micro-batch 0: .* on driver", started.stderr), started.stderr[-3000:]

    second = [event("u", 30, before=row(3, 1), after=row(3, 7))]  # older than nothing stored: applies
    second += [event("u", 50, before=row(4, 1), after=row(4, 2)), event("u", 45, before=row(4, 1), after=row(4, 8))]
    second += [event("u", 35, before=row(1, 1), after=row(1, 5))]  # older than the stored lsn 40: changes nothing
    second += [
        event("d", 60, before=row(5, 1)),
        event("c", 61, after=row(105, 1, region=row(5, 1)["region"])),
    ]  # a key change
    second += [event("c", 70 + i, after=row(i, 1)) for i in range(20, 26)] + [
        event("x", 80, after=row(7, 3))
    ]  # an unknown op
    send(kafka, second)
    model.apply(second)
    done = run(tmp_path, kafka.bootstrap)
    assert table_rows(tmp_path) == model.expected()
    assert "lag=" in done.stderr

    aside = quarantined(tmp_path)
    malformed = [r for r in aside if "not valid JSON" in r["reason"]]
    assert (
        len(malformed) == 1
        and json.loads(malformed[0]["raw"])["partition"] == 0
        and json.loads(malformed[0]["raw"])["value"] == "{not json"
    )
    assert "offset" in json.loads(malformed[0]["raw"])
    unknown = [r for r in aside if "unknown Debezium op 'x'" in r["reason"]]
    assert len(unknown) == 1 and json.loads(unknown[0]["raw"])["offset"] >= 0
    # each row says where it came from: its topic, partition and offset
    raw = json.loads(malformed[0]["raw"])
    assert malformed[0]["source"] == f"{raw['topic']}/0@{raw['offset']}"


def test_the_spark_reader_without_its_connector_is_refused_with_the_way_out(kafka, tmp_path):
    kafka.create_topic(TOPIC, 3)
    done = run(tmp_path, kafka.bootstrap, expect=2, **{"source.kafka.reader": "spark"})
    assert "spark-sql-kafka-0-10" in done.stderr and "--packages" in done.stderr


class Feed:
    """Change events for keys 0..keys-1 at rising LSNs: updates, now and then a delete, and a create again."""

    def __init__(self, kafka, seed: int, keys: int = 40):
        self.kafka, self.rng, self.keys = kafka, random.Random(seed), keys
        self.lsn, self.version, self.live, self.sent = 100, 0, set(), []

    def next_events(self, n: int) -> list[dict]:
        out = []
        for _ in range(n):
            i = self.rng.randrange(self.keys)
            self.lsn += 1
            self.version += 1
            if i in self.live and self.rng.random() < 0.15:
                out.append(event("d", self.lsn, before=row(i, self.version)))
                self.live.discard(i)
            else:
                out.append(event("u" if i in self.live else "c", self.lsn, after=row(i, self.version)))
                self.live.add(i)
        return out

    def send(self, n: int) -> None:
        events = self.next_events(n)
        send(self.kafka, events)
        self.sent += events


def test_kill_9_cycles_while_events_arrive_leave_the_model_exact(kafka, tmp_path):
    """Three `laketide run` jobs killed (SIGKILL, the whole process group) at random moments while events
    keep arriving; a last run drains the topic: every event applied exactly once, the table equals the model."""
    kafka.create_topic(TOPIC, 3)
    feed, rng = Feed(kafka, seed=5), random.Random(9)
    feed.send(30)
    conf = job_conf(
        tmp_path,
        kafka.bootstrap,
        **{"stream.trigger": "1 second", "source.kafka.max_offsets_per_trigger": "10", "coordinator.lease_wait": "30"},
    )
    for cycle in range(3):
        log = tmp_path / f"job-{cycle}.log"
        job = Job([CLI, "run", *conf], log).start()
        feed.send(5)  # events for it to read: a job killed once it had read all there was left nothing to the next
        wait_until(lambda job=job, log=log: not job.running() or "micro-batch" in log.read_text(), 180, "a micro-batch")
        for _ in range(rng.randint(2, 6)):
            feed.send(5)
            time.sleep(rng.uniform(0.1, 0.6))
        assert job.running(), job.log_tail()
        job.kill()
    # the first micro-batch is bounded by source.kafka.max_offsets_per_trigger: the driver writes it
    assert re.search(r"micro-batch 0: .* on driver", (tmp_path / "job-0.log").read_text())
    prepare(tmp_path, kafka.bootstrap, **{"coordinator.lease_wait": "30"})  # drains the topic
    model = ChangeModel()
    model.apply(feed.sent)
    assert table_rows(tmp_path) == model.expected()
    # exactly once: every micro-batch committed once, in order, and the last one ends where the topic ends
    from laketide.table import Table
    from laketide.table.format.commit import BATCH_ID_KEY
    from laketide.writer.landing import source_offsets

    timeline = Table.open(str(tmp_path / "table")).timeline
    batches = [int(timeline.commit_metadata(i).extra_metadata[BATCH_ID_KEY]) for i in timeline.completed_writes()]
    assert batches == list(range(len(batches))), batches
    ends = source_offsets(str(tmp_path / "checkpoint"), batches[-1])
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "probe"})
    assert ends == {
        TOPIC: {str(p): probe.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(3)}
    }
    probe.close()


def test_lag_shows_and_falls_to_zero_once_the_producer_stops(kafka, tmp_path):
    """A running job with its API: while it catches up (10 offsets a micro-batch) its lag per partition
    shows in /v1/writer and /metrics, and its health says when the backlog is written, in the dashboard too; once the
    producer stops, the lag falls to 0 everywhere."""
    kafka.create_topic(TOPIC, 3)
    feed = Feed(kafka, seed=3)
    feed.send(150)
    port = free_port()
    conf = job_conf(
        tmp_path,
        kafka.bootstrap,
        **{
            "stream.trigger": "1 second",
            "source.kafka.max_offsets_per_trigger": "10",
            "coordinator.api_port": str(port),
        },
    )
    job = Job([CLI, "run", *conf], tmp_path / "job.log").start()
    api = f"http://127.0.0.1:{port}"
    seen_lag, catching_up = [], []

    def lag() -> dict:
        try:
            view = httpx.get(f"{api}/v1/writer", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return {}
        recent, health = view.get("recent"), view.get("health") or {}
        if recent and recent[-1]["lag"]:
            seen_lag.append(recent[-1]["lag"])
        if health.get("summary", "").startswith("catching up:"):
            catching_up.append((health, httpx.get(f"{api}/ui/part/job", timeout=5).text))
        return recent[-1]["lag"] if recent else {}

    try:
        wait_until(lambda: sum(lag().values() or [0]) > 0, 180, "a lag above 0")
        wait_until(lambda: lag() is not None and catching_up, 120, "the health to say when the backlog is written")
        health, page = catching_up[0]
        assert health["backlog"]["catch_up_seconds"] > 0 and health["backlog"]["rate"] > 0, health
        assert re.search(r'id="job-catch-up">written in about \d+ (s|min)<', page), page
        metrics = httpx.get(f"{api}/metrics", timeout=5).text
        assert 'laketide_source_lag{partition="0",table=' in metrics and f'topic="{TOPIC}"}}' in metrics
        wait_until(
            lambda: (current := lag()) and len(current) == 3 and not any(current.values()), 300, "the lag to fall to 0"
        )
        metrics = httpx.get(f"{api}/metrics", timeout=5).text
        assert all(
            re.search(rf'laketide_source_lag{{partition="{p}",table="[^"]*",topic="{TOPIC}"}} 0.0', metrics)
            for p in range(3)
        )
    finally:
        job.signal(signal.SIGTERM)
        job.wait(120)
    model = ChangeModel()
    model.apply(feed.sent)
    assert table_rows(tmp_path) == model.expected()


def test_offsets_gone_from_the_broker_stop_the_job_and_the_setting_goes_on(kafka, tmp_path):
    """The topic is deleted and made again under the job: the next run stops with exit code 4, naming the
    partitions and source.kafka.fail_on_data_loss; with it false, the run reads the new topic from its start."""
    kafka.create_topic(TOPIC, 3)
    feed = Feed(kafka, seed=8)
    feed.send(30)
    prepare(tmp_path, kafka.bootstrap)
    kafka.delete_topic(TOPIC)
    wait_until(lambda: TOPIC not in kafka.admin.list_topics(timeout=10).topics, 60, "the topic to go")
    kafka.create_topic(TOPIC, 3)
    fresh = [event("u", 10_000 + n, after=row(n, 99)) for n in range(3)]
    send(kafka, fresh)
    refused = run(tmp_path, kafka.bootstrap, expect=4)
    assert "source.kafka.fail_on_data_loss" in refused.stderr and TOPIC in refused.stderr
    done = run(tmp_path, kafka.bootstrap, **{"source.kafka.fail_on_data_loss": "false"})
    assert "DATA LOSS" in done.stderr
    model = ChangeModel()
    model.apply(feed.sent + fresh)
    assert table_rows(tmp_path) == model.expected()


@pytest.mark.parametrize("stop", [3, 5])
def test_a_split_stops_at_its_end_offset_whatever_lies_beyond(kafka, stop):
    """The reader reads ``[start, end)`` and no further, so a broker whose high watermark lags behind
    the records it holds (Tansu's, after a batched produce) delays records, never repeats or loses one."""
    from laketide.spark.kafka.brokers import OffsetRange
    from laketide.spark.kafka.source import KafkaSplit, read_split

    kafka.create_topic("plain", 1)
    for n in range(8):
        kafka.produce("plain", 0, None, {"n": n})
    split = KafkaSplit((OffsetRange("plain", 0, 1, stop),), (("bootstrap.servers", kafka.bootstrap),))
    offsets = [o for batch in read_split(split) for o in batch.column("offset").to_pylist()]
    assert offsets == list(range(1, stop))


@pytest.mark.parametrize("ahead", [False, True], ids=["kept", "read-ahead"])
def test_a_kept_consumer_reads_on_where_it_ended_and_afresh_elsewhere(kafka, ahead):
    """The driver's consumer, kept between micro-batches: a range that starts where the last ended is read from
    what was fetched ahead (and, with ``read_ahead`` between reads, held as Arrow by its thread); one that does not
    (a restart, a replay) is read afresh from its start. Records of several partitions come in (partition, offset)
    order, each exactly once."""
    from laketide.spark.kafka.brokers import OffsetRange
    from laketide.spark.kafka.consumer import RangeConsumer

    kafka.create_topic("kept", 2)
    for n in range(20):
        kafka.produce("kept", n % 2, None, {"n": n})
    consumer = RangeConsumer({"bootstrap.servers": kafka.bootstrap})
    try:

        def read(*ranges):
            table = consumer.read([OffsetRange("kept", p, a, b) for p, a, b in ranges])
            if ahead:
                consumer.read_ahead()
                time.sleep(0.5)  # its thread holds what the next read asks for, or more
            return list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))

        assert read((0, 0, 4), (1, 0, 3)) == [(0, o) for o in range(4)] + [(1, o) for o in range(3)]
        if ahead:  # at least as many again of each partition read: 4 of partition 0, 3 of partition 1
            consumer._settle()
            held = [consumer._partitions[("kept", p)].held_rows for p in (0, 1)]
            assert held[0] >= 4 and held[1] >= 3, held
        assert read((0, 4, 6), (1, 3, 10)) == [(0, 4), (0, 5)] + [(1, o) for o in range(3, 10)]
        assert read((0, 2, 5)) == [(0, 2), (0, 3), (0, 4)]  # a replay: afresh
        assert read((0, 5, 10), (1, 10, 10)) == [(0, o) for o in range(5, 10)]
    finally:
        consumer.close()


def test_a_read_ahead_that_fails_leaves_the_next_read_to_start_afresh(kafka):
    """The read-ahead's thread meets a failure (a broker gone mid-fetch): it forgets what it held and stops, and the
    next read, on a consumer that works again, reads its range from its start, every record once."""
    from confluent_kafka import KafkaException

    from laketide.spark.kafka.brokers import OffsetRange
    from laketide.spark.kafka.consumer import RangeConsumer

    kafka.create_topic("ahead", 1)
    for n in range(10):
        kafka.produce("ahead", 0, None, {"n": n})
    consumer = RangeConsumer({"bootstrap.servers": kafka.bootstrap})
    real = consumer._consumer

    class Failing:  # the consumer, its fetches failing
        def consume(self, *args, **kwargs):
            raise KafkaException("the broker went away")

        def __getattr__(self, name):
            return getattr(real, name)

    try:
        assert consumer.read([OffsetRange("ahead", 0, 0, 4)]).column("offset").to_pylist() == list(range(4))
        for place in consumer._partitions.values():  # nothing held yet: the read-ahead must fetch
            place.held, place.held_rows, place.held_bytes = [], 0, 0
            place.known = place.handed
        consumer._consumer = Failing()
        consumer.read_ahead()
        assert consumer._ahead is not None
        consumer._ahead[0].join(30)  # it ends on its own, at its first fetch
        consumer._settle()
        assert consumer._partitions == {}
        consumer._consumer = real
        assert consumer.read([OffsetRange("ahead", 0, 4, 10)]).column("offset").to_pylist() == list(range(4, 10))
    finally:
        consumer._consumer = real
        consumer.close()


def test_the_driver_weighs_a_kafka_record_by_the_records_it_read(kafka, tmp_path):
    """Whether a micro-batch is read on the driver goes by its records' weight: 1 KB each until the driver read some,
    then twice their keys' and values' bytes, so a backlog of small change events is not sent to Spark's tasks."""
    from laketide.spark.kafka.offsets import KAFKA_RECORD_BYTES

    kafka.create_topic("weighed", 1)
    for n in range(10):
        kafka.produce("weighed", 0, None, {"n": n})
    offsets = _offsets(kafka, tmp_path, "weighed", {0: {"0": 4}, 1: {"0": 10}})
    try:
        assert offsets.record_weight() == KAFKA_RECORD_BYTES
        records = offsets.read(1)
        assert records.column("offset").to_pylist() == list(range(4, 10))
        assert offsets.record_weight() == 2 * (records["key"].nbytes + records["value"].nbytes) // 6 < 100
    finally:
        offsets.close()


@pytest.mark.parametrize(
    ("starting", "first"),
    [("earliest", [0, 0]), ('{"first": {"0": 2, "1": -2}}', [2, 0]), ("latest", None), ('{"first": {"0": 1}}', None)],
)
def test_the_querys_first_micro_batch_is_read_by_the_driver_from_where_the_query_starts(
    kafka, tmp_path, starting, first
):
    """The offset log holds no start for a query's first micro-batch: the driver reads it from where
    ``starting_offsets`` puts it (the brokers' earliest, or the offsets named, -2 the earliest), and leaves it to the
    query's scan where only the source knew (``latest``, a partition not named)."""
    kafka.create_topic("first", 2)
    for n in range(10):
        kafka.produce("first", n % 2, None, {"n": n})
    offsets = _offsets(kafka, tmp_path, "first", {0: {"0": 4, "1": 5}}, f"source.kafka.starting_offsets={starting}")
    try:
        records = offsets.read(0)
        if first is None:
            assert records is None
        else:
            assert records is not None
            got = {p: records.filter(pc.equal(records["partition"], p))["offset"].to_pylist() for p in (0, 1)}
            assert got == {0: list(range(first[0], 4)), 1: list(range(first[1], 5))}
    finally:
        offsets.close()


def test_starting_offsets_name_a_start_for_every_partition_or_are_refused_naming_the_ones_left_out():
    """As Spark's Kafka source: JSON starting offsets must name every partition the query reads (-2 the earliest,
    -1 the latest); one left out is refused, not read from an offset nobody chose."""
    from laketide.spark.kafka.brokers import EARLIEST, LATEST, named_starts
    from laketide.table.errors import Invalid

    parts = {"t": ["0", "1"], "u": ["0"]}
    assert named_starts("earliest", parts) == {"t": {"0": EARLIEST, "1": EARLIEST}, "u": {"0": EARLIEST}}
    assert named_starts('{"t": {"0": 5, "1": -1}, "u": {"0": -2}}', parts) == {
        "t": {"0": 5, "1": LATEST},
        "u": {"0": EARLIEST},
    }
    with pytest.raises(Invalid, match="names no start for t/1, u/0: give every partition"):
        named_starts('{"t": {"0": 5}}', parts)
    with pytest.raises(Invalid, match="is not 'earliest', 'latest' or JSON"):
        named_starts("oldest", parts)


def _offsets(kafka, tmp_path, topic: str, logged: dict[int, dict[str, int]], *settings: str):
    """The driver's ``KafkaOffsets`` of a job reading ``topic``, its checkpoint's offset log holding ``logged`` (each
    micro-batch's end offsets by partition) as Spark writes it: the entry's last line the source's offsets."""
    from laketide.config import load_config
    from laketide.spark.kafka.offsets import KafkaOffsets

    (tmp_path / "checkpoint" / "offsets").mkdir(parents=True)
    for batch, end in logged.items():
        (tmp_path / "checkpoint" / "offsets" / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0}\n' + json.dumps({topic: end})
        )
    config = load_config(
        overrides=[
            f"table.path={tmp_path / 't'}",
            "table.name=t",
            'table.record_key=["n"]',
            "source.format=kafka",
            f"source.kafka.bootstrap_servers={kafka.bootstrap}",
            f'source.kafka.topics=["{topic}"]',
            "source.schema=n INT",
            f"stream.checkpoint={tmp_path / 'checkpoint'}",
            *settings,
        ]
    )
    return KafkaOffsets(config)


def test_a_range_the_broker_no_longer_holds_stops_the_read_which_plans_again_from_what_it_holds():
    """Retention passed a range's start: the consumer, which never resets on its own (``auto.offset.reset = error``),
    raises ``OffsetsGone`` instead of reading from elsewhere, and forgets what it read of the ranges. (Tansu keeps
    every record, so the broker's side of this is not run here.)"""
    from confluent_kafka import KafkaError

    from laketide.spark.kafka.brokers import OffsetRange
    from laketide.spark.kafka.consumer import OffsetsGone, RangeConsumer

    class Reset:  # the event librdkafka hands the application for a fetch out of range
        def topic(self):
            return "t"

        def partition(self):
            return 0

        def offset(self):
            return -1001

        def error(self):
            return KafkaError(KafkaError._AUTO_OFFSET_RESET)

    class Fetching:  # the consumer, its fetch answered out of range
        def __init__(self, real):
            self.real = real

        def consume(self, *args, **kwargs):
            return [Reset()]

        def __getattr__(self, name):
            return getattr(self.real, name)

    consumer = RangeConsumer({"bootstrap.servers": "127.0.0.1:9"})
    consumer._consumer = Fetching(consumer._consumer)
    try:
        with pytest.raises(OffsetsGone, match="t partition 0: offset 5 is no longer on the broker"):
            consumer.read([OffsetRange("t", 0, 5, 9)])
        assert consumer._partitions == {}  # a read of them starts afresh
    finally:
        consumer.close()


PLAIN = "plain.orders"


def test_plain_json_values_are_read_and_decoded_on_the_driver_and_bad_ones_left_to_spark(kafka, tmp_path):
    """Values that are the rows themselves, a timestamp and a date among their columns as ISO text: each micro-batch,
    the query's first too, is read by the driver's kept consumer and decoded by pyarrow; a micro-batch holding a
    value pyarrow would read otherwise than Spark's from_json goes through from_json (of the records the driver
    read), its bad record to quarantine with topic and offset."""
    kafka.create_topic(PLAIN, 3)

    def produce(version: int, bad: bytes | None = None) -> None:
        for n in range(9):
            kafka.produce(
                PLAIN,
                n % 3,
                {"id": n},
                {
                    "id": n,
                    "name": f"n{n}v{version}",
                    "amount": n + version / 10,
                    "region": "eu",
                    "ts": version,
                    "at": f"2024-0{version}-02T03:04:0{n}.5+02:00",
                    "day": f"2024-0{version}-1{n}",
                },
            )
        if bad is not None:
            kafka.produce(PLAIN, 0, {"id": 0}, bad)
        kafka.produce(PLAIN, 1, {"id": 1}, None)  # a tombstone: no row

    conf = {
        "table.path": str(tmp_path / "table"),
        "table.name": "plain",
        "table.record_key": '["id"]',
        "table.ordering_field": "ts",
        "source.format": "kafka",
        "source.kafka.bootstrap_servers": kafka.bootstrap,
        "source.kafka.topics": f'["{PLAIN}"]',
        "source.schema": "id BIGINT, name STRING, amount DOUBLE, region STRING, ts BIGINT, at TIMESTAMP, day DATE",
        "source.kafka.max_offsets_per_trigger": "6",
        "stream.checkpoint": str(tmp_path / "checkpoint"),
        "stream.trigger": "available-now",
        "write.parallelism": "2",
    }
    args = [CLI, "run", *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]]
    produce(1)
    first = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    produce(2, bad=b'{"id": "zero", "ts": 3}')
    produce(3)
    second = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    lines = re.findall(r"micro-batch \d+: instant=.*", first.stderr + second.stderr)
    assert lines and not [line for line in lines if " on driver " not in line], [
        line for line in lines if " on driver " not in line
    ]
    got = rows(hudi_read(tmp_path / "table"), "id", ["id", "name", "amount", "ts", "at", "day"])
    assert got == [
        {
            "id": n,
            "name": f"n{n}v3",
            "amount": n + 0.3,
            "ts": 3,
            "at": dt.datetime(2024, 3, 2, 1, 4, n, 500_000, tzinfo=dt.UTC),
            "day": dt.date(2024, 3, 10 + n),
        }
        for n in range(9)
    ]
    aside = quarantined(tmp_path)
    assert len(aside) == 1 and json.loads(aside[0]["raw"])["value"] == '{"id": "zero", "ts": 3}', aside
    assert json.loads(aside[0]["raw"])["topic"] == PLAIN and "not valid JSON" in aside[0]["reason"]


ROW_AVRO = {
    "type": "record",
    "name": "Value",
    "namespace": "dbserver.public.orders",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
        {"name": "amount", "type": ["null", "double"]},
        {"name": "region", "type": ["null", "string"]},
    ],
}
ENVELOPE_AVRO = {
    "type": "record",
    "name": "Envelope",
    "namespace": "dbserver.public.orders",
    "fields": [
        {"name": "before", "type": ["null", ROW_AVRO]},
        {"name": "after", "type": ["null", "dbserver.public.orders.Value"]},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "fields": [
                    {"name": "connector", "type": "string"},
                    {"name": "lsn", "type": ["null", "long"]},
                    {"name": "ts_ms", "type": "long"},
                ],
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"]},
    ],
}


def test_avro_change_events_in_confluents_wire_format(kafka, tmp_path):
    """Avro values with Confluent's framing (a zero byte, a 4-byte schema id), decoded under the .avsc
    file; a value that is not Avro of it goes to quarantine as base64 with its offset."""
    import io
    import struct

    import fastavro

    kafka.create_topic(TOPIC, 3)
    schema_file = tmp_path / "orders.avsc"
    schema_file.write_text(json.dumps(ENVELOPE_AVRO))
    parsed = fastavro.parse_schema(ENVELOPE_AVRO)
    events = [event("c", 10 + i, after=row(i, 1)) for i in range(9)] + [
        event("u", 30, before=row(4, 1), after=row(4, 2)),
        event("d", 31, before=row(5, 1)),
    ]
    for e in events:
        payload = {k: v for k, v in e["payload"].items()}
        payload["source"] = {
            "connector": "postgresql",
            "lsn": payload["source"]["lsn"],
            "ts_ms": payload["source"]["ts_ms"],
        }
        out = io.BytesIO()
        out.write(b"\x00" + struct.pack(">I", 7))
        fastavro.schemaless_writer(out, parsed, payload)
        image = payload["before"] if payload["op"] == "d" else payload["after"]
        kafka.produce(TOPIC, image["id"] % 3, {"id": image["id"]}, out.getvalue())
    kafka.produce(TOPIC, 1, {"id": 1}, b"\x00\x00\x00\x00\x07\xff\xfe")  # framed, but not a datum of the schema
    model = ChangeModel()
    model.apply(events)
    run(tmp_path, kafka.bootstrap, **{"source.value_format": "avro", "source.avro_schema": str(schema_file)})
    assert table_rows(tmp_path) == model.expected()
    aside = quarantined(tmp_path)
    assert len(aside) == 1 and "not Avro" in aside[0]["reason"]
    raw = json.loads(aside[0]["raw"])
    assert raw["partition"] == 1 and raw["value_base64"] and "value" not in raw  # not UTF-8: as base64 only
