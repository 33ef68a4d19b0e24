"""Upsert benchmark: laketide's streaming job against delta-rs MERGE, on one generated workload.

The workload is an initial load of N rows, then K batches of B rows in which a
share of rows update existing keys (uniform, zipf-skewed, or the newest 5%) and 1% repeat a
key of the same batch. Both engines get the same parquet files, both results
are checked against the expected final state, and the ratios are reported
because this machine is shared and absolute times drift.

A second setting runs the same batches on a table of ``--large-rows`` (10M by
default), to show how each engine's per-batch cost grows with the table. Its
initial load lands as files of ``--load-file-rows``, one laketide micro-batch each.

    python bench/upsert_bench.py                      # N=1,000,000 and 10,000,000, K=10 B=100,000, 50% updates
    python bench/upsert_bench.py --rows 100000 --batches 3 --batch-rows 10000 --large-rows 0
    python bench/upsert_bench.py --shape wide --large-rows 0      # 15 columns in 10 partitions
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from measure import PeakRss

_DDL_TYPES = {
    pa.int64(): "BIGINT",
    pa.int32(): "INT",
    pa.float64(): "DOUBLE",
    pa.string(): "STRING",
    pa.bool_(): "BOOLEAN",
    pa.timestamp("us", tz="UTC"): "TIMESTAMP",
    pa.date32(): "DATE",
}


@dataclass(frozen=True)
class Shape:
    """A workload's columns: every shape is keyed by ``id``, partitioned by ``region`` and ordered by ``ts``."""

    name: str
    schema: pa.Schema
    regions: int

    @property
    def ddl(self) -> str:
        return ", ".join(f"{f.name} {_DDL_TYPES[f.type]}" for f in self.schema)

    def rows(self, ids: np.ndarray, ts: np.ndarray) -> pa.Table:
        # built only for the shape's own columns: the wide ones cost seconds on 10M rows
        columns = {
            "id": lambda: ids,
            "name": lambda: pa.array(np.char.add("name-", ts.astype(str))),
            "amount": lambda: np.round(ids * 0.37 + ts * 0.001, 3),
            "ts": lambda: ts,
            "region": lambda: pa.array(np.char.add("r", (ids % self.regions).astype(str))),
            "qty": lambda: ((ids + ts) % 1000).astype(np.int32),
            "price": lambda: np.round((ts % 10_000) * 0.25, 2),
            "category": lambda: pa.array(np.char.add("category-", (ids % 20).astype(str))),
            "status": lambda: pa.array(np.array(["new", "paid", "shipped", "returned", "closed"])[ts % 5]),
            "note": lambda: pa.array(
                np.char.add(np.char.add("note for ", ids.astype(str)), np.char.add(" at ", ts.astype(str)))
            ),
            "flag": lambda: (ts % 3) == 0,
            "score": lambda: np.round(np.sin(ids + ts), 6),
            "created": lambda: pa.array(
                (1_700_000_000_000_000 + ts * 1_000_000).astype(np.int64), pa.timestamp("us", tz="UTC")
            ),
            "day": lambda: pa.array((19_700 + ts % 365).astype(np.int32), pa.date32()),
            "code": lambda: (ids % 7919).astype(np.int32),
            "comment": lambda: _comments(ids, ts),
        }
        return pa.table({f.name: columns[f.name]() for f in self.schema}, schema=self.schema)


_WORDS = np.array(["order", "shipped", "late", "customer", "asked", "refund", "warehouse", "north", "gift", "wrap"])


def _comments(ids: np.ndarray, ts: np.ndarray) -> pa.Array:
    """About 700 characters of free text a row, differing from row to row (one of 997 texts, then the row's own)."""
    texts = [" ".join(_WORDS[(k * 7 + np.arange(105)) % 10]) for k in range(997)]
    return pa.array([f"{texts[k % 997]} (order {k} at {t})" for k, t in zip(ids.tolist(), ts.tolist())])


_NARROW = [
    ("id", pa.int64()),
    ("name", pa.string()),
    ("amount", pa.float64()),
    ("ts", pa.int64()),
    ("region", pa.string()),
]
_WIDE_EXTRA = [
    ("qty", pa.int32()),
    ("price", pa.float64()),
    ("category", pa.string()),
    ("status", pa.string()),
    ("note", pa.string()),
    ("flag", pa.bool_()),
    ("score", pa.float64()),
    ("created", pa.timestamp("us", tz="UTC")),
    ("day", pa.date32()),
    ("code", pa.int32()),
]
SHAPES = {
    "narrow": Shape("narrow", pa.schema(_NARROW), 4),  # 5 columns, 4 partitions
    "wide": Shape("wide", pa.schema(_NARROW + _WIDE_EXTRA), 10),  # 15 columns, 10 partitions
}
NARROW = SHAPES["narrow"]


# -- workload ---------------------------------------------------------------


def make_workload(
    n: int,
    k: int,
    b: int,
    update_share: float,
    skew: str,
    seed: int,
    shape: Shape = NARROW,
    then: tuple[int, int] = (0, 0),
) -> list[pa.Table]:
    """The initial load of ``n`` rows, ``k`` batches of ``b`` rows, then ``then[0]`` batches of ``then[1]`` rows."""
    rng = np.random.default_rng(seed)
    batches = [shape.rows(np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64))]
    next_id, next_ts = n, n
    for size in [b] * k + [then[1]] * then[0]:
        updates = int(size * update_share)
        if skew == "zipf":
            picked = (rng.zipf(1.2, size=updates) - 1) % next_id
        elif skew == "newest":  # the newest 5% of the keys so far, as recent orders are the ones that change
            picked = rng.integers(next_id - max(1, next_id // 20), next_id, size=updates)
        else:
            picked = rng.integers(0, next_id, size=updates)
        inserts = np.arange(next_id, next_id + (size - updates), dtype=np.int64)
        next_id += len(inserts)
        ids = np.concatenate([picked.astype(np.int64), inserts])
        rng.shuffle(ids)
        dups = rng.random(size) < 0.01
        ids[dups] = ids[rng.integers(0, size, size=int(dups.sum()))]
        ts = np.arange(next_ts, next_ts + size, dtype=np.int64)
        next_ts += size
        batches.append(shape.rows(ids, ts))
    return batches


def dedupe(batch: pa.Table) -> pa.Table:
    ordered = batch.sort_by([("id", "ascending"), ("ts", "descending")])
    ids = ordered["id"].to_numpy()
    first = np.ones(len(ids), bool)
    first[1:] = ids[1:] != ids[:-1]
    return ordered.filter(pa.array(first))


def expected_state(batches: list[pa.Table]) -> pa.Table:
    final = dedupe(pa.concat_tables(batches))
    return final.sort_by("id")


# -- measuring --------------------------------------------------------------


def median_stages(stage_seconds: list[dict[str, float]]) -> dict[str, float]:
    """Each step's median seconds over the micro-batches (a step a micro-batch lacks counts 0)."""
    names = dict.fromkeys(name for batch in stage_seconds for name in batch)
    return {name: round(statistics.median(batch.get(name, 0.0) for batch in stage_seconds), 3) for name in names}


@dataclass
class Result:
    engine: str
    load_seconds: float
    batch_seconds: list[float] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    peak_rss_mb: float = 0.0
    peak_pss_mb: float = 0.0  # the process tree's peak with shared pages counted once (``measure``)
    verified: bool = False
    # per upsert batch: bytes its commit wrote / bytes of the batch's own parquet file (laketide)
    write_amplification: list[float] = field(default_factory=list)
    # per upsert batch: wall seconds per step and Python task seconds per Spark stage (laketide)
    stage_seconds: list[dict[str, float]] = field(default_factory=list)

    def median_stages(self) -> dict[str, float]:
        return median_stages(self.stage_seconds)

    def summary(self, batch_rows: int) -> dict:
        secs = sorted(self.batch_seconds)
        median = statistics.median(secs)
        p95 = secs[min(len(secs) - 1, round(0.95 * (len(secs) - 1)))]
        return {
            "engine": self.engine,
            "load_seconds": round(self.load_seconds, 2),
            "median_batch_seconds": round(median, 3),
            "p95_batch_seconds": round(p95, 3),
            "records_per_second": round(batch_rows / median),
            "files": self.files,
            "mb": round(self.bytes / 2**20, 1),
            "peak_rss_mb": round(self.peak_rss_mb),
            "peak_pss_mb": round(self.peak_pss_mb),
            "median_write_amplification": round(statistics.median(self.write_amplification), 2)
            if self.write_amplification
            else None,
            "verified": self.verified,
        }


def _matches(got: pa.Table, expected: pa.Table | Callable[[], pa.Table]) -> bool:
    """Whether ``got`` holds the ``expected`` rows; given as a function, they are made only now, so an engine's
    process does not hold them while its memory is measured."""
    expected = expected() if callable(expected) else expected
    schema = expected.schema
    got = got.select(schema.names).cast(schema).sort_by("id")
    return got.num_rows == expected.num_rows and got.equals(expected)


# -- engines ----------------------------------------------------------------


def laketide_config(
    table_path: Path,
    checkpoint: Path,
    landing: Path,
    parallelism: int,
    extra: tuple[str, ...] = (),
    shape: Shape = NARROW,
):
    """The job's settings for the workload: keyed by id, partitioned by region, event-time on ts."""
    from laketide.config import load_config

    return load_config(
        overrides=[
            f"table.path={table_path}",
            f"table.name={table_path.name.replace('-', '_')}",
            'table.record_key=["id"]',
            'table.partition_by=["region"]',
            "table.ordering_field=ts",
            "source.format=parquet",
            f"source.path={landing}",
            f"source.schema={shape.ddl}",
            "source.max_files_per_trigger=1",
            f"stream.checkpoint={checkpoint}",
            "stream.trigger=available-now",
            f"write.parallelism={parallelism}",
            f"write.index_shards={parallelism}",
            "spark.master=local[2]",
            f"spark.conf.spark.sql.shuffle.partitions={parallelism}",
            # the JVM at Spark's default heap (1g), as `laketide run` starts it: at 4g it held about 2 GB at the
            # job's peak against 0.9 GB, for the same batch times (the peers' 1M-row load on Spark's tasks included)
            *extra,
        ]
    )


def _write_amplification(table_path: Path, landing: Path, load_files: int) -> list[float]:
    """For each upsert micro-batch: the bytes its commit wrote over the size of its landing file."""
    from laketide.table import Table

    timeline = Table.open(str(table_path)).timeline
    writes = [i for i in timeline.completed_writes() if not timeline.commit_metadata(i).compacted]
    sizes = [f.stat().st_size for f in sorted(landing.glob("batch-*.parquet"))]
    written = [sum(s.total_write_bytes for s in timeline.commit_metadata(i).write_stats()) for i in writes]
    return [round(w / size, 2) for w, size in zip(written[load_files:], sizes[load_files:])]


def land(landing: Path, batches: list[pa.Table], load_file_rows: int) -> int:
    """Write the workload as landing files in arrival order: the initial load split into files of
    ``load_file_rows``, then one file per upsert batch. Returns the number of load files."""
    load = batches[0]
    parts = [load.slice(start, load_file_rows) for start in range(0, load.num_rows, load_file_rows)]
    for n, part in enumerate(parts + batches[1:]):
        path = landing / f"batch-{n:04d}.parquet"
        pq.write_table(part, path)
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))
    return len(parts)


def run_laketide(
    workdir: Path,
    landing: Path,
    expected: pa.Table | Callable[[], pa.Table],
    parallelism: int,
    table_type: str = "COPY_ON_WRITE",
    load_files: int = 1,
    shape: Shape = NARROW,
    extra: tuple[str, ...] = (),
) -> Result:
    from hudi import HudiTableBuilder

    from laketide.spark.job import run

    name = "cow" if table_type == "COPY_ON_WRITE" else "mor"
    table_path = workdir / f"laketide-{name}"
    config = laketide_config(
        table_path, workdir / f"checkpoint-{name}", landing, parallelism, (f"table.type={table_type}", *extra), shape
    )
    reports = []
    with PeakRss() as rss:
        run(config, on_ready=lambda job: job.writer.observers.append(reports.append))
    reports = [r for r in reports if not r.skipped]
    load, upserts = reports[:load_files], reports[load_files:]
    result = Result(
        f"laketide {name}",
        sum(r.seconds for r in load),
        [r.seconds for r in upserts],
        peak_rss_mb=rss.peak / 2**20,
        peak_pss_mb=rss.peak_pss / 2**20,
    )
    result.stage_seconds = [r.stage_seconds for r in upserts]
    from laketide.table import Table

    slices = Table.open(str(table_path)).file_system_view().latest_slices()
    result.files, result.bytes = len(slices), sum(s.size for s in slices)
    result.write_amplification = _write_amplification(table_path, landing, load_files)
    hudi_rows = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table_path)).build().read())
    result.verified = _matches(hudi_rows, expected)
    return result


def run_delta(workdir: Path, batches: Iterable[pa.Table], expected: pa.Table | Callable[[], pa.Table]) -> Result:
    """delta-rs's ``write_deltalake`` of the first batch, then a ``MERGE`` per batch; each timed from taking it from
    ``batches`` (which may read it from its file) to the end of its commit."""
    from deltalake import DeltaTable, write_deltalake

    path = str(workdir / "delta")
    batches = iter(batches)
    with PeakRss() as rss:
        started = time.perf_counter()
        write_deltalake(path, dedupe(next(batches)), partition_by=["region"])
        result = Result("delta-rs", time.perf_counter() - started)
        while True:
            started = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            source = dedupe(batch)
            (
                DeltaTable(path)
                .merge(
                    source=source, predicate="t.id = s.id AND t.region = s.region", source_alias="s", target_alias="t"
                )
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
            result.batch_seconds.append(time.perf_counter() - started)
    result.peak_rss_mb, result.peak_pss_mb = rss.peak / 2**20, rss.peak_pss / 2**20
    table = DeltaTable(path)
    uris = table.file_uris()
    result.files = len(uris)
    result.bytes = sum(os.path.getsize(u.removeprefix("file://")) for u in uris)
    result.verified = _matches(table.to_pyarrow_table(), expected)
    return result


# -- main -------------------------------------------------------------------


def print_table(rows: list[dict], ratio_title: str, ratios: dict, width: int = 22) -> None:
    columns = list(rows[0])
    first = max(len(str(r[columns[0]])) for r in rows)
    print(" | ".join(f"{c:>{width}}" if i else f"{c:<{first}}" for i, c in enumerate(columns)))
    for r in rows:
        print(" | ".join(f"{r[c]!s:>{width}}" if i else f"{r[c]:<{first}}" for i, c in enumerate(columns)))
    print(f"{ratio_title}: " + ", ".join(f"{k} {v}" for k, v in ratios.items()))


def write_results(out: str, payload: dict, verified: bool) -> None:
    """Write ``payload`` as JSON, and fail when a result is not verified."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(payload, indent=2))
    if not verified:
        print("verification FAILED", file=sys.stderr)
        sys.exit(1)


def report(rows: list[dict], ratio_title: str, ratios: dict, out: str, payload: dict, width: int = 22) -> None:
    """Print the results table and the ratios, write ``payload`` as JSON, and fail when a result is not verified."""
    print_table(rows, ratio_title, ratios, width)
    write_results(out, payload, all(r["verified"] for r in rows))


def run_setting(args: argparse.Namespace, initial_rows: int) -> dict:
    """The workload on a table of ``initial_rows``: every engine on the same landing files, checked, printed."""
    shape = SHAPES[args.shape]
    batches = make_workload(initial_rows, args.batches, args.batch_rows, args.update_share, args.skew, args.seed, shape)
    expected = expected_state(batches)
    workdir = Path(tempfile.mkdtemp(prefix="laketide-bench-"))
    try:
        landing = workdir / "landing"
        landing.mkdir()
        load_files = land(landing, batches, args.load_file_rows)
        print(
            f"workload: N={initial_rows:,} K={args.batches} B={args.batch_rows:,} "
            f"updates={args.update_share:.0%} {args.skew}, "
            f"{len(shape.schema)} columns in {shape.regions} partitions; "
            f"final rows {expected.num_rows:,}",
            flush=True,
        )
        delta = run_delta(workdir, batches, expected)
        print(f"delta-rs done: median {statistics.median(delta.batch_seconds):.2f}s per batch", flush=True)
        del batches
        lakes = []
        for table_type in args.table_types.split(","):
            lakes.append(
                run_laketide(
                    workdir, landing, expected, args.parallelism, table_type.strip().upper(), load_files, shape
                )
            )
            print(
                f"{lakes[-1].engine} done: median {statistics.median(lakes[-1].batch_seconds):.2f}s per batch",
                flush=True,
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    base = delta.summary(args.batch_rows)
    rows = [lake.summary(args.batch_rows) for lake in lakes] + [base]
    ratios = {
        row["engine"]: {
            "median_batch_seconds": round(row["median_batch_seconds"] / base["median_batch_seconds"], 2),
            "p95_batch_seconds": round(row["p95_batch_seconds"] / base["p95_batch_seconds"], 2),
            "records_per_second": round(row["records_per_second"] / base["records_per_second"], 2),
            "peak_rss_mb": round(row["peak_rss_mb"] / base["peak_rss_mb"], 2),
        }
        for row in rows[:-1]
    }
    stages = {lake.engine: {"median": lake.median_stages(), "per_batch": lake.stage_seconds} for lake in lakes}
    print_stages(stages)
    print_table(
        rows, "laketide / delta-rs", {f"{engine} median": r["median_batch_seconds"] for engine, r in ratios.items()}
    )
    return {"initial_rows": initial_rows, "results": rows, "ratio_laketide_to_delta": ratios, "stage_seconds": stages}


def main() -> None:
    parser = argparse.ArgumentParser(description="laketide vs delta-rs upsert benchmark")
    parser.add_argument("--rows", type=int, default=1_000_000, help="initial load N")
    parser.add_argument(
        "--large-rows", type=int, default=10_000_000, help="initial load of the second setting (0: none)"
    )
    parser.add_argument(
        "--load-file-rows", type=int, default=1_000_000, help="rows per landing file of an initial load"
    )
    parser.add_argument("--batches", type=int, default=10, help="upsert batches K")
    parser.add_argument("--batch-rows", type=int, default=100_000, help="rows per batch B")
    parser.add_argument("--update-share", type=float, default=0.5)
    parser.add_argument("--skew", choices=["uniform", "zipf", "newest"], default="uniform")
    parser.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="narrow",
        help="narrow: 5 columns, 4 partitions; wide: 15 columns, 10 partitions",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument(
        "--table-types", default="COPY_ON_WRITE,MERGE_ON_READ", help="laketide table types to run, comma-separated"
    )
    parser.add_argument("--out", default="bench/results/upsert_bench.json")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    settings = [run_setting(args, n) for n in [args.rows] + ([args.large_rows] if args.large_rows else [])]
    payload = {"workload": vars(args), "settings": settings}
    if len(settings) == 2:
        medians = [{r["engine"]: r["median_batch_seconds"] for r in setting["results"]} for setting in settings]
        growth = {engine: round(medians[1][engine] / medians[0][engine], 2) for engine in medians[0]}
        payload["median_growth_large_over_base"] = growth
        print(
            f"median batch seconds, {args.large_rows:,}-row table / {args.rows:,}-row table: "
            + ", ".join(f"{e} {g}" for e, g in growth.items())
        )
    write_results(args.out, payload, all(r["verified"] for setting in settings for r in setting["results"]))


def print_stages(stages: dict[str, dict]) -> None:
    """Median seconds per step of an upsert micro-batch; ``*_tasks`` are Python seconds summed over a stage's tasks."""
    names = list(dict.fromkeys(name for engine in stages.values() for name in engine["median"]))
    print("median seconds per step: " + " | ".join(f"{n:>13}" for n in names))
    for engine, timings in stages.items():
        print(f"{engine:<24} " + " | ".join(f"{timings['median'].get(n, 0.0):>13.2f}" for n in names))


if __name__ == "__main__":
    main()
