"""How long the job's kept consumer takes to read what a topic gained, as the topic grows, with no job at all.

The freshness benchmark's slowest commits come late in each 3-minute phase. This probe takes the job out: one
producer at ``--rate`` records a second (``linger.ms = 5``, as the freshness feed's; 3 partitions of Tansu's memory
storage, on this machine) and the job's own ``RangeConsumer``, kept open, which every ``--every`` seconds reads from
where it stopped to the partitions' high watermarks. Each read's seconds are reported against how many records the
topic held: a broker that finds a fetch's place by an offset index takes as long at 1M records as at 10,000.

    python bench/broker_fetch.py                                  # 10,000 a second for 150 s
    python bench/broker_fetch.py --consumer fetch.min.bytes=262144 # a consumer setting, repeatable
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_bench import start_tansu
from orders_feed import PARTITIONS, event
from upsert_bench import write_results

from laketide.spark.kafka.brokers import OffsetRange
from laketide.spark.kafka.consumer import RangeConsumer

TOPIC = "probe"
# one update event of the freshness feed, as its producers send them
VALUE = event("u", 1, 1, 1)


def produce(bootstrap: str, rate: int, stop) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    sent, started = 0, time.monotonic()
    while not stop.is_set():
        while sent < int((time.monotonic() - started) * rate):
            producer.produce(TOPIC, key=str(sent).encode(), value=VALUE, partition=sent % PARTITIONS)
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(30)


def probe(bootstrap: str, seconds: float, every: float, consumer: dict[str, str]) -> list[dict]:
    """Each read: when, how deep the topic was, how many records it read and how long that took."""
    watermarks = Consumer({"bootstrap.servers": bootstrap, "group.id": "broker-fetch-probe"})
    kept = RangeConsumer({"bootstrap.servers": bootstrap, **consumer})
    starts, reads, began = dict.fromkeys(range(PARTITIONS), 0), [], time.monotonic()
    try:
        while time.monotonic() - began < seconds:
            time.sleep(every)
            ends = {p: watermarks.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in starts}
            at = time.monotonic()
            rows = kept.read([OffsetRange(TOPIC, p, starts[p], ends[p]) for p in starts]).num_rows
            reads.append(
                {
                    "at": round(at - began, 2),
                    "depth": sum(ends.values()),
                    "records": rows,
                    "seconds": time.monotonic() - at,
                }
            )
            starts = ends
    finally:
        kept.close()
        watermarks.close()
    return reads


def summary(reads: list[dict], windows: int = 10) -> list[dict]:
    """The reads in ``windows`` spans of time: depth at the start, records a read, mean/p95/max seconds."""
    out = []
    for part in np.array_split(np.arange(len(reads)), windows):
        if not len(part):
            continue
        span = [reads[i] for i in part]
        took = np.array([r["seconds"] for r in span])
        out.append(
            {
                "depth": span[0]["depth"],
                "records_a_read": round(float(np.mean([r["records"] for r in span]))),
                "read_mean_seconds": round(float(took.mean()), 3),
                "read_p95_seconds": round(float(np.percentile(took, 95)), 3),
                "read_max_seconds": round(float(took.max()), 3),
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=10_000, help="records a second (default 10,000)")
    parser.add_argument("--seconds", type=float, default=150)
    parser.add_argument("--every", type=float, default=0.3, help="seconds between reads (a micro-batch's pace)")
    parser.add_argument("--consumer", action="append", default=[], help="a librdkafka setting (key=value)")
    parser.add_argument("--out", default=f"bench/results/broker-fetch-{datetime.now(UTC):%Y-%m-%d}.json")
    args = parser.parse_args()
    consumer = dict(setting.split("=", 1) for setting in args.consumer)
    broker, bootstrap = start_tansu()
    stop = multiprocessing.Event()
    producer = multiprocessing.Process(target=produce, args=(bootstrap, args.rate, stop))
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)]).values():
            future.result(30)
        producer.start()
        windows = summary(probe(bootstrap, args.seconds, args.every, consumer))
    finally:
        stop.set()
        producer.join(60)
        os.killpg(broker.pid, signal.SIGKILL)
        broker.wait(30)
    print(f"{'topic depth':>12} {'records/read':>13} {'read mean s':>12} {'p95 s':>7} {'max s':>7}")
    for w in windows:
        print(
            f"{w['depth']:>12,} {w['records_a_read']:>13,} {w['read_mean_seconds']:>12.3f} "
            f"{w['read_p95_seconds']:>7.3f} {w['read_max_seconds']:>7.3f}"
        )
    payload = {
        "workload": {
            "rate": args.rate,
            "seconds": args.seconds,
            "every": args.every,
            "value_bytes": len(VALUE),
            "consumer": consumer,
        },
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "windows": windows,
    }
    write_results(args.out, payload, verified=True)
    print(f"wrote {Path(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
