"""Scale benchmark: merge-on-read upsert batches against a table of 1M keys and of 100M keys.

Each size runs in its own process. The table is bulk-inserted from landing files of ``--load-file-rows``,
``--load-files-per-batch`` a micro-batch (a job with ``write.operation=bulk_insert``), then a second job, the upsert job
users run, takes ``--batches`` batches of ``--batch-rows`` (half updates of any key so far, 1% keys repeated within a
batch), with compaction left to ``laketide compact`` (a compaction rewrites the slices it compacts, whatever the index).
The batch medians are compared across sizes; the job's peak RSS (Spark's JVM and Python workers included), the state
index's bytes per key in memory and on disk, and the final table read back by hudi-rs and compared with the expected
(key, ts) of every row are reported.

    python bench/scale.py                                  # 1M and 100M keys, 40 batches of 100,000
    python bench/scale.py --sizes 1000000,10000000 --batches 5
    # the 1M-key table cut into about as many file groups as a 100M one loaded 5 files a micro-batch holds (103, 80)
    python bench/scale.py --sizes 1000000 --conf write.target_file_size=400KB --conf write.small_file_limit=300KB
    python bench/scale.py --load-files-per-batch 5     # that 100M-key table
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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from measure import PeakRss, settle_disk  # noqa: E402
from upsert_bench import NARROW, laketide_config, print_table, write_results  # noqa: E402


def land_load(landing: Path, keys: int, file_rows: int) -> int:
    """The initial load as files of ``file_rows``: key ``i`` with ``ts = i``. Returns the files written."""
    files = 0
    for start in range(0, keys, file_rows):
        ids = np.arange(start, min(keys, start + file_rows), dtype=np.int64)
        _write(landing, files, NARROW.rows(ids, ids.copy()))
        files += 1
    return files


def land_upserts(landing: Path, first_file: int, keys: int, batches: int, batch_rows: int, seed: int) -> np.ndarray:
    """Upsert batches after the load; returns the expected ``ts`` of every key at the end (index = key)."""
    rng = np.random.default_rng(seed)
    expected = np.full(keys + batches * batch_rows, -1, dtype=np.int64)
    expected[:keys] = np.arange(keys)
    next_id, next_ts = keys, keys
    for n in range(batches):
        updates = batch_rows // 2
        inserts = np.arange(next_id, next_id + batch_rows - updates, dtype=np.int64)
        ids = np.concatenate([rng.integers(0, next_id, size=updates), inserts])
        next_id += len(inserts)
        rng.shuffle(ids)
        dups = rng.random(batch_rows) < 0.01
        ids[dups] = ids[rng.integers(0, batch_rows, size=int(dups.sum()))]
        ts = np.arange(next_ts, next_ts + batch_rows, dtype=np.int64)
        next_ts += batch_rows
        np.maximum.at(expected, ids, ts)
        _write(landing, first_file + n, NARROW.rows(ids, ts))
    return expected[:next_id]  # -1 for an insert a repeated key took the place of


def _write(landing: Path, n: int, rows: pa.Table) -> None:
    path = landing / f"batch-{n:06d}.parquet"
    pq.write_table(rows, path)
    os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))


def _job(workdir: Path, extra: tuple[str, ...], conf: list[str]) -> list:
    from laketide.spark.job import run

    config = laketide_config(
        workdir / "table", workdir / "checkpoint", workdir / "landing", 4, ("table.type=MERGE_ON_READ", *conf, *extra)
    )
    reports = []
    run(config, on_ready=lambda job: job.writer.observers.append(reports.append))
    return [r for r in reports if not r.skipped]


def index_bytes_in_memory(table_path: Path, shards: int = 4) -> int:
    """The bytes of the state index's arrays (hashes, codes and lookup directories) the job left in this process's
    shard cache."""
    from laketide.index.shard_cache import SHARDS
    from laketide.table import Table

    base = Table.open(str(table_path)).io.base_path
    runs = [SHARDS.get((base, shard)) for shard in range(shards)]
    return sum(found[1].nbytes for found in runs if found is not None)


def verify(table_path: Path, expected: np.ndarray) -> bool:
    """hudi-rs reads the table, one file slice at a time (100M rows with Hudi's meta columns would not fit
    in memory at once); every key is there once, with its expected ``ts`` (-1: a key never written)."""
    from hudi import HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(str(table_path)).build()
    reader = table.create_file_group_reader_with_options()
    ids, ts = [], []
    for file_slice in table.get_file_slices():
        batch = reader.read_file_slice(file_slice)
        # copies: a view would keep the whole slice as hudi-rs read it (3 GB for an 8M-row slice) alive
        ids.append(batch.column("id").to_numpy().copy())
        ts.append(batch.column("ts").to_numpy().copy())
        del batch
    ids, ts = np.concatenate(ids), np.concatenate(ts)
    order = np.argsort(ids)
    keys = np.nonzero(expected >= 0)[0]
    if len(ids) != len(keys) or not np.array_equal(ids[order], keys):
        print(
            f"verification: {len(ids):,} rows read, {len(np.unique(ids)):,} keys, {len(keys):,} expected",
            file=sys.stderr,
        )
        return False
    wrong = np.nonzero(ts[order] != expected[keys])[0]
    if len(wrong):
        print(
            f"verification: {len(wrong):,} keys with another ts, first {keys[wrong[:5]]}: "
            f"{ts[order][wrong[:5]]} not {expected[keys[wrong[:5]]]}",
            file=sys.stderr,
        )
    return not len(wrong)


def run_size(workdir: Path, keys: int, args: argparse.Namespace) -> dict:
    """In the size's own process: land, load, upsert, measure, verify."""
    from laketide.table import Table

    landing = workdir / "landing"
    landing.mkdir(parents=True)
    started = time.perf_counter()
    files = land_load(landing, keys, args.load_file_rows)
    settle_disk()
    # the load: bulk insert, several files a micro-batch, on the driver
    load = _job(
        workdir,
        (
            "write.operation=bulk_insert",
            "write.driver_batch_bytes=4GB",
            f"source.max_files_per_trigger={args.load_files_per_batch}",
        ),
        args.conf,
    )
    load_seconds = time.perf_counter() - started
    # the expected state waits on disk while the job runs, so the peak RSS is the job's
    np.save(workdir / "expected.npy", land_upserts(landing, files, keys, args.batches, args.batch_rows, args.seed))
    settle_disk()  # the load's files written back, as a job that has run a while finds its disk
    with PeakRss() as rss:
        # compaction left to `laketide compact`: the batches measure ingestion, whose index work is the point
        reports = _job(workdir, ("compaction.mode=off",), args.conf)
    index_memory = index_bytes_in_memory(workdir / "table")
    index_disk = sum(f.stat().st_size for f in (workdir / "table" / ".hoodie" / ".laketide" / "index").rglob("*.arrow"))
    expected = np.load(workdir / "expected.npy")
    seconds = [r.seconds for r in reports]
    steps = {
        name: round(statistics.median(r.stage_seconds.get(name, 0.0) for r in reports), 3)
        for name in reports[0].stage_seconds
    }
    return {
        "keys": keys,
        "load_seconds": round(load_seconds, 1),
        "load_batches": len(load),
        "median_batch_seconds": round(statistics.median(seconds), 3),
        # index folds run beside the batches (every ``write.index_compaction_deltas``): the mean carries them
        "mean_batch_seconds": round(statistics.fmean(seconds), 3),
        "p95_batch_seconds": round(sorted(seconds)[round(0.95 * (len(seconds) - 1))], 3),
        "first_batch_seconds": round(seconds[0], 3),
        "peak_rss_mb": round(rss.peak / 2**20),
        "index_memory_bytes_per_key": round(index_memory / int((expected >= 0).sum()), 1),
        "index_disk_bytes_per_key": round(index_disk / int((expected >= 0).sum()), 1),
        "verified": verify(workdir / "table", expected),
        "file_groups": len(Table.open(str(workdir / "table")).file_system_view().latest_slices()),
        "median_steps": steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="merge-on-read upserts against 1M and 100M keys")
    parser.add_argument("--sizes", default="1000000,100000000", help="table sizes in keys, comma-separated")
    # enough batches for the index folds (every 16 deltas by default) to weigh in the mean
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-rows", type=int, default=100_000)
    parser.add_argument("--load-file-rows", type=int, default=1_000_000)
    # a bulk insert writes new file groups for each micro-batch: 100M keys in micro-batches of 34 files make 12
    # groups of 40 to 80 MB, in micro-batches of 5 files 80 groups of about 9 MB (a merge-on-read batch of
    # uniform updates writes a log file in every group it touches, so its cost follows the groups)
    parser.add_argument("--load-files-per-batch", type=int, default=34)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default="bench/results/scale.json")
    parser.add_argument(
        "--conf", action="append", default=[], help="a job setting for both jobs (key=value), repeatable"
    )
    parser.add_argument("--keep", action="store_true", help="keep each size's landing files and table, and print where")
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)  # one size, in its own process
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if args.size:
        (args.workdir / "result.json").write_text(json.dumps(run_size(args.workdir, args.size, args)))
        return
    results = []
    for keys in (int(k) for k in args.sizes.split(",")):
        workdir = Path(tempfile.mkdtemp(prefix=f"laketide-scale-{keys}-"))
        try:
            command = [sys.executable, __file__, "--size", str(keys), "--workdir", str(workdir / "run"), *sys.argv[1:]]
            subprocess.run(command, check=True)
            results.append(json.loads((workdir / "run" / "result.json").read_text()))
        finally:
            if args.keep:
                print(f"kept {workdir / 'run'}", flush=True)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
        print(f"{keys:,} keys: {results[-1]}", flush=True)
    ratios = {
        f"{r['keys']:,} keys / {results[0]['keys']:,} {kind} batch": round(
            r[f"{kind}_batch_seconds"] / results[0][f"{kind}_batch_seconds"], 2
        )
        for r in results[1:]
        for kind in ("median", "mean")
    }
    print_table(
        [{k: v for k, v in r.items() if k != "median_steps"} for r in results],
        "merge-on-read batches against the smallest table",
        ratios,
        width=14,
    )
    for r in results:
        print(f"  {r['keys']:,} keys, median seconds per step: {r['median_steps']}")
    write_results(
        args.out,
        {
            "workload": {k: v for k, v in vars(args).items() if k not in ("size", "workdir")},
            "results": results,
            "ratios": ratios,
        },
        all(r["verified"] for r in results),
    )


if __name__ == "__main__":
    main()
