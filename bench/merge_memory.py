"""Peak memory of the bucket writer's merge at 1x and 8x file-group size.

Each merge runs in a fresh subprocess so that its peak RSS is its own. The
merged file group holds N or 8N rows; 20,000 incoming updates are spread
over the whole key range, so every batch of the old file is touched.

    python bench/merge_memory.py --rows 250000 --out bench/results/merge_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

UPDATES = 20_000


def _rows(ids, version: int) -> pa.Table:
    from laketide.table.format.schema import RECORD_KEY

    keys = pa.array([f"{i:010d}" for i in ids])
    n = len(keys)
    return pa.table(
        {"id": keys, "v": pa.array(np.full(n, version)), "payload": pa.array(["x" * 40] * n), RECORD_KEY: keys}
    )


def _setup(root: str):
    from laketide.table import FileIO
    from laketide.table.format.schema import avro_schema_json, with_meta_schema

    schema = pa.schema([("id", pa.string()), ("v", pa.int64()), ("payload", pa.string())])
    return FileIO.for_uri(root), schema, avro_schema_json(with_meta_schema(schema), "bench")


def build(rows: int, root: str) -> str:
    """The file group to merge into, written as one insert (not measured)."""
    from laketide.writer.files.bucket_writer import BucketWriter, FileGroupTarget
    from laketide.writer.files.settings import FileSettings, TaskFiles

    io, schema, avro = _setup(root)
    stat = BucketWriter(
        io, FileGroupTarget("p", "fg-0"), FileSettings(schema, avro), TaskFiles("20260101000000001", 0)
    ).write(_rows(range(rows), 1))
    return stat.path


def merge(rows: int, root: str, path: str) -> dict:
    from laketide.table.format.files import BaseFile
    from laketide.writer.files.bucket_writer import BucketWriter, FileGroupTarget
    from laketide.writer.files.settings import FileSettings, TaskFiles

    io, schema, avro = _setup(root)
    base = BaseFile.parse("p", os.path.basename(path), 0)
    incoming = _rows(np.linspace(0, rows - 1, UPDATES).astype(int), 2)
    started = time.perf_counter()
    settings, task = FileSettings(schema, avro), TaskFiles("20260101000000002", 0)
    stat = BucketWriter(io, FileGroupTarget("p", "fg-0", base), settings, task).write(incoming)
    return {
        "rows": stat.num_writes,
        "updates": stat.num_update_writes,
        "seconds": round(time.perf_counter() - started, 2),
        "file_mb": round(stat.file_size_in_bytes / 2**20, 1),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def _child(*args: str) -> str:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=250_000, help="rows of the 1x file group")
    parser.add_argument("--out", default="bench/results/merge_memory.json")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, rows, root, *rest = args.child
        print(build(int(rows), root) if kind == "build" else json.dumps(merge(int(rows), root, rest[0])))
        return
    results = []
    for factor in (1, 8):
        rows = args.rows * factor
        with tempfile.TemporaryDirectory() as root:
            path = _child("--child", "build", str(rows), root)
            results.append({"factor": factor, **json.loads(_child("--child", "merge", str(rows), root, path))})
    print(f"{'size':>5} {'rows':>10} {'file MB':>8} {'seconds':>8} {'peak RSS MB':>12}")
    for r in results:
        print(f"{r['factor']:>4}x {r['rows']:>10} {r['file_mb']:>8} {r['seconds']:>8} {r['peak_rss_mb']:>12}")
    ratio = results[1]["peak_rss_mb"] / results[0]["peak_rss_mb"]
    print(f"peak RSS 8x / 1x: {ratio:.2f}")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"updates": UPDATES, "results": results, "rss_ratio_8x_1x": round(ratio, 3)}, f, indent=2)


if __name__ == "__main__":
    main()
