"""What the coordinator API costs the writer that serves it: micro-batch seconds idle and under N clients.

One streaming job (`laketide`'s own generator, 20,000-row micro-batches every second, merge-on-read on
local disk, the API on) runs windows in rounds: idle, then N clients asking flat out (``bench/api_load.py``,
its own process) with each of its mixes (``panels``: the dashboard's panels and the scripts' routes;
``dashboard``: whole dashboard pages and the instants in turn), and idle once more at the end. A
micro-batch grows slower as the table grows, so the rounds interleave load and quiet, the mixes' order is
turned round each round, and each window under load is held against the idle median drawn between the idle
windows before and after it, by its place between them. A mix's ratio is the mean of its rounds' (the goal:
at most 1.3x, for every mix); its answers are counted by status (no 5xx) with their p50/p99, and the CPU
the job's API threads spent is read from ``/proc``.

The clients stand for browsers and scripts on other machines, so their process runs at the lowest CPU
priority: on this machine's two cores their own work (about a fifth of a core for 32 clients) is taken from
the time the job leaves idle, not from its micro-batches. What they ask of the server is the same: their
answers per second and CPU seconds are reported beside each mix.

The table is then read by hudi-rs and compared with the generator's model. There is no peer: this measures
the writer against itself. Results go to ``bench/results/api-<date>.json``.

    python bench/api_bench.py                          # 32 clients, 2 rounds of 30 s windows
    python bench/api_bench.py --clients 8 --seconds 20 --rounds 1
"""

from __future__ import annotations

import argparse
import itertools
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
    """Micro-batch seconds by window (its mix, or ``idle``, and its round); the observer runs on the job's
    micro-batch thread, the bench reads from its own, so the current window and the lists are guarded by
    ``lock``."""

    def __init__(self, plan: list[tuple[str, int]]):
        self.plan = plan  # the windows, in the order they run
        self.lock = threading.Lock()
        self.current: tuple[str, int] | None = None
        self.seconds: dict[tuple[str, int], list[float]] = {}
        self.api_cpu: dict[tuple[str, int], float] = {}  # written by the bench's thread only
        self.batches = 0

    def observe(self, report) -> None:
        if report.skipped or report.empty:
            return
        with self.lock:
            self.batches += 1
            if self.current is not None:
                self.seconds.setdefault(self.current, []).append(report.seconds)

    def start(self, window: tuple[str, int] | None) -> None:
        with self.lock:
            self.current = window

    def of(self, name: str) -> list[float]:
        with self.lock:
            return [s for (window, _), seconds in self.seconds.items() if window == name for s in seconds]


def run(args) -> dict:
    from laketide.cli.jobs import embedded_defaults
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
    windows, load = Windows(_plan(args.rounds)), {name: [] for name in MIXES}

    def on_ready(job) -> None:
        job.writer.observers.append(windows.observe)
        threading.Thread(target=drive, args=(job,), daemon=True).start()

    def drive(job) -> None:
        try:
            address = job.coordinator.lease.current_holder().api_address
            while windows.batches < args.warmup:
                time.sleep(0.5)
            for name, r in windows.plan:
                print(f"round {r + 1}, {name}: {args.seconds:.0f} s", flush=True)
                windows.start((name, r))
                cpu = _api_cpu()
                if name in MIXES:
                    load[name].append(_load(address, args.clients, args.seconds, workdir, name))
                else:
                    time.sleep(args.seconds)
                windows.api_cpu[(name, r)] = _api_cpu() - cpu
            windows.start(None)
        finally:
            job.stop()

    started = time.monotonic()
    run_service(config, on_ready=on_ready)
    return _result(args, windows, load, workdir, config, GeneratorSpec, time.monotonic() - started)


def _api_cpu() -> float:
    """CPU seconds this process's API threads have used: uvicorn's loop (``laketide-api``) and the threads that
    answer its routes (AnyIO's)."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = 0
    for thread in threading.enumerate():
        if not thread.name.startswith(("laketide-api", "AnyIO worker")) or thread.native_id is None:
            continue
        try:
            fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a thread that ended meanwhile
            continue
        used += int(fields[11]) + int(fields[12])  # utime, stime
    return used / ticks


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
            "--nice",
            "19",
            "--out",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return json.loads(out.read_text())


def _result(args, windows: Windows, load: dict[str, list[dict]], workdir, config, spec_class, took: float) -> dict:
    import pyarrow as pa
    from hudi import HudiTableBuilder

    from laketide.table import Table

    idle = windows.of("idle")
    idle_median = statistics.median(idle)
    against = _idle_beside(windows)
    mixes = {name: _mix(windows, name, against, load[name], args) for name in MIXES}
    for name, mix in mixes.items():
        spent = [cpu for (window, _), cpu in windows.api_cpu.items() if window == name]
        mix["api_cpu_per_s"] = round(sum(spent) / (args.seconds * len(spent)), 3) if spent else None
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
        "rounds": args.rounds,
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
        # each window's micro-batch seconds, in the order they ran
        "windows": {f"{name} {r + 1}": [round(x, 3) for x in got] for (name, r), got in windows.seconds.items()},
        "cpus": os.cpu_count(),
        "workdir": str(workdir),
    }


def _plan(rounds: int) -> list[tuple[str, int]]:
    """Idle, then each mix, in rounds, the mixes' order turned round each time (the later a window, the
    larger the table it writes to), and idle once more at the end."""
    plan = []
    for r in range(rounds):
        plan += [("idle", r)] + [(name, r) for name in (MIXES if r % 2 == 0 else list(reversed(MIXES)))]
    return [*plan, ("idle", rounds)]


def _median(seconds: list[float]) -> float:
    return statistics.median(seconds) if seconds else float("nan")


def _idle_beside(windows: Windows) -> dict[tuple[str, int], float]:
    """For each window under load, the idle median it is held against: drawn between the idle windows before
    and after it by its place between them, since a micro-batch grows slower as the table grows."""
    plan, against = windows.plan, {}
    idle_at = [at for at, (name, _) in enumerate(plan) if name == "idle"]
    for before, after in itertools.pairwise(idle_at):
        start, end = _median(windows.seconds.get(plan[before], [])), _median(windows.seconds.get(plan[after], []))
        for at in range(before + 1, after):
            against[plan[at]] = start + (end - start) * (at - before) / (after - before)
    return against


def _mix(windows: Windows, name: str, against: dict, rounds: list[dict], args) -> dict:
    """One mix over its rounds: each round's micro-batch median against the idle one beside it (the mix's
    ratio: their mean), and its answers."""
    ratios = [
        _median(windows.seconds.get(window, [])) / against[window] for window in windows.plan if window[0] == name
    ]
    answers = sum(r.get("answers", 0) for r in rounds)
    return {
        "mix": name,
        "load_batches": len(windows.of(name)),
        "load_median_s": round(_median(windows.of(name)), 3),
        "ratio": round(statistics.mean(ratios), 2),
        "round_ratios": [round(r, 2) for r in ratios],
        "answers": answers,
        "answers_per_s": round(answers / (args.seconds * max(len(rounds), 1)), 1),
        "statuses": dict(sum((Counter(r.get("statuses", {})) for r in rounds), Counter())),
        "answer_p50_s": max((r["p50_s"] for r in rounds), default=None),
        "answer_p99_s": max((r["p99_s"] for r in rounds), default=None),
        "server_errors": sum(r.get("server_errors", 0) for r in rounds),
        "client_cpu_s": round(sum(r.get("client_cpu_s", 0) for r in rounds), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=30, help="each window's length")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of an idle window and one of each mix")
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
            f"5xx {mix['server_errors']}; the API's CPU {mix['api_cpu_per_s']} s a second, "
            f"the clients' {mix['client_cpu_s']} s"
        )
    print(f"table verified: {result['verified']}")
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
