"""What the coordinator API costs the writer that serves it: micro-batch seconds idle and under N clients.

One streaming job (`laketide`'s own generator, 20,000-row micro-batches every second, merge-on-read on
local disk, the API on) runs four windows back to back: idle, then N clients asking flat out
(``bench/api_load.py``, its own process, sharing this machine's cores) with each of its mixes (``panels``:
the dashboard's panels and the scripts' routes; ``dashboard``: whole dashboard pages and the instants in
turn), then idle again. Each mix's micro-batch median is compared with the median of the two idle windows
(the goal: at most 1.3x, for every mix), and its answers are counted by status (no 5xx) with their p50/p99.
The table is then read by hudi-rs and compared with the generator's model. There is no peer: this measures
the writer against itself. Results go to ``bench/results/api-<date>.json``.

    python bench/api_bench.py                          # 32 clients, 60 s windows
    python bench/api_bench.py --clients 8 --seconds 20
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
import threading
import time
from collections import Counter
from datetime import date
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from api_load import MIXES  # noqa: E402
from soak import _same, model  # noqa: E402


class Windows:
    """Micro-batch seconds by window; the observer runs on the job's micro-batch thread, the bench reads
    from its own, so the current window's name and the lists are guarded by ``lock``."""

    def __init__(self):
        self.lock = threading.Lock()
        self.current: str | None = None
        self.seconds: dict[str, list[float]] = {}
        self.batches = 0

    def observe(self, report) -> None:
        if report.skipped or report.empty:
            return
        with self.lock:
            self.batches += 1
            if self.current is not None:
                self.seconds.setdefault(self.current, []).append(report.seconds)

    def start(self, name: str | None) -> None:
        with self.lock:
            self.current = name


def run(args) -> dict:
    from laketide.cli import embedded_defaults
    from laketide.config import load_config
    from laketide.service import run_service
    from laketide.spark.generator import GeneratorSpec

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="api-bench-"))
    settings = [
        f"table.path={workdir / 'table'}",
        "table.type=MERGE_ON_READ",
        f"stream.checkpoint={workdir / 'checkpoint'}",
        "stream.trigger=1 second",
        "source.format=generator",
        f"source.generator.rows_per_batch={args.rows}",
        f"source.generator.batches={args.max_batches}",
        "coordinator.api_port=0",
        *args.conf,
    ]
    config = load_config(base=embedded_defaults(settings), overrides=settings)
    windows, load = Windows(), {}

    def on_ready(job) -> None:
        job.writer.observers.append(windows.observe)
        threading.Thread(target=drive, args=(job,), daemon=True).start()

    def drive(job) -> None:
        try:
            address = job.coordinator.lease.current_holder().api_address
            while windows.batches < args.warmup:
                time.sleep(0.5)
            for name in ("idle", *MIXES, "idle again"):
                print(f"{name}: {args.seconds:.0f} s", flush=True)
                windows.start(name)
                if name in MIXES:
                    load[name] = _load(address, args.clients, args.seconds, workdir, name)
                else:
                    time.sleep(args.seconds)
            windows.start(None)
        finally:
            job.stop()

    started = time.monotonic()
    run_service(config, on_ready=on_ready)
    return _result(args, windows, load, workdir, config, GeneratorSpec, time.monotonic() - started)


def _load(address: str, clients: int, seconds: float, workdir: Path, mix: str) -> dict:
    out = workdir / f"load-{mix}.json"
    subprocess.run(
        [
            sys.executable,
            str(HERE / "api_load.py"),
            address,
            "--clients",
            str(clients),
            "--seconds",
            str(seconds),
            "--mix",
            mix,
            "--out",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return json.loads(out.read_text())


def _result(args, windows: Windows, load: dict, workdir: Path, config, spec_class, took: float) -> dict:
    import pyarrow as pa
    from hudi import HudiTableBuilder

    from laketide.table import Table

    idle = windows.seconds.get("idle", []) + windows.seconds.get("idle again", [])
    idle_median = statistics.median(idle)
    mixes = {name: _mix(windows.seconds.get(name, []), load.get(name, {}), idle_median, args) for name in MIXES}
    worst = max(mixes.values(), key=lambda m: m["ratio"])
    timeline = Table.open(
        str(workdir / "table")
    ).timeline  # archival keeps only the newest commits: the last batch id counts them
    last = [i for i in timeline.completed_writes() if i.action == "deltacommit"][-1]
    committed = int(timeline.commit_metadata(last).extra_metadata["laketide.batch.id"]) + 1
    read = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(workdir / "table")).build().read())
    spec = spec_class(**config.source.generator.model_dump())
    verified = _same(read, model(spec, committed))
    return {
        "date": date.today().isoformat(),
        "rows_per_batch": args.rows,
        "clients": args.clients,
        "window_seconds": args.seconds,
        "idle_batches": len(idle),
        "idle_median_s": round(idle_median, 3),
        "goal_ratio": 1.3,
        "mixes": mixes,
        # the worst mix's figures, and the answers of all
        "worst_mix": worst["mix"],
        "load_batches": sum(m["load_batches"] for m in mixes.values()),
        "load_median_s": worst["load_median_s"],
        "ratio": worst["ratio"],
        "answers": sum(m["answers"] for m in mixes.values()),
        "statuses": dict(sum((Counter(m["statuses"]) for m in mixes.values()), Counter())),
        "answer_p50_s": worst["answer_p50_s"],
        "answer_p99_s": worst["answer_p99_s"],
        "server_errors": sum(m["server_errors"] for m in mixes.values()),
        "verified": verified,
        "seconds": round(took),
        "settings": args.conf,
        "cpus": os.cpu_count(),
        "workdir": str(workdir),
    }


def _mix(seconds: list[float], load: dict, idle_median: float, args) -> dict:
    """One mix's window: its micro-batch median against the idle one, and its answers."""
    median = statistics.median(seconds) if seconds else float("nan")
    return {
        "mix": load.get("mix"),
        "load_batches": len(seconds),
        "load_median_s": round(median, 3),
        "ratio": round(median / idle_median, 2),
        "answers": load.get("answers", 0),
        "answers_per_s": round(load.get("answers", 0) / args.seconds, 1),
        "statuses": load.get("statuses", {}),
        "answer_p50_s": load.get("p50_s"),
        "answer_p99_s": load.get("p99_s"),
        "server_errors": load.get("server_errors", 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=5, help="micro-batches before the first window")
    parser.add_argument("--max-batches", type=int, default=1000)
    parser.add_argument(
        "--conf", action="append", default=[], help="KEY=VALUE of the job's settings (e.g. coordinator.api_max_rate=0)"
    )
    parser.add_argument("--workdir", help="where the table goes (default: a new temporary folder, removed after)")
    parser.add_argument("--out", default=str(HERE / "results" / f"api-{date.today().isoformat()}.json"))
    args = parser.parse_args()
    result = run(args)
    if not args.workdir:
        shutil.rmtree(result.pop("workdir"), ignore_errors=True)
    print(f"micro-batch median idle {result['idle_median_s']} s; goal <= 1.3x under {args.clients} clients, each mix")
    for name, mix in result["mixes"].items():
        print(
            f"  {name}: {mix['load_median_s']} s ({mix['ratio']}x); answers {mix['answers']} "
            f"({mix['answers_per_s']}/s) {mix['statuses']}, p50 {mix['answer_p50_s']} s p99 {mix['answer_p99_s']} s; "
            f"5xx {mix['server_errors']}"
        )
    print(f"table verified: {result['verified']}")
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
