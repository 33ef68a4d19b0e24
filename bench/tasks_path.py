"""The tasks path against the driver path: the same 1M-row micro-batches written by Spark's tasks and by
the driver's threads, in one run.

An initial load of N rows, then K micro-batches of N rows each (half updates, 1% keys repeated), on the
wide shape, as parquet landing files. One job writes them through Spark's tasks (``write.driver_batch_bytes=0``),
another, in a process of its own, through the driver (a budget above the batch). Each final table is read
back by hudi-rs and compared with the expected rows. Prints the medians and the tasks-over-driver ratios,
and writes JSON.

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
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from measure import settle_disk  # noqa: E402
from upsert_bench import SHAPES, expected_state, land, make_workload, print_table, run_laketide, write_results  # noqa: E402

PATHS = {"tasks": "write.driver_batch_bytes=0", "driver": "write.driver_batch_bytes=16GiB"}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--table-type", default="MERGE_ON_READ", choices=["MERGE_ON_READ", "COPY_ON_WRITE"])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(BENCH / "results" / "tasks_path.json"))
    parser.add_argument("--path", choices=list(PATHS), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
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
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratios = {
        "load tasks/driver": round(results["tasks"]["load_seconds"] / results["driver"]["load_seconds"], 2),
        "median batch tasks/driver": round(statistics.median(results["tasks"]["batch_seconds"]) / statistics.median(results["driver"]["batch_seconds"]), 2),
    }
    print_table([{k: v for k, v in r.items() if k != "median steps s"} for r in rows], "ratios", ratios, width=16)
    for r in rows:
        print(f"  {r['path']}: median seconds per step of an upsert: {r['median steps s']}")
    write_results(args.out, {"workload": {k: v for k, v in vars(args).items() if k not in ("path", "workdir")}, "results": rows, "ratios": ratios},
                  all(r["verified"] for r in rows))


if __name__ == "__main__":
    main()
