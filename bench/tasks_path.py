"""The tasks path against the driver path: the same 1M-row micro-batches written by Spark's tasks and by
the driver's threads, in one run.

An initial load of N rows, then K micro-batches of N rows each (half updates, 1% keys repeated), on the
wide shape, as parquet landing files. One job writes them through Spark's tasks (``write.driver_batch_bytes=0``),
another, in a process of its own, through the driver (a budget above the batch). Each final table is read
back by hudi-rs and compared with the expected rows. Prints the medians and the tasks-over-driver ratios,
and writes JSON.

It also measures the floor of the tasks path on the same landing file, in a process of its own: Spark's tasks
read the file's pieces into Arrow (``read_piece``) and hand them on through the job's exchange
(``writer.exchange``) once or twice, doing nothing else. An upsert's rows make two hops (to the index shards,
then to the write tasks), as does a load's (to the tasks cutting them by key range, then to the write
tasks), so no tasks-path micro-batch of that file can take less.

    python bench/tasks_path.py                      # N=1,000,000, K=3, merge-on-read
    python bench/tasks_path.py --rows 200000 --table-type COPY_ON_WRITE
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from measure import settle_disk  # noqa: E402
from upsert_bench import SHAPES, expected_state, land, make_workload, print_table, run_laketide, write_results  # noqa: E402

PATHS = {"tasks": "write.driver_batch_bytes=0", "driver": "write.driver_batch_bytes=16GiB"}
FLOOR_RUNS = 3  # each floor is the median of this many runs, after one that starts the Python workers


def workload(args: argparse.Namespace):
    return make_workload(args.rows, args.batches, args.rows, 0.5, "uniform", args.seed, SHAPES["wide"])


def run_path(args: argparse.Namespace) -> None:
    """In a process of its own: one path's job over the landing files, its result as JSON."""
    workdir = Path(args.workdir)
    run_dir = workdir / args.path
    run_dir.mkdir()
    result = run_laketide(
        run_dir,
        workdir / "landing",
        expected_state(workload(args)),
        4,
        args.table_type,
        1,
        SHAPES["wide"],
        extra=(PATHS[args.path],),
    )
    summary = {
        "load_seconds": result.load_seconds,
        "batch_seconds": result.batch_seconds,
        "peak_rss_mb": result.peak_rss_mb,
        "verified": result.verified,
        "median_steps": result.median_stages(),
    }
    (workdir / f"result-{args.path}.json").write_text(json.dumps(summary))


def measure_floor(args: argparse.Namespace) -> None:
    """In a process of its own: the seconds to move an upsert micro-batch's landing file through Spark's
    tasks and the job's exchange, with one and with two hops, and nothing else (``FLOOR_RUNS`` runs each)."""
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    from laketide.table.storage.io import FileIO
    from laketide.writer.exchange import Exchange
    from laketide.writer.landing import parquet_pieces, read_piece

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers run this interpreter, as the job's do
    workdir = Path(args.workdir)
    path = str(sorted((workdir / "landing").glob("batch-*.parquet"))[1])
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    declared = pq.read_schema(path)
    pieces = parquet_pieces({path: FileIO.for_uri(path).entry("")}, declared, spark.sparkContext.defaultParallelism)

    def stage(n, fn):
        """``fn(k)`` for each k below ``n``, in at most one task per core, as the job's stages run
        (``SparkBatch._stage``)."""
        context = spark.sparkContext
        tasks = max(1, min(n, context.defaultParallelism))
        return (
            context.parallelize(range(n), tasks)
            .mapPartitions(lambda ks: (h for k in ks for h in [fn(k)] if h is not None))
            .collect()
        )

    def quarters(rows):
        quarter = -(-rows.num_rows // 4)
        return [(task, rows.slice(task * quarter, quarter)) for task in range(4)]

    def moved(hops):
        exchange = Exchange.for_batch(str(workdir / "exchange"), 0, {})
        handoffs = stage(
            len(pieces), lambda n: exchange.put(f"read-{n}.arrow", quarters(read_piece(pieces[n], declared)[0]))
        )
        for hop in range(1, hops):
            handoffs = stage(
                4, lambda n, h=handoffs, hop=hop: exchange.put(f"hop{hop}-{n}.arrow", quarters(exchange.take(h, n)))
            )
        total = sum(stage(4, lambda n, h=handoffs: exchange.take(h, n).num_rows))
        exchange.delete()
        return total

    floors = {}
    for name, hops in (("one hop", 1), ("two hops", 2)):
        seconds = []
        for _ in range(FLOOR_RUNS + 1):
            started = time.perf_counter()
            total = moved(hops)
            seconds.append(time.perf_counter() - started)
        assert total == pq.read_metadata(path).num_rows
        floors[name] = round(statistics.median(seconds[1:]), 2)
    (workdir / "result-floor.json").write_text(json.dumps(floors))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--table-type", default="MERGE_ON_READ", choices=["MERGE_ON_READ", "COPY_ON_WRITE"])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(BENCH / "results" / "tasks_path.json"))
    parser.add_argument("--path", choices=[*PATHS, "floor"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.path == "floor":
        return measure_floor(args)
    if args.path:
        return run_path(args)
    workdir = Path(tempfile.mkdtemp(prefix="laketide-tasks-path-"))
    rows, results = [], {}
    try:
        (workdir / "landing").mkdir()
        land(workdir / "landing", workload(args), args.rows)
        for path in PATHS:
            command = [
                sys.executable,
                __file__,
                "--path",
                path,
                "--workdir",
                str(workdir),
                "--rows",
                str(args.rows),
                "--batches",
                str(args.batches),
                "--table-type",
                args.table_type,
                "--seed",
                str(args.seed),
            ]
            settle_disk()
            subprocess.run(command, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}, check=True, capture_output=True)
            results[path] = result = json.loads((workdir / f"result-{path}.json").read_text())
            rows.append(
                {
                    "path": path,
                    "load s": round(result["load_seconds"], 2),
                    "median batch s": round(statistics.median(result["batch_seconds"]), 2),
                    "batches s": " ".join(f"{s:.2f}" for s in result["batch_seconds"]),
                    "peak RSS MB": round(result["peak_rss_mb"]),
                    "verified": result["verified"],
                    "median steps s": result["median_steps"],
                }
            )
        settle_disk()
        subprocess.run(
            [sys.executable, __file__, "--path", "floor", "--workdir", str(workdir)],
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
            check=True,
            capture_output=True,
        )
        floor = json.loads((workdir / "result-floor.json").read_text())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratios = {
        "load tasks/driver": round(results["tasks"]["load_seconds"] / results["driver"]["load_seconds"], 2),
        "median batch tasks/driver": round(
            statistics.median(results["tasks"]["batch_seconds"])
            / statistics.median(results["driver"]["batch_seconds"]),
            2,
        ),
    }
    driver = statistics.median(results["driver"]["batch_seconds"])
    ratios.update(
        {f"floor, {name} / driver median batch": round(seconds / driver, 2) for name, seconds in floor.items()}
    )
    print_table([{k: v for k, v in r.items() if k != "median steps s"} for r in rows], "ratios", ratios, width=16)
    for r in rows:
        print(f"  {r['path']}: median seconds per step of an upsert: {r['median steps s']}")
    print(f"  the floor of the tasks path, one upsert file moved through the tasks and nothing done: {floor} s")
    write_results(
        args.out,
        {
            "workload": {k: v for k, v in vars(args).items() if k not in ("path", "workdir")},
            "results": rows,
            "floor_seconds": floor,
            "ratios": ratios,
        },
        all(r["verified"] for r in rows),
    )


if __name__ == "__main__":
    main()
