"""Soak: the job on its generator source for many small micro-batches, with default settings.

It answers whether a job that runs for months stays flat: per window of
micro-batches it prints the median batch latency, the bytes of data files on
disk against the live bytes, the active timeline's files, the archived
timeline and the state index. The generator's keys are taken modulo
``--key-space``, so after the first windows the table keeps its size and every
row is a change: what grows then is history, which cleaning, archival and
index compaction must keep bounded.

delta-rs runs the same rows in the same run (one MERGE per micro-batch, with
a VACUUM each window, the maintenance a Delta operator schedules), and the
ratios are reported, since absolute times drift on a shared machine. At the
end hudi-rs and laketide's reader must agree with each other and with the
model of every generated row.

    .venv/bin/python bench/soak.py                       # 1,000 batches of 2,000 rows, 100,000 keys
    .venv/bin/python bench/soak.py --batches 300 --window 50
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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DATA_COLUMNS = ["id", "name", "amount", "ts", "region"]


@dataclass
class Window:
    first_batch: int
    last_batch: int
    median_s: float
    p90_s: float
    data_mb: float = 0.0
    live_mb: float = 0.0
    disk_to_live: float = 0.0
    timeline_files: int = 0  # the most the active timeline held after any micro-batch of the window
    archived_files: int = 0
    index_files: int = 0
    index_mb: float = 0.0
    delta_median_s: float | None = None
    delta_data_mb: float | None = None
    delta_log_files: int | None = None


@dataclass
class Soak:
    windows: list[Window] = field(default_factory=list)
    laketide_seconds: list[float] = field(default_factory=list)
    timeline_files: list[int] = field(default_factory=list)  # after every micro-batch
    delta_seconds: list[float] = field(default_factory=list)
    delta_samples: list[dict] = field(default_factory=list)


def _tree(path: Path, skip: str | None = None) -> tuple[int, int]:
    """(files, bytes) under ``path``, leaving out the top-level directory ``skip``."""
    files = size = 0
    for root, dirs, names in os.walk(path):
        if skip and Path(root) == path and skip in dirs:
            dirs.remove(skip)
        for name in names:
            files += 1
            size += os.path.getsize(os.path.join(root, name))
    return files, size


def timeline_files(path: Path) -> int:
    return sum(1 for p in (path / ".hoodie").iterdir() if p.is_file() and p.name != "hoodie.properties")


def sample_table(path: Path) -> dict:
    from laketide.table import Table

    table = Table.open(str(path))
    live = sum(s.size for s in table.file_system_view().latest_slices())
    _, data = _tree(path, skip=".hoodie")
    hoodie = path / ".hoodie"
    archived, _ = _tree(hoodie / "archived") if (hoodie / "archived").exists() else (0, 0)
    index_files, index_bytes = _tree(hoodie / ".laketide" / "index")
    return {
        "data_mb": data / 2**20,
        "live_mb": live / 2**20,
        "disk_to_live": data / live if live else 0.0,
        "archived_files": archived,
        "index_files": index_files,
        "index_mb": index_bytes / 2**20,
    }


def batch_rows(spec, n: int) -> pa.Table:
    from laketide.spark.generator import generate

    return pa.Table.from_batches([generate(spec, n * spec.rows_per_batch, (n + 1) * spec.rows_per_batch)])


def deduped(rows: pa.Table) -> pa.Table:
    """One row per key: the highest ``ts``, then the later row (the job's event-time merge within a batch)."""
    rows = rows.append_column("_pos", pa.array(np.arange(rows.num_rows)))
    ordered = rows.sort_by([("id", "ascending"), ("ts", "descending"), ("_pos", "descending")])
    ids = ordered["id"].to_numpy()
    first = np.ones(len(ids), dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    return ordered.filter(pa.array(first)).drop_columns(["_pos"])


def model(spec, batches: int) -> pa.Table:
    """The expected table: batches applied in order, a later batch's row replacing an earlier one's."""
    tagged = []
    for n in range(batches):
        rows = deduped(batch_rows(spec, n))
        tagged.append(rows.append_column("_batch", pa.array(np.full(rows.num_rows, n))))
    every = pa.concat_tables(tagged).sort_by([("id", "ascending"), ("_batch", "descending")])
    ids = every["id"].to_numpy()
    first = np.ones(len(ids), dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    final = every.filter(pa.array(first))
    return final.filter(pc.invert(final["_hoodie_is_deleted"])).select(DATA_COLUMNS).sort_by("id")


def _same(got: pa.Table, expected: pa.Table) -> bool:
    got = got.select(DATA_COLUMNS).cast(expected.schema).sort_by("id")
    return got.num_rows == expected.num_rows and got.equals(expected)


def run_laketide(args, workdir: Path, soak: Soak) -> Path:
    from laketide.cli.jobs import embedded_defaults
    from laketide.config import load_config
    from laketide.spark.job import run

    table_path = workdir / "laketide"
    settings = [
        f"table.path={table_path}",
        f"stream.checkpoint={workdir / 'checkpoint'}",
        "stream.trigger=available-now",
        "source.format=generator",
        f"source.generator.rows_per_batch={args.rows}",
        f"source.generator.batches={args.batches}",
        f"source.generator.key_space={args.key_space}",
    ]
    config = load_config(base=embedded_defaults(settings), overrides=settings)
    started = [time.perf_counter()]

    def on_ready(job):
        def observe(report):
            if report.skipped:
                return
            soak.laketide_seconds.append(report.seconds)
            soak.timeline_files.append(timeline_files(table_path))
            done = len(soak.laketide_seconds)
            if done % args.window == 0:
                job.services.wait()  # a clean still running after the last commit is part of this window's work
                window = soak.laketide_seconds[-args.window :]
                soak.windows.append(
                    Window(
                        done - args.window + 1,
                        done,
                        statistics.median(window),
                        float(np.percentile(window, 90)),
                        timeline_files=max(soak.timeline_files[-args.window :]),
                        **sample_table(table_path),
                    )
                )
                w = soak.windows[-1]
                print(
                    f"laketide batches {w.first_batch:>5}-{w.last_batch:<5} median {w.median_s:.3f}s p90 "
                    f"{w.p90_s:.3f}s "
                    f"data {w.data_mb:.1f} MB live {w.live_mb:.1f} MB ({w.disk_to_live:.1f}x) timeline "
                    f"{w.timeline_files} "
                    f"archived {w.archived_files} index {w.index_files} files {w.index_mb:.1f} MB "
                    f"[{time.perf_counter() - started[0]:.0f}s]",
                    flush=True,
                )

        job.writer.observers.append(observe)

    run(config, on_ready=on_ready)
    return table_path


def run_delta(args, spec, workdir: Path, soak: Soak) -> Path:
    from deltalake import DeltaTable, write_deltalake

    path = workdir / "delta"
    for n in range(args.batches):
        source = deduped(batch_rows(spec, n))
        started = time.perf_counter()
        if n == 0:
            write_deltalake(str(path), source.filter(pc.invert(source["_hoodie_is_deleted"])), partition_by=["region"])
        else:
            (
                DeltaTable(str(path))
                .merge(
                    source=source, predicate="t.id = s.id AND t.region = s.region", source_alias="s", target_alias="t"
                )
                .when_matched_delete(predicate="s._hoodie_is_deleted")
                .when_matched_update_all(predicate="NOT s._hoodie_is_deleted")
                .when_not_matched_insert_all(predicate="NOT s._hoodie_is_deleted")
                .execute()
            )
        soak.delta_seconds.append(time.perf_counter() - started)
        if (n + 1) % args.window == 0:
            table = DeltaTable(str(path))
            table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
            _, data = _tree(path, skip="_delta_log")
            log_files, _ = _tree(path / "_delta_log")
            soak.delta_samples.append({"data_mb": data / 2**20, "log_files": log_files})
            window = soak.delta_seconds[-args.window :]
            print(
                f"delta-rs batches {n + 2 - args.window:>5}-{n + 1:<5} median {statistics.median(window):.3f}s "
                f"data {data / 2**20:.1f} MB log files {log_files}",
                flush=True,
            )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description="laketide soak: many small micro-batches, flat cost and bounded disk")
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=2000, help="rows per micro-batch")
    parser.add_argument("--key-space", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--no-delta", action="store_true", help="skip the delta-rs peer")
    parser.add_argument("--out", default="bench/results/soak.json")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from hudi import HudiTableBuilder

    from laketide.spark.generator import GeneratorSpec
    from laketide.table import Table

    spec = GeneratorSpec(rows_per_batch=args.rows, batches=args.batches, key_space=args.key_space)
    soak = Soak()
    workdir = Path(tempfile.mkdtemp(prefix="laketide-soak-"))
    try:
        delta_path = None if args.no_delta else run_delta(args, spec, workdir, soak)
        table_path = run_laketide(args, workdir, soak)
        expected = model(spec, args.batches)
        ours = Table.open(str(table_path)).snapshot()
        theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table_path)).build().read())
        verdict = {
            "rows": expected.num_rows,
            "hudi_rs_equals_model": _same(theirs, expected),
            "laketide_reader_equals_model": _same(ours, expected),
        }
        if delta_path is not None:
            from deltalake import DeltaTable

            verdict["delta_equals_model"] = _same(DeltaTable(str(delta_path)).to_pyarrow_table(), expected)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    for window, sample in zip(soak.windows, soak.delta_samples):
        delta = soak.delta_seconds[window.first_batch - 1 : window.last_batch]
        window.delta_median_s = statistics.median(delta)
        window.delta_data_mb, window.delta_log_files = sample["data_mb"], sample["log_files"]
    columns = list(asdict(soak.windows[0]))
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for w in soak.windows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in asdict(w).values()) + " |")
    early = next((w for w in soak.windows if w.first_batch > args.window), soak.windows[0])
    last = soak.windows[-1]
    summary = {
        "last_to_early_median": round(last.median_s / early.median_s, 3),
        "early_window": [early.first_batch, early.last_batch],
        "max_disk_to_live": round(max(w.disk_to_live for w in soak.windows[1:] or soak.windows), 2),
        "max_timeline_files": max(w.timeline_files for w in soak.windows),
        "max_index_files": max(w.index_files for w in soak.windows),
    }
    if soak.delta_seconds:
        summary["laketide_to_delta_median_last_window"] = round(last.median_s / last.delta_median_s, 2)
    print("summary:", json.dumps(summary), "verdict:", json.dumps(verdict))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {"args": vars(args), "windows": [asdict(w) for w in soak.windows], "summary": summary, "verdict": verdict},
            indent=2,
        )
    )
    if not all(verdict[k] for k in verdict if k != "rows"):
        print("verification FAILED", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
