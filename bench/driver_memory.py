"""The driver's peak memory for a micro-batch at ``write.driver_batch_bytes``, for parquet, JSON and CSV landing files.

Each run is `laketide run` (available-now) in a subprocess: a first micro-batch loads the table, a second
one, whose landing files weigh the setting once decoded (``writer.sources.decoded_bytes``: parquet by its
footers' uncompressed sizes, JSON and CSV by their text), upserts into it (half updates). The peak RSS of
the driver's Python process is sampled every 20 ms; the JVM beside it is not counted (``spark.driver.memory``
sizes it). A baseline run with a tiny second batch gives what the job holds whatever the batch, so
``(peak - baseline) / setting`` is what each byte of the setting costs.

    python bench/driver_memory.py                                   # 64 MiB, the default setting
    python bench/driver_memory.py --setting-mib 16 --formats parquet json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

DDL = "id BIGINT, name STRING, amount DOUBLE, ts BIGINT, region STRING, status STRING, qty INT, note STRING"
CLI = str(Path(sys.executable).with_name("laketide"))
LINE = re.compile(r"micro-batch 1: instant=\d+ records=(\d+).* on (driver|tasks)")


def _rows(ids: np.ndarray, ts: int) -> pa.Table:
    n = len(ids)
    rng = np.random.default_rng(ts)
    return pa.table(
        {
            "id": ids,
            "name": pa.array(np.char.add("customer-", ids.astype(str))),
            "amount": np.round(rng.random(n) * 1000, 2),
            "ts": np.full(n, ts, np.int64),
            "region": pa.array(np.char.add("r", (ids % 10).astype(str))),
            "status": pa.array(np.array(["new", "paid", "shipped", "returned"])[rng.integers(0, 4, n)]),
            "qty": rng.integers(1, 100, n).astype(np.int32),
            "note": pa.array(np.char.add("order note for ", ids.astype(str))),
        }
    )


def _write(rows: pa.Table, fmt: str, path: Path) -> None:
    if fmt == "parquet":
        pq.write_table(rows, path)
    elif fmt == "json":
        with open(path, "w") as f:
            for record in rows.to_pylist():
                f.write(json.dumps(record) + "\n")
    else:
        with open(path, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(rows.column_names)
            out.writerows(tuple(r.values()) for r in rows.to_pylist())


def _decoded(path: Path, fmt: str) -> int:
    if fmt != "parquet":
        return path.stat().st_size
    meta = pq.read_metadata(path)
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


def _land(root: Path, fmt: str, initial: int, batch_bytes: int) -> tuple[int, int, int]:
    """The load, then a batch that decodes to about ``batch_bytes`` (half updates): its rows, landing and decoded
    bytes."""
    landing = root / "landing"
    landing.mkdir(parents=True)
    _write(_rows(np.arange(initial), 1), fmt, landing / f"b0.{fmt}")
    os.utime(landing / f"b0.{fmt}", (1_700_000_000, 1_700_000_000))
    probe = root / f"probe.{fmt}"
    _write(_rows(np.arange(10_000), 2), fmt, probe)
    rows = max(100, int(batch_bytes / (_decoded(probe, fmt) / 10_000)))
    probe.unlink()
    ids = np.concatenate([np.arange(rows // 2) * 2 % max(initial, 1), initial + np.arange(rows - rows // 2)])
    second = landing / f"b1.{fmt}"
    _write(_rows(ids, 2), fmt, second)
    while _decoded(second, fmt) > batch_bytes and rows > 100:  # a footer is rounder than the probe: trim to fit
        rows = int(rows * 0.97)
        _write(_rows(ids[:rows], 2), fmt, second)
    os.utime(second, (1_700_000_001, 1_700_000_001))
    return rows, second.stat().st_size, _decoded(second, fmt)


def _peak_rss(args: list[str], env: dict) -> tuple[int, str]:
    # stdout is not read: it goes nowhere, so a full pipe can never stop the job
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    ps = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.02)
    reader.join()
    if proc.returncode != 0:
        raise SystemExit(f"laketide run failed:\n{''.join(err)[-3000:]}")
    return peak, "".join(err)


def run_one(fmt: str, setting: int, batch_bytes: int, initial: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="laketide-mem-") as tmp:
        root = Path(tmp)
        rows, landing_bytes, decoded = _land(root, fmt, initial, batch_bytes)
        conf = {
            "table.path": root / "table",
            "table.record_key": '["id"]',
            "table.partition_by": '["region"]',
            "table.ordering_field": "ts",
            "source.format": fmt,
            "source.path": root / "landing",
            "source.schema": DDL,
            "source.max_files_per_trigger": 1,
            "stream.checkpoint": root / "checkpoint",
            "stream.trigger": "available-now",
            "write.driver_batch_bytes": setting,
        }
        args = [CLI, "run"] + [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
        peak, log = _peak_rss(args, {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
        found = LINE.search(log)
        return {
            "format": fmt,
            "rows": rows,
            "landing_mib": round(landing_bytes / 2**20, 1),
            "decoded_mib": round(decoded / 2**20, 1),
            "ran_on": found.group(2) if found else "?",
            "peak_rss_mib": round(peak / 2**20),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting-mib", type=int, default=64)
    parser.add_argument("--initial-rows", type=int, default=200_000)
    parser.add_argument("--formats", nargs="+", default=["parquet", "json"], choices=["parquet", "json", "csv"])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "driver_memory.json"))
    opts = parser.parse_args()
    setting = opts.setting_mib * 2**20
    results = []
    for fmt in opts.formats:
        base = run_one(fmt, setting, 64 * 1024, opts.initial_rows)
        full = run_one(fmt, setting, setting, opts.initial_rows)
        per_byte = (full["peak_rss_mib"] - base["peak_rss_mib"]) / opts.setting_mib
        results.append(
            {"format": fmt, "baseline": base, "at_setting": full, "rss_per_setting_byte": round(per_byte, 2)}
        )
        print(
            f"{fmt:8s} batch {full['rows']:>9,} rows, {full['landing_mib']:6.1f} MiB landing, "
            f"{full['decoded_mib']:5.1f} MiB decoded, "
            f"on {full['ran_on']}: peak {full['peak_rss_mib']:,} MiB (baseline {base['peak_rss_mib']:,} MiB, "
            f"{per_byte:.2f} bytes of driver memory per byte of the setting)",
            flush=True,
        )
    Path(opts.out).write_text(
        json.dumps({"setting_mib": opts.setting_mib, "initial_rows": opts.initial_rows, "results": results}, indent=2)
        + "\n"
    )


if __name__ == "__main__":
    main()
