"""Peers benchmark: laketide (copy-on-write and merge-on-read) against delta-rs, DuckLake, pypaimon and
PyIceberg, on the same generated parquet files, in one run.

Two workloads, each an initial load of N rows then K batches of B rows with half updates and 1% keys
repeated within a batch: ``uniform`` updates any key so far, ``newest`` updates only the newest 5% of the
keys (recent orders are the ones that change). Each engine runs in its own process, so its peak RSS is its
own (laketide's includes Spark's JVM and Python workers), and reads its final table back to compare it with
the expected rows. laketide's batch time is its micro-batch's ``seconds=``; a peer's is from reading the
batch file to the end of its commit.

    python bench/peers.py                                   # N=1,000,000, K=10, B=100,000, both workloads
    python bench/peers.py --rows 100000 --batch-rows 10000 --batches 3 --engines laketide-mor,delta-rs,ducklake
    --rounds 1
    python bench/peers.py --engines laketide-mor,laketide-mor-catalog-down,delta-rs

The ``-catalog-down`` engines are laketide's with ``[catalog]`` set to a Hive Metastore that takes connections and
never answers (``make bench-catalog-down``): their ratio to the same table type's plain run is what a catalog
outage costs a micro-batch.

laketide's files are sized to the table (``--laketide-conf``, by default ``write.target_file_size=2MB`` and
``write.small_file_limit=1536KB``): at 1M rows a partition holds about 10 MB, so it gets five files, as a
partition of a production table spans many files of the default 128 MB. A batch rewrites (copy-on-write)
or appends to (merge-on-read) the files its keys fall in; with one file per partition that is every file,
whatever the keys.

laketide (both table types), delta-rs and DuckLake, whose medians the ratios compare, run ``--rounds`` times
(3), interleaved: round after round each runs once, so a stretch of a slower machine falls on all of them. An
engine's row is the round of its median median batch, with every round's median and load beside it: one
run's median moved a ratio by up to a fifth between runs of the same code. Its load is the median of the
rounds' loads, and the load ratios compare those.

PyIceberg's upsert takes about a minute a batch at 1M rows, so it runs ``--iceberg-batches`` batches (3) and
its table is checked against the rows of those batches. pypaimon runs from ``.venv-paimon`` (it needs
pyarrow < 20); without that environment, or with any engine failing, the row says so and the run fails.
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
from upsert_bench import SHAPES, land, make_workload, print_table, write_results  # noqa: E402

ALL_ENGINES = "laketide-cow,laketide-mor,delta-rs,ducklake,pypaimon,pyiceberg"
PAIMON_PYTHON = BENCH.parent / ".venv-paimon" / "bin" / "python"
LAKETIDE_CONF = ["write.target_file_size=2MB", "write.small_file_limit=1536KB"]
# the engines the ratios compare, run every round (``--rounds``); pypaimon and PyIceberg run once
ROUNDED = {
    "laketide-cow",
    "laketide-mor",
    "delta-rs",
    "ducklake",
    "laketide-cow-catalog-down",
    "laketide-mor-catalog-down",
}


def run_engine(engine: str, workdir: Path, shape: str, max_batches: int | None) -> None:
    """In the engine's own process: run it and write its result as JSON beside the landing files."""
    from peer_engines import ENGINES

    result = ENGINES[engine](workdir, SHAPES[shape], max_batches)
    batch_rows = json.loads((workdir / "workload.json").read_text())["batch_rows"]
    summary = {
        **result.summary(batch_rows),
        "engine": engine,
        "median_stages": result.median_stages() if result.stage_seconds else None,
    }
    (workdir / f"result-{engine}.json").write_text(json.dumps(summary))


def spawn(engine: str, workdir: Path, args: argparse.Namespace) -> dict:
    python = str(PAIMON_PYTHON) if engine == "pypaimon" else sys.executable
    if engine == "pypaimon" and not PAIMON_PYTHON.exists():
        return {"engine": engine, "error": f"{PAIMON_PYTHON} is missing: make bench creates it"}
    command = [python, str(BENCH / "peers.py"), "--engine", engine, "--workdir", str(workdir), "--shape", args.shape]
    if engine == "pyiceberg":
        command += ["--max-batches", str(args.iceberg_batches)]
    settle_disk()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    if engine.startswith("laketide"):
        env.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")  # as ``laketide run`` has it (``laketide.cli``)
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    out = workdir / f"result-{engine}.json"
    if done.returncode or not out.exists():
        return {
            "engine": engine,
            "error": (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"],
        }
    return json.loads(out.read_text())


def spawn_in_place(engine: str, workdir: Path, name: str, args: argparse.Namespace) -> dict:
    """``spawn`` in a directory of its own beside the landing files, removed after: each round starts
    with no table, and the disk holds one engine's table at a time."""
    place = workdir / name
    place.mkdir()
    try:
        (place / "landing").symlink_to(workdir / "landing", target_is_directory=True)
        shutil.copy(workdir / "workload.json", place / "workload.json")
        return spawn(engine, place, args)
    finally:
        shutil.rmtree(place, ignore_errors=True)


def run_workload(skew: str, args: argparse.Namespace) -> dict:
    shape = SHAPES[args.shape]
    batches = make_workload(args.rows, args.batches, args.batch_rows, 0.5, skew, args.seed, shape)
    workdir = Path(tempfile.mkdtemp(prefix=f"laketide-peers-{skew}-"))
    try:
        (workdir / "landing").mkdir()
        land(workdir / "landing", batches, args.rows)
        (workdir / "workload.json").write_text(
            json.dumps({"batch_rows": args.batch_rows, "laketide_conf": args.laketide_conf})
        )
        load_mb = (workdir / "landing" / "batch-0000.parquet").stat().st_size / 2**20
        print(
            f"workload {skew}: N={args.rows:,} ({load_mb:.0f} MB of parquet) K={args.batches} B={args.batch_rows:,}, "
            f"{len(shape.schema)} columns in {shape.regions} partitions",
            flush=True,
        )
        del batches
        engines = args.engines.split(",")
        runs: dict[str, list[dict]] = {engine: [] for engine in engines}
        for round_ in range(args.rounds):
            for engine in engines:
                if round_ and engine not in ROUNDED:
                    continue
                runs[engine].append(row := spawn_in_place(engine, workdir, f"{engine}-{round_ + 1}", args))
                print(
                    f"  {engine} (round {round_ + 1}): "
                    + (
                        f"median {row['median_batch_seconds']}s, load {row['load_seconds']}s, verified "
                        f"{row['verified']}"
                        if "error" not in row
                        else f"FAILED {row['error']}"
                    ),
                    flush=True,
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results = [median_round(rows) for rows in runs.values()]
    return {"skew": skew, "results": results, "ratios": ratios(results)}


def median_round(rows: list[dict]) -> dict:
    """An engine's row over its rounds: the round whose median batch is the median (the lower of the middle
    two), with every round's median batch and load, and the median load over the rounds (a load is one
    measurement a round, so the round picked by its batches says little of it); a failed round fails the row."""
    failed = [r for r in rows if "error" in r]
    if failed:
        return failed[0]
    ranked = sorted(rows, key=lambda r: r["median_batch_seconds"])
    row = dict(ranked[(len(ranked) - 1) // 2])
    if len(rows) > 1:
        row["round_median_batch_seconds"] = [r["median_batch_seconds"] for r in rows]
        row["round_load_seconds"] = [r["load_seconds"] for r in rows]
        row["load_seconds"] = sorted(row["round_load_seconds"])[(len(rows) - 1) // 2]
        row["verified"] = all(r["verified"] for r in rows)
    return row


def ratios(results: list[dict]) -> dict:
    """laketide's median batch and load over each peer's, and bytes written per batch byte."""
    by = {r["engine"]: r for r in results if "error" not in r}
    out = {}
    for mine in ("laketide-cow", "laketide-mor"):
        for peer in ("delta-rs", "ducklake"):
            if mine in by and peer in by:
                out[f"{mine}/{peer} median batch"] = round(
                    by[mine]["median_batch_seconds"] / by[peer]["median_batch_seconds"], 2
                )
                out[f"{mine}/{peer} load"] = round(by[mine]["load_seconds"] / by[peer]["load_seconds"], 2)
        down = f"{mine}-catalog-down"
        if mine in by and down in by:  # the catalog's cost: the same job with its metastore hung
            out[f"{down}/{mine} median batch"] = round(
                by[down]["median_batch_seconds"] / by[mine]["median_batch_seconds"], 2
            )
    return out


def pooled_loads(workloads: list[dict]) -> dict:
    """laketide's load over each peer's, as the medians over every round of every workload: each workload's load is
    the same N new rows (the skew shapes only its batches), so their rounds are one sample of it, twice a workload's.
    A workload's median of three rounds moved its ratio by up to a third between runs of the same code."""
    loads: dict[str, list[float]] = {}
    for workload in workloads:
        for r in workload["results"]:
            if "error" not in r:
                loads.setdefault(r["engine"], []).extend(r.get("round_load_seconds") or [r["load_seconds"]])
    out = {}
    for mine in ("laketide-cow", "laketide-mor"):
        for peer in ("delta-rs", "ducklake"):
            if mine in loads and peer in loads:
                out[f"{mine}/{peer} load"] = round(statistics.median(loads[mine]) / statistics.median(loads[peer]), 2)
    both = loads.get("laketide-cow", []) + loads.get("laketide-mor", [])
    if both and "delta-rs" in loads:
        out["laketide (both types)/delta-rs load"] = round(
            statistics.median(both) / statistics.median(loads["delta-rs"]), 2
        )
    return out


def show(workload: dict) -> None:
    columns = (
        "engine",
        "load_seconds",
        "median_batch_seconds",
        "p95_batch_seconds",
        "files",
        "mb",
        "peak_rss_mb",
        "peak_pss_mb",
        "median_write_amplification",
        "verified",
    )
    rows = [{c: r.get(c, "FAILED" if c == "verified" else "") for c in columns} for r in workload["results"]]
    print_table(rows, f"{workload['skew']}: laketide / peer", workload["ratios"], width=14)
    for r in workload["results"]:
        if r.get("round_median_batch_seconds"):
            print(
                f"  {r['engine']} median batch by round: {r['round_median_batch_seconds']} s, load "
                f"{r['round_load_seconds']} s"
            )
        if r.get("median_stages"):
            print(f"  {r['engine']} median seconds per step: {r['median_stages']}")


def main() -> None:
    parser = argparse.ArgumentParser(description="laketide against delta-rs, DuckLake, pypaimon and PyIceberg")
    parser.add_argument("--rows", type=int, default=1_000_000, help="initial load N")
    parser.add_argument("--batches", type=int, default=10, help="upsert batches K")
    parser.add_argument("--batch-rows", type=int, default=100_000, help="rows per batch B")
    parser.add_argument("--workloads", default="uniform,newest")
    parser.add_argument("--engines", default=ALL_ENGINES)
    parser.add_argument("--iceberg-batches", type=int, default=3)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="runs of laketide, delta-rs and DuckLake, interleaved (the row is the median round)",
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="wide")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--laketide-conf",
        action="append",
        help=f"a setting of laketide's runs, repeatable (default: {' '.join(LAKETIDE_CONF)})",
    )
    parser.add_argument("--out", default="bench/results/peers.json")
    # one engine's run, in its own process
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--max-batches", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.laketide_conf = args.laketide_conf or LAKETIDE_CONF
    if args.engine:
        return run_engine(args.engine, args.workdir, args.shape, args.max_batches)
    workloads = [run_workload(skew, args) for skew in args.workloads.split(",")]
    for workload in workloads:
        show(workload)
    pooled = pooled_loads(workloads)
    if len(workloads) > 1:
        print(
            "loads over every round of every workload (the same N rows each): "
            + ", ".join(f"{k} {v}x" for k, v in pooled.items())
        )
    verified = all(r.get("verified") for w in workloads for r in w["results"])
    write_results(
        args.out,
        {
            "workload": {k: v for k, v in vars(args).items() if k not in ("engine", "workdir", "max_batches")},
            "workloads": workloads,
            "pooled_load_ratios": pooled,
        },
        verified,
    )


if __name__ == "__main__":
    main()
