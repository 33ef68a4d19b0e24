"""The tasks path against the driver path: the same 1M-row micro-batches written by Spark's tasks and by
the driver's threads, in one run.

An initial load of N rows, then K micro-batches of N rows each (half updates, 1% keys repeated), on the
wide shape, as parquet landing files. One job writes them through Spark's tasks (``write.driver_batch_bytes=0``),
another, in a process of its own, through the driver (a budget above the batch). Each final table is read
back by hudi-rs and compared with the expected rows. Prints the medians and the tasks-over-driver ratios,
and writes JSON.

It also measures the floor of the tasks path on the same landing file, in a process of its own: Spark's tasks
read the file's pieces into Arrow (``read_piece``), pack them as the job's Arrow parts, shuffle them once or
twice and unpack them, doing nothing else. An upsert shuffles its rows twice (to the index shards, then to
the write tasks) and a load once, so no tasks-path micro-batch of that file can take less.
The same floors are also measured with the parts as (task, bytes) pairs of a Python RDD, which the JVM
shuffles without turning each part into a Spark row and back: what the job would save moving its parts so.

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
    result = run_laketide(run_dir, workdir / "landing", expected_state(workload(args)), 4, args.table_type, 1, SHAPES["wide"], extra=(PATHS[args.path],))
    summary = {"load_seconds": result.load_seconds, "batch_seconds": result.batch_seconds, "peak_rss_mb": result.peak_rss_mb, "verified": result.verified,
               "median_steps": result.median_stages()}
    (workdir / f"result-{args.path}.json").write_text(json.dumps(summary))


def measure_floor(args: argparse.Namespace) -> None:
    """In a process of its own: the seconds to move an upsert micro-batch's landing file through Spark's
    tasks with one and with two shuffles of Arrow parts, and nothing else (``FLOOR_RUNS`` runs each)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession
    from pyspark.sql.pandas.types import from_arrow_schema

    from laketide.spark.arrow_parts import PART_SCHEMA, pack, unpack
    from laketide.spark.routing import hash_routes
    from laketide.spark.spark_batch import Shuffles
    from laketide.writer.landing import parquet_pieces, read_piece
    from laketide.table.io import FileIO

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers run this interpreter, as the job's do
    workdir = Path(args.workdir)
    path = str(sorted((workdir / "landing").glob("batch-*.parquet"))[1])
    spark = (SparkSession.builder.master("local[2]").config("spark.driver.memory", "4g").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    declared = pq.read_schema(path)
    pieces = parquet_pieces({path: FileIO.for_uri(path).entry("")}, declared, spark.sparkContext.defaultParallelism)
    listed = spark.createDataFrame(pa.table({"piece": list(range(len(pieces)))}))
    parts, routes = from_arrow_schema(PART_SCHEMA), hash_routes(4)

    def quarters(piece):
        """A piece's rows read into Arrow, cut into one quarter for each of the 4 tasks."""
        rows, _ = read_piece(pieces[piece], declared)
        quarter = -(-rows.num_rows // 4)
        return ((task, rows.slice(task * quarter, quarter)) for task in range(4))

    def read_and_pack(batches):
        for b in batches:
            for piece in b.column(0).to_pylist():
                for task, rows in quarters(piece):
                    yield from pack(task, rows)

    def repack(batches):
        for rows in unpack(batches):
            yield from pack(rows.num_rows % 4, rows)

    def count(batches):
        yield pa.RecordBatch.from_pydict({"rows": [sum(t.num_rows for t in unpack(batches))]})

    def once():
        return Shuffles.to_tasks(listed.mapInArrow(read_and_pack, parts), routes)

    def twice():
        return Shuffles.to_tasks(once().mapInArrow(repack, parts), routes)

    # the same parts as pairs of (task, IPC stream) in an RDD: Python's pickles of bytes the JVM shuffles as
    # they are, without the DataFrame's conversion of each part to a Spark row and back
    def encoded(task, rows):
        return ((task, bytes(part.column("arrow")[0].as_buffer())) for part in pack(task, rows))

    def rdd_read_and_pack(pieces_of_task):
        for piece in pieces_of_task:
            for task, rows in quarters(piece):
                yield from encoded(task, rows)

    def rdd_rows(pairs):
        return (t for _, part in pairs for t in unpack([pa.RecordBatch.from_pydict({"arrow": [part]})]))

    def rdd_repack(pairs):
        return (pair for rows in rdd_rows(pairs) for pair in encoded(rows.num_rows % 4, rows))

    def rdd_once():
        return spark.sparkContext.parallelize(range(len(pieces)), len(pieces)).mapPartitions(rdd_read_and_pack).partitionBy(4, lambda task: task)

    def rdd_twice():
        return rdd_once().mapPartitions(rdd_repack).partitionBy(4, lambda task: task)

    def counted(shuffled):
        return lambda: sum(r["rows"] for r in shuffled().mapInArrow(count, "rows LONG").collect())

    def rdd_counted(shuffled):
        return lambda: sum(shuffled().mapPartitions(lambda pairs: [sum(t.num_rows for t in rdd_rows(pairs))]).collect())

    floors = {}
    cases = (("one shuffle", counted(once)), ("two shuffles", counted(twice)), ("one shuffle, RDD", rdd_counted(rdd_once)), ("two shuffles, RDD", rdd_counted(rdd_twice)))
    for name, moved_rows in cases:
        seconds = []
        for _ in range(FLOOR_RUNS + 1):
            started = time.perf_counter()
            total = moved_rows()
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
            command = [sys.executable, __file__, "--path", path, "--workdir", str(workdir), "--rows", str(args.rows), "--batches", str(args.batches),
                       "--table-type", args.table_type, "--seed", str(args.seed)]
            settle_disk()
            subprocess.run(command, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}, check=True, capture_output=True)
            results[path] = result = json.loads((workdir / f"result-{path}.json").read_text())
            rows.append({"path": path, "load s": round(result["load_seconds"], 2), "median batch s": round(statistics.median(result["batch_seconds"]), 2),
                         "batches s": " ".join(f"{s:.2f}" for s in result["batch_seconds"]), "peak RSS MB": round(result["peak_rss_mb"]), "verified": result["verified"],
                         "median steps s": result["median_steps"]})
        settle_disk()
        subprocess.run([sys.executable, __file__, "--path", "floor", "--workdir", str(workdir)], env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
                       check=True, capture_output=True)
        floor = json.loads((workdir / "result-floor.json").read_text())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratios = {
        "load tasks/driver": round(results["tasks"]["load_seconds"] / results["driver"]["load_seconds"], 2),
        "median batch tasks/driver": round(statistics.median(results["tasks"]["batch_seconds"]) / statistics.median(results["driver"]["batch_seconds"]), 2),
    }
    driver = statistics.median(results["driver"]["batch_seconds"])
    ratios.update({f"floor, {name} / driver median batch": round(seconds / driver, 2) for name, seconds in floor.items()})
    print_table([{k: v for k, v in r.items() if k != "median steps s"} for r in rows], "ratios", ratios, width=16)
    for r in rows:
        print(f"  {r['path']}: median seconds per step of an upsert: {r['median steps s']}")
    print(f"  the floor of the tasks path, one upsert file moved through the tasks and nothing done: {floor} s")
    write_results(args.out, {"workload": {k: v for k, v in vars(args).items() if k not in ("path", "workdir")}, "results": rows, "floor_seconds": floor,
                             "ratios": ratios}, all(r["verified"] for r in rows))


if __name__ == "__main__":
    main()
