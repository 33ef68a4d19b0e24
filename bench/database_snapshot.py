"""A whole database's snapshot (``op = r`` events, ``--snapshot-rows`` across the tables) written by one database
job two ways: on the driver, a micro-batch at a time as the job's cap allows, and by Spark's tasks
(``write.driver_batch_bytes = 0``, the whole snapshot one micro-batch), as a snapshot too big for the driver is.
Each way's rows a second (the snapshot's rows over the job's time from its first log line to its last micro-batch),
peak RSS, and every table compared with its model. Run by ``database_bench.py --snapshot-rows N``."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from database_feed import BenchTable, Producer, create_topics, make_tables, snapshot

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", re.M)
ERROR_LINE = re.compile(r"Error|Exception|Killed|killed")
BATCH = re.compile(r"^(\S+ \S+) INFO laketide.job micro-batch \d+: tables=\d+ written=\d+ records=(\d+)", re.M)


def snapshot_main(args, work: Path, broker, bootstrap: str) -> None:
    """``database_bench.py --snapshot-rows N``: both ways, their ratio, and the JSON."""
    from upsert_bench import write_results

    try:
        results = run_snapshot(work, bootstrap, args.tables, args.snapshot_rows)
    finally:
        broker.kill()
        broker.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    driver, tasks = results
    ratios = (
        {"snapshot rows/s: tasks / driver": round(tasks["rows_per_second"] / driver["rows_per_second"], 2)}
        if "rows_per_second" in tasks and "rows_per_second" in driver
        else {}
    )
    print("ratios: " + ", ".join(f"{k} {v}" for k, v in ratios.items()))
    out = args.out.replace("database-", "database-snapshot-")
    write_results(
        out, {"workload": vars(args), "results": results, "ratios": ratios}, all(r["verified"] for r in results)
    )


def run_snapshot(work: Path, bootstrap: str, n_tables: int, rows: int) -> list[dict]:
    """The two ways' results."""
    tables = make_tables(n_tables)
    create_topics(bootstrap, tables)
    producer, started = Producer(bootstrap), time.monotonic()
    per_table = rows // n_tables
    for table in tables:
        snapshot(producer, table, per_table)
    producer.flush()
    print(
        f"snapshot: {n_tables} tables x {per_table:,} rows produced in {time.monotonic() - started:.0f} s", flush=True
    )
    total = per_table * n_tables
    ways = {
        "driver": {},
        "tasks": {"write.driver_batch_bytes": "0", "source.kafka.max_offsets_per_trigger": str(total + n_tables)},
    }
    return [_one_way(work, bootstrap, tables, way, extra, total) for way, extra in ways.items()]


def _one_way(work: Path, bootstrap: str, tables: list[BenchTable], way: str, extra: dict, total: int) -> dict:
    from database_bench import _at, read_hudi, run_job, settings, verified

    common = {
        "source.kafka.topic_pattern": r"pg\.public\.t\d+",
        "stream.checkpoint": str(work / f"snap-{way}-cp"),
        "stream.trigger": "available-now",
        **extra,
    }
    path = str(work / f"snap-{way}" / "{table}")
    code, log, peak = run_job(settings(work, bootstrap, tables, path, common, {}), work / f"snap-{way}.log")
    if code != 0:  # recorded, and the other way still runs: what failed first is what the log's errors say
        errors = [line for line in log.splitlines() if ERROR_LINE.search(line)][:12]
        print(f"  the database job ({way}) failed (exit {code}):\n    " + "\n    ".join(errors), flush=True)
        return {"engine": f"laketide, database snapshot on the {way}", "failed": errors, "verified": False}
    batches = [(_at(m.group(1)), int(m.group(2))) for m in BATCH.finditer(log) if int(m.group(2))]
    began = LOG_TIME.search(log)
    first = _at(began.group(1)) if began else batches[0][0]
    seconds = batches[-1][0] - first
    ok = verified(tables, lambda t: read_hudi(work / f"snap-{way}" / t.name, t.arrow))
    result = {
        "engine": f"laketide, database snapshot on the {way}",
        "snapshot_rows": total,
        "micro_batches": len(batches),
        "seconds": round(seconds, 1),
        "rows_per_second": round(total / seconds),
        "peak_rss_gb": round(peak / 2**30, 2),
        "on_tasks": "written by Spark's tasks" in log,
        "verified": all(ok.values()),
    }
    print(
        f"  {result['engine']}: {result['rows_per_second']:,} rows/s over {seconds:.0f} s, "
        f"{len(batches)} micro-batches, peak {result['peak_rss_gb']} GB, verified {result['verified']}",
        flush=True,
    )
    return result
