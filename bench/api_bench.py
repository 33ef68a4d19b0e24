"""What the coordinator API costs the writer that serves it: micro-batch seconds idle and under N clients.

One streaming job (`laketide`'s own generator, 20,000-row micro-batches every second, merge-on-read on
local disk, the API on) runs three windows back to back: idle, then N clients asking flat out
(``bench/api_load.py``, its own process, sharing this machine's cores), then idle again. The
micro-batch median under load is compared with the median of the two idle windows (the goal: at most
1.3x), and the load's answers are counted by status (no 5xx) with their p50/p99. The table is then read
by hudi-rs and compared with the generator's model. There is no peer: this measures the writer against
itself. Results go to ``bench/results/api-<date>.json``.

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
from datetime import date
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

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
            for name in ("idle", "load", "idle again"):
                print(f"{name}: {args.seconds:.0f} s", flush=True)
                windows.start(name)
                if name == "load":
                    load.update(_load(address, args.clients, args.seconds, workdir))
                else:
                    time.sleep(args.seconds)
            windows.start(None)
        finally:
            job.stop()

    started = time.monotonic()
    run_service(config, on_ready=on_ready)
    return _result(args, windows, load, workdir, config, GeneratorSpec, time.monotonic() - started)


def _load(address: str, clients: int, seconds: float, workdir: Path) -> dict:
    out = workdir / "load.json"
    subprocess.run(
        [
            sys.executable,
            str(HERE / "api_load.py"),
            address,
            "--clients",
            str(clients),
            "--seconds",
            str(seconds),
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
    loaded = windows.seconds.get("load", [])
    idle_median, load_median = statistics.median(idle), statistics.median(loaded)
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
        "load_batches": len(loaded),
        "idle_median_s": round(idle_median, 3),
        "load_median_s": round(load_median, 3),
        "ratio": round(load_median / idle_median, 2),
        "goal_ratio": 1.3,
        "answers": load.get("answers"),
        "answers_per_s": round(load.get("answers", 0) / args.seconds, 1),
        "statuses": load.get("statuses"),
        "answer_p50_s": load.get("p50_s"),
        "answer_p99_s": load.get("p99_s"),
        "server_errors": load.get("server_errors"),
        "verified": verified,
        "seconds": round(took),
        "settings": args.conf,
        "cpus": os.cpu_count(),
        "workdir": str(workdir),
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
    print(
        f"micro-batch median: idle {result['idle_median_s']} s, under {args.clients} clients "
        f"{result['load_median_s']} s "
        f"({result['ratio']}x; goal <= 1.3x); answers {result['answers']} ({result['answers_per_s']}/s) "
        f"{result['statuses']}, "
        f"p50 {result['answer_p50_s']} s p99 {result['answer_p99_s']} s; 5xx {result['server_errors']}; table "
        f"verified: {result['verified']}"
    )
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
