"""Chaos bench: `laketide run` with a ZooKeeper lease under kills, ZooKeeper restarts, session expiry and freezes.

Every variant feeds landing files while it runs, then drains them with one
more run and compares the table, read by hudi-rs, with the model of every file
landed. It prints rows lost, duplicated and wrong, data files left over from
instants that never completed, pending instants and epoch regressions, and
writes the same as JSON.

    .venv/bin/python bench/chaos.py [--cycles 20] [--variants kill,zk-restart,session-expiry,sigstop]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from chaoslib import (
    Feeder,
    Job,
    ZooKeeperServer,
    completed_count,
    has_inflight,
    job_args,
    verdict,
    wait_until,
)

SESSION_TIMEOUT = 8
VARIANTS = ("kill", "zk-restart", "session-expiry", "sigstop")


def _args(root: Path, zookeeper: str, trigger: str = "1 second") -> list[str]:
    extra = [
        f"coordinator.zookeeper_session_timeout={SESSION_TIMEOUT}",
        "coordinator.lease_wait=120",
        "source.max_files_per_trigger=4",
    ]
    return job_args(root, "zookeeper", zookeeper, trigger=trigger, extra=extra)


class Supervisor:
    """Restarts the job when it exits, as the systemd unit in deploy/ does (Restart=on-failure)."""

    def __init__(self, root: Path, zookeeper: str):
        self.root, self.zookeeper = root, zookeeper
        self.job: Job | None = None
        self.exits: list[int] = []

    def ensure_running(self) -> Job:
        if self.job is None or not self.job.running():
            if self.job is not None:
                self.exits.append(self.job.proc.returncode)
            self.job = Job(_args(self.root, self.zookeeper), self.root / "job.log").start()
        return self.job

    def tick(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.ensure_running()
            time.sleep(0.2)

    def stop(self) -> None:
        if self.job is not None and self.job.running():
            self.job.signal(signal.SIGCONT)
            self.job.kill()


def kill(root: Path, zk: ZooKeeperServer, rng: random.Random, cycles: int) -> dict:
    for _ in range(cycles):
        job = Job(_args(root, zk.address), root / "job.log").start()
        time.sleep(rng.uniform(10, 35))
        job.kill()
    return {"kills": cycles}


def zk_restart(root: Path, zk: ZooKeeperServer, rng: random.Random, cycles: int) -> dict:
    supervisor = Supervisor(root, zk.address)
    job = supervisor.ensure_running()
    try:
        wait_until(lambda: completed_count(root) >= 1, 180, "a first commit")
        for _ in range(cycles):
            supervisor.tick(rng.uniform(3, 8))
            zk.stop()
            time.sleep(rng.uniform(0.5, SESSION_TIMEOUT * 0.4))
            zk.start()
        supervisor.tick(5)
        survived = supervisor.job is job and job.running()
    finally:
        supervisor.stop()
    return {"restarts": cycles, "job_survived_all": survived, "job_exits": supervisor.exits}


def session_expiry(root: Path, zk: ZooKeeperServer, rng: random.Random, cycles: int) -> dict:
    supervisor = Supervisor(root, zk.address)
    supervisor.ensure_running()
    try:
        wait_until(lambda: completed_count(root) >= 1, 180, "a first commit")
        for _ in range(cycles):
            supervisor.tick(rng.uniform(5, 15))
            zk.stop()
            time.sleep(SESSION_TIMEOUT * 2.5)
            zk.start()
        supervisor.tick(10)
    finally:
        supervisor.stop()
    return {"outages": cycles, "job_exits": supervisor.exits}


def sigstop(root: Path, zk: ZooKeeperServer, rng: random.Random, cycles: int) -> dict:
    exits = []
    holder = Job(_args(root, zk.address), root / "job-0.log").start()
    try:
        for n in range(cycles):
            wait_until(lambda: completed_count(root) >= 1, 180, "a commit")
            time.sleep(rng.uniform(1, 6))
            wait_until(lambda: has_inflight(root), 60, "a micro-batch in flight", poll=0.02)
            holder.signal(signal.SIGSTOP)
            successor = Job(_args(root, zk.address), root / f"job-{n + 1}.log").start()
            before = completed_count(root)
            wait_until(lambda before=before: completed_count(root) >= before + 1, 180, "the successor's commits")
            holder.signal(signal.SIGCONT)
            exits.append(holder.wait(120))
            holder = successor
    finally:
        holder.signal(signal.SIGCONT)
        holder.kill()
    return {"freezes": cycles, "frozen_holder_exits": exits}


def log_counts(root: Path) -> dict:
    """What the jobs' logs say they cleaned up: instants rolled back at takeover, late files swept."""
    text = "".join(p.read_text(errors="replace") for p in root.glob("*.log"))
    return {
        "rolled_back_at_start": len(re.findall(r"left by a previous writer", text)),
        "late_files_swept": sum(int(n) for n in re.findall(r"swept (\d+) files written late", text)),
    }


def run_variant(name: str, cycles: int, seed: int, workdir: Path) -> dict:
    root = workdir / name
    root.mkdir(parents=True)
    zk = ZooKeeperServer(root / "zk").start()
    rng = random.Random(seed)
    feeder = Feeder(root, seed, interval=(1.0, 4.0))
    started = time.monotonic()
    feeder.start()
    try:
        action = {"kill": kill, "zk-restart": zk_restart, "session-expiry": session_expiry, "sigstop": sigstop}[name]
        details = action(root, zk, rng, cycles)
        feeder.stop()
        drained = Job(_args(root, zk.address, "available-now"), root / "drain.log").start().wait(900)
        result = verdict(root, feeder.expected())
    finally:
        feeder.stopped.set()
        zk.stop()
    return {
        "variant": name,
        "cycles": cycles,
        "files_landed": len(feeder.files),
        "commits": completed_count(root),
        "drain_exit": drained,
        **asdict(result),
        "files_left_over": len(result.files_left_over),
        "pending": len(result.pending),
        "clean": result.clean and drained == 0,
        "seconds": round(time.monotonic() - started, 1),
        "details": {**details, **log_counts(root)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20, help="kill cycles; the other variants run a quarter as many")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("LAKETIDE_CHAOS_SEED", "20261123")))
    parser.add_argument("--out", default=str(Path(__file__).with_name("results") / "chaos.json"))
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    results = []
    with tempfile.TemporaryDirectory(prefix="laketide-chaos-") as workdir:
        for name in args.variants.split(","):
            cycles = args.cycles if name == "kill" else max(2, args.cycles // 4)
            print(f"running {name} ({cycles} cycles) ...", flush=True)
            results.append(run_variant(name, cycles, args.seed, Path(workdir)))
            print(json.dumps(results[-1]), flush=True)
    header = [
        "variant",
        "cycles",
        "files_landed",
        "commits",
        "expected_rows",
        "rows_lost",
        "rows_duplicated",
        "rows_wrong",
        "files_left_over",
        "pending",
        "epoch_regressions",
        "clean",
        "seconds",
    ]
    extra = ["rolled_back_at_start", "late_files_swept"]
    print("\n| " + " | ".join(header + extra) + " |")
    print("|" + "---|" * len(header + extra))
    for r in results:
        print("| " + " | ".join([str(r[h]) for h in header] + [str(r["details"][h]) for h in extra]) + " |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"seed": args.seed, "session_timeout": SESSION_TIMEOUT, "results": results}, indent=2)
    )
    print(f"\nwritten to {args.out}")
    if not all(r["clean"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
