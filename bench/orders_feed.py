"""A Postgres ``orders`` table's change events as Debezium's connector sends them through the JSON converter with
schemas off (REPLICA IDENTITY DEFAULT: a delete's ``before`` holds the key alone), produced to a 3-partition
topic at a steady rate, and the model of what they leave (``Keys``): the freshness benchmark's feed.

Producers are processes, each owning the keys equal to its number modulo their count (so one key's changes keep
their order), batching as librdkafka does (``linger.ms = 5``): one, or past ``PER_PRODUCER`` a second one a
partition, never two on one partition. Tansu (0.6) takes a batch's offsets (raising the partition's high
watermark) before it stores the batch, so while two producers write one partition a fetch can find a later batch
stored and an earlier one not yet: the consumer is handed the later and the earlier's records are never seen
(at 30,000 a second from two producers, 12 to 34 keys of a run went missing from the table). Tansu (0.6)
answers ListOffsets with a partition's newest record batch's first offset plus one, so the rest of that batch
stays unseen until the next produce: after each rate, ``fence`` sends a heartbeat (``{"ts_ms": ...}``, which
the job counts and skips) alone to each partition.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from multiprocessing.sharedctypes import RawArray
from pathlib import Path

import numpy as np
import pyarrow as pa
from confluent_kafka import Producer

TOPIC = "pg.public.orders"
PARTITIONS = 3
DDL = "id BIGINT, region STRING, name STRING, amount DOUBLE, qty INT"
REGIONS = ("eu", "us", "apac")
SHARES = (0.7, 0.2, 0.1)  # updates, inserts, deletes
RECENT = 100_000  # the rows an update or delete picks from: the newest ones
PER_PRODUCER = 15_000  # records a second one producer process is asked for at most
LSN_STEP = 10**11  # the measured phase's log positions start above the warm-up's
FORK = multiprocessing.get_context("fork")  # producers share the model's arrays (``Keys``) with this process


def row(key: int, version: int) -> dict:
    return {
        "id": key,
        "region": REGIONS[key % 3],
        "name": f"n{key}v{version}",
        "amount": round(key * 0.01 + version, 2),
        "qty": version % 1000,
    }


def event(op: str, key: int, version: int, lsn: int, snapshot: str = "false") -> bytes:
    now = int(time.time() * 1000)
    before = {"id": key, "region": None, "name": None, "amount": None, "qty": None} if op == "d" else None
    source = {
        "version": "2.7.3.Final",
        "connector": "postgresql",
        "name": "pg",
        "ts_ms": now,
        "snapshot": snapshot,
        "db": "shop",
        "sequence": f'["{lsn - 1}","{lsn}"]',
        "schema": "public",
        "table": "orders",
        "txId": lsn // 8,
        "lsn": lsn,
        "xmin": None,
    }
    return json.dumps(
        {
            "before": before,
            "after": None if op == "d" else row(key, version),
            "source": source,
            "op": op,
            "ts_ms": now,
            "transaction": None,
        }
    ).encode()


class Keys:
    """The model: each key's last version and whether it is deleted, in shared memory, each producer writing its own
    keys' slots only; ``high`` the keys taken so far."""

    def __init__(self, size: int):
        self.size = size
        self.version = np.frombuffer(RawArray("i", size), dtype=np.int32)
        self.state = np.frombuffer(RawArray("b", size), dtype=np.int8)  # 0 never written, 1 live, 2 deleted
        self.high = 0

    def expected(self) -> pa.Table:
        live = np.nonzero(self.state == 1)[0]
        return pa.Table.from_pylist([row(int(k), int(self.version[k])) for k in live])


def fence(bootstrap: str) -> None:
    """A heartbeat alone in a request to each partition, after which Tansu's ListOffsets covers every record."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in range(PARTITIONS):
        producer.produce(TOPIC, value=json.dumps({"ts_ms": int(time.time() * 1000)}).encode(), partition=partition)
        producer.flush(60)


# of which offsets a producer times from produce to the broker's acknowledgement (the broker's share of freshness)
DELIVERY_SAMPLE = 20


def produce_phase(
    keys: Keys, bootstrap: str, rate: int, seconds: float, phase: int, seed: int
) -> tuple[int, list[float]]:
    """``rate`` records a second for ``seconds`` from as many processes as that takes; the records delivered, and for
    every ``DELIVERY_SAMPLE``-th offset the seconds from its produce timestamp to the broker's acknowledgement."""
    if rate > PER_PRODUCER * PARTITIONS:
        raise SystemExit(
            f"at most {PER_PRODUCER * PARTITIONS:,} records a second: a producer a partition, {PER_PRODUCER:,} "
            "a second each"
        )
    count = 1 if rate <= PER_PRODUCER else PARTITIONS  # a producer's keys are one partition's (key modulo PARTITIONS)
    done = FORK.Queue()
    procs = [
        FORK.Process(target=_producer, args=(keys, bootstrap, rate / count, seconds, phase, i, count, seed, done))
        for i in range(count)
    ]
    for p in procs:
        p.start()
    results = [done.get() for _ in procs]
    for p in procs:
        p.join()
    keys.high = max(high for _, high, _ in results)
    return sum(sent for sent, _, _ in results), [s for _, _, delivered in results for s in delivered]


def _producer(
    keys: Keys, bootstrap: str, rate: float, seconds: float, phase: int, index: int, count: int, seed: int, done
) -> None:
    rng = np.random.default_rng(seed * 1000 + phase * 100 + index)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    lsn = phase * LSN_STEP + index
    high = keys.high
    fresh = (
        high + (index - high) % count
    )  # this producer's first new key: its keys, and so its partition, are index modulo count
    sent, started = 0, time.monotonic()
    delivered: list[float] = []
    failed: list[str] = []  # a record the broker did not take is in the model but not in the topic

    def acknowledged(error, message) -> None:
        if error is not None:
            failed.append(str(error))
        elif message.offset() % DELIVERY_SAMPLE == 0:
            delivered.append(time.time() - message.timestamp()[1] / 1000)

    while (now := time.monotonic() - started) < seconds:
        due = int(now * rate) + 1
        while sent < due:
            pick = rng.random()
            key = -1
            if pick < SHARES[0] + SHARES[2] and high > count:
                key = int(rng.integers(max(0, high - RECENT), high))
                key = key - key % count + index  # one of this producer's keys
                key = key - count if key >= high else key
            if key < 0 or keys.state[key] == 0:  # an insert, or a pick that fell on a key never written
                key, fresh = fresh, fresh + count
            if key >= keys.size:
                break
            live = keys.state[key] == 1
            op = "d" if live and pick >= SHARES[0] and pick < SHARES[0] + SHARES[2] else "u" if live else "c"
            keys.version[key] += keys.state[key] != 0
            keys.state[key] = 2 if op == "d" else 1
            lsn += count
            producer.produce(
                TOPIC,
                key=json.dumps({"id": key}).encode(),
                value=event(op, key, int(keys.version[key]), lsn),
                partition=key % PARTITIONS,
                on_delivery=acknowledged,
            )
            producer.poll(0)
            sent += 1
        time.sleep(0.005)
    if producer.flush(300):
        failed.append(f"{len(producer)} records not delivered within 300 s")
    if failed:
        print(f"producer {index}: {len(failed)} records not delivered, e.g. {failed[0]}", file=sys.stderr, flush=True)
    done.put((sent - len(failed), fresh, delivered))


def snapshot(keys: Keys, landing: Path, total: int, files: int = 4) -> None:
    """``total`` rows as the connector's snapshot reads them (``op = r``), as JSON lines in ``files`` landing files (as
    Kafka Connect's file and S3 sinks write them): loaded by a job of their own before the stream begins, so that the
    broker starts empty (Tansu's fetches and ListOffsets take longer the more a partition holds)."""
    landing.mkdir(parents=True)
    for n in range(files):
        with (landing / f"snapshot-{n}.json").open("wb") as out:
            out.write(b"\n".join(event("r", key, 0, key + 1, "true") for key in range(n, total, files)) + b"\n")
    keys.state[:total] = 1
    keys.high = total
