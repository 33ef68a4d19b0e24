"""A whole database in one job against one job per table, and delta-rs merging the same changes.

A Debezium-shaped database (``database_feed.py``: 20 tables of 4 to 30 columns, Decimal, Date and
MicroTimestamp among them, every fourth partitioned) in 20 topics of 3 partitions on Tansu: an initial snapshot
of 50,000 rows a table, then 10 rounds of 1,000 creates, updates and deletes a table. Then:

- delta-rs loads the snapshot and merges each round into 20 Delta tables (the peer);
- 20 single-table jobs (`laketide run`, one topic each) run one at a time over the same topics, 1,000 offsets a
  micro-batch: their peak RSS and the median of their last 10 micro-batches (the rounds);
- the database job (`laketide run`, ``table.path`` holding ``{table}``) reads all 20 topics, 20,000 offsets a
  micro-batch (1,000 a table): its peak RSS (driver JVM, driver Python and workers) and the median of its last 10
  micro-batches; then, running on, a steady stream of changes across every table for ``--minutes``: the records a
  second it committed meanwhile, and the lag once the stream stops (goal: caught up).

Every table (Hudi through hudi-rs, Delta through delta-rs) is compared with its model. Results go to
``bench/results/database-<date>.json``.

    python bench/database_bench.py                                  # the full run (about 40 minutes)
    python bench/database_bench.py --tables 4 --rows 2000 --minutes 1
    python bench/database_bench.py --snapshot-rows 1000000   # a snapshot on the driver, then on Spark's tasks
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import pyarrow as pa

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from database_feed import BenchTable, Producer, create_topics, delta_merge, make_tables, mixed, model, snapshot  # noqa: E402
from database_snapshot import snapshot_main  # noqa: E402
from kafka_bench import start_tansu  # noqa: E402
from measure import PeakRss  # noqa: E402
from upsert_bench import write_results  # noqa: E402

CLI = str(Path(sys.executable).with_name("laketide"))
ENV_LOCAL = {"SPARK_LOCAL_IP": "127.0.0.1"}
BATCH_LINE = re.compile(
    r"^(\S+ \S+) INFO laketide.job micro-batch (\d+): tables=\d+ written=(\d+) records=(\d+).* seconds=([\d.]+) "
    r"read=([\d.]+) route=([\d.]+)",
    re.M,
)
SINGLE_LINE = re.compile(
    r"^(\S+ \S+) INFO laketide.job micro-batch (\d+): instant=\S+ records=(\d+).* seconds=([\d.]+)", re.M
)


def settings(work: Path, bootstrap: str, tables: list[BenchTable], path: str, topics: dict, extra: dict) -> list[str]:
    conf = {
        "table.path": path,
        "table.type": "MERGE_ON_READ",
        "source.format": "kafka",
        "source.envelope": "debezium",
        "source.kafka.bootstrap_servers": bootstrap,
        "write.index_shards": "2",
        "write.parallelism": "2",
        **topics,
        **extra,
    }
    conf.update({f"tables.{t.name}.partition_by": '["region"]' for t in tables if t.partitioned and "{table}" in path})
    return [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]


def run_job(args: list[str], log: Path, until=None) -> tuple[int, str, int]:
    """One `laketide run`: its exit code, its log, and its process tree's peak RSS. ``until(job)``: run by the caller
    meanwhile (a stream), after which the job is stopped (SIGINT)."""
    with open(log, "w") as out:
        job = subprocess.Popen(
            [CLI, "run", *args], stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **ENV_LOCAL}
        )
        with PeakRss(pid=job.pid) as peak:
            if until is not None:
                until(job)
                job.send_signal(2)
            code = job.wait(3600)
    return code, log.read_text(), peak.peak


def read_hudi(path: Path, schema: pa.Schema) -> pa.Table:
    from hudi import HudiTableBuilder

    table = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())
    return table.select(schema.names).cast(schema).sort_by("id")


def verified(tables: list[BenchTable], read) -> dict[str, bool]:
    return {t.name: read(t).equals(model(t)) for t in tables}


def produce_backlog(
    bootstrap: str, tables: list[BenchTable], rows: int, rounds: int, per_round: int, seed: int
) -> tuple[list, float]:
    producer, rng = Producer(bootstrap), random.Random(seed)
    started = time.monotonic()
    load = [snapshot(producer, t, rows) for t in tables]
    changes = [[mixed(producer, t, per_round, version, rng) for t in tables] for version in range(1, rounds + 1)]
    producer.flush()
    return [load, *changes], time.monotonic() - started


def run_delta(work: Path, tables: list[BenchTable], rounds: list) -> dict:
    started = time.monotonic()
    for table, changes in zip(tables, rounds[0]):
        delta_merge(work / "delta" / table.name, table, changes)
    load = time.monotonic() - started
    seconds = []
    for round_ in rounds[1:]:
        started = time.monotonic()
        for table, changes in zip(tables, round_):
            delta_merge(work / "delta" / table.name, table, changes)
        seconds.append(time.monotonic() - started)
    from deltalake import DeltaTable

    ok = verified(
        tables,
        lambda t: (
            DeltaTable(str(work / "delta" / t.name))
            .to_pyarrow_table()
            .select(t.arrow.names)
            .cast(t.arrow)
            .sort_by("id")
        ),
    )
    return {
        "engine": "delta-rs (20 tables, one after another)",
        "load_seconds": round(load, 1),
        "round_seconds": round(statistics.median(seconds), 2),
        "verified": all(ok.values()),
    }


def run_singles(work: Path, bootstrap: str, tables: list[BenchTable], rounds: int) -> dict:
    peaks, medians, walls = [], [], []
    for table in tables:
        args = settings(
            work,
            bootstrap,
            [table],
            str(work / "single" / table.name),
            {"source.kafka.topics": json.dumps([table.topic])},
            {
                "table.record_key": '["id"]',
                "table.partition_by": '["region"]' if table.partitioned else "[]",
                "stream.checkpoint": str(work / "single-cp" / table.name),
                "stream.trigger": "available-now",
                "source.kafka.max_offsets_per_trigger": "1000",
            },
        )
        started = time.monotonic()
        code, log, peak = run_job(args, work / f"single-{table.name}.log")
        walls.append(time.monotonic() - started)
        if code != 0:
            raise SystemExit(f"the single-table job of {table.name} failed:\n{log[-3000:]}")
        ends = [_at(m.group(1)) for m in SINGLE_LINE.finditer(log) if int(m.group(3))]
        peaks.append(peak)
        medians.append(
            statistics.median([b - a for a, b in zip(ends[-rounds - 1 :], ends[-rounds:])])
        )  # end to end, as the database job's
        print(
            f"  single {table.name}: peak {peak / 2**30:.2f} GB, rounds' median {medians[-1]:.2f} s, {walls[-1]:.0f} s",
            flush=True,
        )
    ok = verified(tables, lambda t: read_hudi(work / "single" / t.name, t.arrow))
    return {
        "engine": "laketide, 20 single-table jobs",
        "peak_rss_gb": round(max(peaks) / 2**30, 2),
        "peak_rss_gb_20_at_once": round(sum(peaks) / 2**30, 2),
        "round_seconds": round(sum(medians), 2),
        "round_seconds_per_table": round(statistics.median(medians), 2),
        "wall_seconds": round(sum(walls)),
        "verified": all(ok.values()),
    }


def run_database(
    work: Path, bootstrap: str, tables: list[BenchTable], rounds: int, minutes: float, rate: int, seed: int
) -> dict:
    path = str(work / "db" / "{table}")
    common = {
        "source.kafka.topic_pattern": r"pg\.public\.t\d+",
        "stream.checkpoint": str(work / "db-cp"),
        "source.kafka.max_offsets_per_trigger": str(1000 * len(tables)),
    }
    code, log, peak = run_job(
        settings(work, bootstrap, tables, path, common, {"stream.trigger": "available-now"}), work / "db-backlog.log"
    )
    if code != 0:
        raise SystemExit(f"the database job failed:\n{log[-3000:]}")
    lines = [m for m in BATCH_LINE.finditer(log) if int(m.group(4))]
    batches = [(_at(m.group(1)), float(m.group(5))) for m in lines]
    round_seconds = statistics.median([s for _, s in batches[-rounds:]])
    # from one micro-batch's end to the next's, back to back: reading the records from Kafka included
    cycle_seconds = statistics.median([b - a for (a, _), (b, _) in zip(batches[-rounds - 1 :], batches[-rounds:])])
    stages = {
        stage: round(statistics.median(float(m.group(at)) for m in lines[-rounds:]), 2)
        for stage, at in (("read", 6), ("route", 7))
    }
    ok_backlog = verified(tables, lambda t: read_hudi(work / "db" / t.name, t.arrow))
    backlog = (
        f"{len(batches)} micro-batches, rounds' median {cycle_seconds:.2f} s end to end: read {stages['read']:.2f} s, "
        f"route {stages['route']:.2f} s, written {round_seconds:.2f} s, the rest (Spark between micro-batches) "
        f"{cycle_seconds - stages['read'] - stages['route'] - round_seconds:.2f} s"
    )
    print(f"  database job, backlog: {backlog}; peak {peak / 2**30:.2f} GB", flush=True)
    stream = {}

    def streaming(job: subprocess.Popen) -> None:
        stream.update(_stream(bootstrap, tables, minutes, rate, seed, work / "db-stream.log", job))

    # still 1,000 offsets a table at most a micro-batch: the cap is what bounds the job's memory when it falls behind
    code, log, stream_peak = run_job(
        settings(work, bootstrap, tables, path, common, {"stream.trigger": "1 second"}),
        work / "db-stream.log",
        streaming,
    )
    ok = verified(tables, lambda t: read_hudi(work / "db" / t.name, t.arrow))
    return {
        "engine": "laketide, one database job",
        "peak_rss_gb": round(max(peak, stream_peak) / 2**30, 2),
        "round_seconds": round(round_seconds, 2),
        "round_cycle_seconds": round(cycle_seconds, 2),
        "round_stage_seconds": stages,
        "backlog_micro_batches": len(batches),
        **stream,
        "verified": all(ok_backlog.values()) and all(ok.values()),
    }


def _stream(
    bootstrap: str, tables: list[BenchTable], minutes: float, rate: int, seed: int, log: Path, job: subprocess.Popen
) -> dict:
    """Changes across every table at ``rate`` events a second for ``minutes``, then until the job caught up."""
    _wait_for(lambda: "reading Kafka with" in log.read_text() or job.poll() is not None, 300)  # the query started
    producer, rng = Producer(bootstrap), random.Random(seed + 1)
    started, version, sent = time.monotonic(), 1000, 0
    while time.monotonic() - started < minutes * 60:
        version += 1
        for table in tables:
            mixed(producer, table, max(1, rate // len(tables) // 10), version, rng)
        sent = producer.sent
        time.sleep(max(0.0, sent / rate - (time.monotonic() - started)))
    producer.flush()
    streamed = time.monotonic() - started
    committed_during = _records(log.read_text())
    caught_up = _caught_up(log, tables, producer.sent, job)
    return {
        "stream_events": producer.sent,
        "stream_seconds": round(streamed),
        "records_per_second": round(committed_during / streamed),
        "lag_after_stream_seconds": caught_up,
        "caught_up": caught_up is not None,
    }


def idle_cost(work: Path, tables: list[BenchTable]) -> dict:
    """What a table costs the driver's Python while idle: the job's tables opened here as the database job opens them
    (lease, recovery, index, synced view, services run once, status drawn), the growth of this process' memory."""
    import gc

    import psutil

    from laketide.config import load_config
    from laketide.config.routes import SourceTable, TableRoutes
    from laketide.writer.job.session import JobParts, WriterSession

    routes = TableRoutes(
        load_config(
            overrides=[
                f"table.path={work / 'db'}/{{table}}",
                "source.format=kafka",
                "source.envelope=debezium",
                "source.kafka.topic_pattern=x",
                "source.kafka.bootstrap_servers=127.0.0.1:9",
                "write.index_shards=2",
            ]
        )
    )
    sessions = []
    gc.collect()
    before = psutil.Process().memory_info().rss
    for table in tables:
        config = routes.config_for(SourceTable(table.name, "public", "shop"))
        session = WriterSession(
            config, "idle", job_id=f"idle-{table.name}", parts=JobParts(lease_wait=10, streaming=False)
        )
        job = session.open()
        job.services.wait()
        job.status()
        sessions.append(session)
    gc.collect()
    grown = psutil.Process().memory_info().rss - before
    for session in sessions:
        session.close()
    return {"idle_mb_a_table": round(grown / len(tables) / 2**20, 1)}


def _records(text: str) -> int:
    return sum(int(m.group(4)) for m in BATCH_LINE.finditer(text))


def _at(stamp: str) -> float:
    """A log line's time (``2026-11-29 05:09:03,219``) in seconds."""
    return time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:]) / 1000


def _caught_up(
    log: Path, tables: list[BenchTable], sent: int, job: subprocess.Popen, timeout: float = 600
) -> float | None:
    """Seconds from the stream's end until the job committed every streamed record; ``None`` when it did not in
    ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout and job.poll() is None:
        if _records(log.read_text()) >= sent:
            return round(time.monotonic() - started, 1)
        time.sleep(1)
    return None


def _wait_for(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for the job's query to start")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--rows", type=int, default=50_000, help="the snapshot's rows a table")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of --events changes a table after the snapshot")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=5.0, help="the steady stream's length")
    parser.add_argument(
        "--rate", type=int, default=2000, help="the steady stream's events a second, all tables together"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (tables, logs)")
    parser.add_argument(
        "--no-singles", dest="singles", action="store_false", help="leave out the 20 single-table jobs (a quick run)"
    )
    parser.add_argument("--snapshot-rows", type=int, default=0, help="instead: a snapshot, driver and tasks")
    parser.add_argument("--out", default=f"bench/results/database-{date.today().isoformat()}.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="laketide-database-"))
    broker, bootstrap = start_tansu()
    if args.snapshot_rows:
        snapshot_main(args, work, broker, bootstrap)
        return
    try:
        tables = make_tables(args.tables)
        create_topics(bootstrap, tables)
        rounds, produced = produce_backlog(bootstrap, tables, args.rows, args.rounds, args.events, args.seed)
        print(
            f"workload: {args.tables} tables x {args.rows:,} rows, then {args.rounds} rounds of {args.events:,} "
            "changes a table; "
            f"produced {sum(len(r.upserts) + len(r.deletes) for rs in rounds for r in rs):,} events "
            f"in {produced:.0f} s",
            flush=True,
        )
        results = [run_delta(work, tables, rounds)]
        print(f"  delta-rs: round {results[0]['round_seconds']} s", flush=True)
        if args.singles:
            results.append(run_singles(work, bootstrap, tables, args.rounds))
        results.append(run_database(work, bootstrap, tables, args.rounds, args.minutes, args.rate, args.seed))
        results[-1].update(idle_cost(work, tables))
    finally:
        broker.kill()
        broker.wait()
    delta, database = results[0], results[-1]
    ratios = {
        "round end to end: database job / delta-rs": round(database["round_cycle_seconds"] / delta["round_seconds"], 2),
        "round written: database job / delta-rs": round(database["round_seconds"] / delta["round_seconds"], 2),
    }
    if args.singles:
        singles = results[1]
        ratios["round: database job / 20 single-table jobs"] = round(
            database["round_cycle_seconds"] / singles["round_seconds"], 2
        )
        ratios["peak RSS: database job / 20 single-table jobs at once"] = round(
            database["peak_rss_gb"] / singles["peak_rss_gb_20_at_once"], 2
        )
    for result in results:
        print(f"{result['engine']}: " + ", ".join(f"{k}={v}" for k, v in result.items() if k != "engine"))
    print("ratios: " + ", ".join(f"{k} {v}" for k, v in ratios.items()))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work folder kept: {work}")
    write_results(
        args.out, {"workload": vars(args), "results": results, "ratios": ratios}, all(r["verified"] for r in results)
    )


if __name__ == "__main__":
    main()
