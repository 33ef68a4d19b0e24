"""Initial-load benchmark: bulk_insert against an upsert load, and delta-rs writing the same rows.

One generated load of N rows (the first batch of ``upsert_bench``'s workload,
1% repeated keys) goes into an empty table three ways: laketide with
``write.operation = upsert`` (what a first micro-batch does by default),
laketide with ``bulk_insert``, and delta-rs ``write_deltalake``. Then one
upsert batch of B rows goes into the bulk-loaded table, to show that it
finds its keys through the index the bulk insert wrote. Every table is read
back (hudi-rs for laketide) and compared with the expected rows; ratios are
reported because this machine is shared and absolute times drift.

    python bench/load_bench.py                      # N=1,000,000, B=100,000
    python bench/load_bench.py --rows 100000 --batch-rows 10000
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from measure import PeakRss
from upsert_bench import _matches, dedupe, expected_state, laketide_config, make_workload, report


def _land(landing: Path, batches: list[pa.Table]) -> None:
    landing.mkdir(parents=True)
    for n, batch in enumerate(batches):
        path = landing / f"batch-{n:04d}.parquet"
        pq.write_table(batch, path)
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))


def _config(workdir: Path, name: str, landing: Path, operation: str, parallelism: int):
    return laketide_config(
        workdir / name, workdir / f"{name}-checkpoint", landing, parallelism, (f"write.operation={operation}",)
    )


def laketide_load(workdir: Path, name: str, landing: Path, operation: str, parallelism: int) -> dict:
    """Load the landing folder's first file with ``operation``; returns the micro-batch's figures."""
    from laketide.spark.job import run
    from laketide.table import Table

    with PeakRss() as rss:
        writer = run(_config(workdir, name, landing, operation, parallelism))
    report = next(r for r in writer.status.recent if not r.skipped)
    slices = Table.open(str(workdir / name)).file_system_view().latest_slices()
    return {
        "engine": f"laketide {operation}",
        "load_seconds": round(report.seconds, 2),
        "files": len(slices),
        "mb": round(sum(s.size for s in slices) / 2**20, 1),
        "peak_rss_mb": round(rss.peak / 2**20),
    }


def hudi_rows(path: Path) -> pa.Table:
    from hudi import HudiTableBuilder

    return pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())


def delta_load(workdir: Path, batch: pa.Table) -> tuple[dict, pa.Table]:
    from deltalake import DeltaTable, write_deltalake

    path = str(workdir / "delta")
    with PeakRss() as rss:
        started = time.perf_counter()
        write_deltalake(path, dedupe(batch), partition_by=["region"])
        seconds = time.perf_counter() - started
    table = DeltaTable(path)
    uris = table.file_uris()
    figures = {
        "engine": "delta-rs write",
        "load_seconds": round(seconds, 2),
        "files": len(uris),
        "mb": round(sum(os.path.getsize(u.removeprefix("file://")) for u in uris) / 2**20, 1),
        "peak_rss_mb": round(rss.peak / 2**20),
    }
    return figures, table.to_pyarrow_table()


def main() -> None:
    parser = argparse.ArgumentParser(description="laketide bulk_insert vs upsert initial load, and delta-rs")
    parser.add_argument("--rows", type=int, default=1_000_000, help="initial load N")
    parser.add_argument("--batch-rows", type=int, default=100_000, help="the upsert batch B after the bulk load")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--out", default="bench/results/load_bench.json")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    batches = make_workload(args.rows, 1, args.batch_rows, 0.5, "uniform", args.seed)
    load_expected, final_expected = expected_state(batches[:1]), expected_state(batches)
    workdir = Path(tempfile.mkdtemp(prefix="laketide-load-bench-"))
    try:
        _land(workdir / "landing-load", batches[:1])
        _land(workdir / "landing-warmup", [batches[0].slice(0, 10_000)])
        print(f"load: N={args.rows:,}; then one upsert batch of B={args.batch_rows:,}", flush=True)
        laketide_load(
            workdir, "warmup", workdir / "landing-warmup", "upsert", args.parallelism
        )  # JVM and workers warm for both
        upsert = laketide_load(workdir, "upsert", workdir / "landing-load", "upsert", args.parallelism)
        upsert["verified"] = _matches(hudi_rows(workdir / "upsert"), load_expected)
        print(f"upsert load: {upsert['load_seconds']}s", flush=True)
        bulk = laketide_load(workdir, "bulk", workdir / "landing-load", "bulk_insert", args.parallelism)
        bulk["verified"] = _matches(hudi_rows(workdir / "bulk"), load_expected)
        print(f"bulk_insert load: {bulk['load_seconds']}s", flush=True)
        delta, delta_rows = delta_load(workdir, batches[0])
        delta["verified"] = _matches(delta_rows, load_expected)

        # the next micro-batch on the bulk-loaded table: an upsert that must find the loaded keys
        next_file = workdir / "landing-load" / "batch-0001.parquet"
        pq.write_table(batches[1], next_file)
        os.utime(next_file, (1_700_000_001, 1_700_000_001))
        after = laketide_load(workdir, "bulk", workdir / "landing-load", "upsert", args.parallelism)
        after["engine"] = "laketide upsert after bulk"
        after["verified"] = _matches(hudi_rows(workdir / "bulk"), final_expected)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    rows = [upsert, bulk, delta, after]
    ratios = {
        "upsert_load_to_bulk_insert": round(upsert["load_seconds"] / bulk["load_seconds"], 2),
        "bulk_insert_to_delta_rs": round(bulk["load_seconds"] / delta["load_seconds"], 2),
    }
    report(rows, "ratios", ratios, args.out, {"workload": vars(args), "results": rows, "ratios": ratios}, width=14)


if __name__ == "__main__":
    main()
