"""The memory of a small job: `laketide run` on its generator, 2,000 rows a micro-batch every second, as a
user starts it, with every process it starts counted (Spark's JVM, the streaming source's Python runner, any
Python worker).

The job runs ``--seconds`` (120) after its first micro-batch, its process tree sampled every 0.2 s
(``measure``: summed RSS, and PSS, which counts a page shared by several processes once), from its start; the
peak of each, and each process's share at the PSS peak, go to the JSON.

    python bench/job_memory.py                  # 2,000 rows a micro-batch, 2 minutes
    python bench/job_memory.py --rows 20000 --seconds 60
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from measure import process_memory  # noqa: E402

CLI = str(Path(sys.executable).with_name("laketide"))


def processes(each: list[tuple[psutil.Process, int, int]]) -> list[dict]:
    """Each process of a sample (``measure.process_memory``): its command's tail, RSS and PSS in MB."""
    out = []
    for proc, rss, pss in each:
        try:
            out.append({"command": " ".join(proc.cmdline())[-80:], "rss_mb": rss >> 20, "pss_mb": pss >> 20})
        except psutil.Error:
            continue
    return sorted(out, key=lambda p: -p["pss_mb"])


def main() -> None:
    parser = argparse.ArgumentParser(description="the process tree's memory of a small generator job")
    parser.add_argument("--rows", type=int, default=2000, help="rows a micro-batch")
    parser.add_argument("--seconds", type=float, default=120, help="how long the job runs after its first micro-batch")
    parser.add_argument("--out", default=f"bench/results/job-memory-{datetime.date.today()}.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="laketide-job-memory-"))
    settings = [
        f"table.path={work / 'table'}",
        f"stream.checkpoint={work / 'checkpoint'}",
        "stream.trigger=1 second",
        f"source.generator.rows_per_batch={args.rows}",
        "source.generator.batches=100000",
    ]
    with open(work / "job.log", "w") as log:  # the job writes it through its own copy of the descriptor
        job = subprocess.Popen(
            [CLI, "run", *(a for s in settings for a in ("--conf", s))],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        )
    peak = peak_pss = 0
    at_peak: list[dict] = []

    def sample() -> None:
        """One sample of the tree; at a new PSS peak, each process's share too."""
        nonlocal peak, peak_pss, at_peak
        each = process_memory(job.pid)
        rss, pss = sum(r for _, r, _ in each), sum(p for _, _, p in each)
        peak = max(peak, rss)
        if pss > peak_pss:
            peak_pss, at_peak = pss, processes(each)
        time.sleep(0.2)

    try:
        while "micro-batch 0:" not in (work / "job.log").read_text():
            if job.poll() is not None:
                sys.exit(f"the job ended:\n{(work / 'job.log').read_text()[-3000:]}")
            sample()
        print(f"first micro-batch in; sampling {args.seconds:.0f} s", flush=True)
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            sample()
    finally:
        job.send_signal(signal.SIGINT)
        job.wait(120)
    text = (work / "job.log").read_text()
    batches = text.count(" on driver (") + text.count(" on tasks (")
    result = {
        "date": str(datetime.date.today()),
        "rows_per_batch": args.rows,
        "seconds": args.seconds,
        "micro_batches": batches,
        "peak_rss_mb": peak >> 20,
        "peak_pss_mb": peak_pss >> 20,
        "processes_at_pss_peak": at_peak,
    }
    print(
        f"{batches} micro-batches of {args.rows:,} rows: peak RSS {peak >> 20} MB, peak PSS {peak_pss >> 20} MB "
        "(all processes)"
    )
    for proc in at_peak:
        print(f"  {proc['pss_mb']:>5} MB PSS {proc['rss_mb']:>5} MB RSS  {proc['command']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
