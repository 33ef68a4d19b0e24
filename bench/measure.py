"""What the benchmarks measure besides time: the peak memory of this process and its children; and a
settled disk before each measured job (``settle_disk``).

Memory is summed over the process tree two ways. RSS counts a page once for every process that maps it: the
Python workers Spark forks from its daemon share their interpreter's pages with it, and two tasks that
memory-map the same exchange file each count all of it. PSS (Linux's proportional set size) splits a shared
page among the processes that map it, so the sum is what the tree holds. One process's PSS is about its RSS.

The sampling runs in a process of its own: a sampling thread in the measured process took its GIL
for a few milliseconds every sample (psutil reads every process's ``/proc`` entry to find the
children), which stalled the measured engine's own Python threads.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import psutil


def settle_disk() -> None:
    """Write back what earlier steps left in the page cache before a measured job starts. With 1.5 GB
    waiting to be written, creating a file took 0.8 ms here against 0.03 ms on a settled disk: without
    this, a job paid for the writeback of the landing files or of the engine that ran before it."""
    os.sync()


def tree_memory(pid: int) -> tuple[int, int]:
    """The summed RSS and PSS of process ``pid`` and all its descendants (Spark's JVM and Python workers), in bytes."""
    each = process_memory(pid)
    return sum(rss for _, rss, _ in each), sum(pss for _, _, pss in each)


def process_memory(pid: int) -> list[tuple[psutil.Process, int, int]]:
    """Process ``pid`` and each of its descendants with its RSS and PSS in bytes; one that ended meanwhile is left
    out."""
    me = psutil.Process(pid)
    out = [(me, me.memory_info().rss, _pss(pid))]
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error, OSError):
            out.append((child, child.memory_info().rss, _pss(child.pid)))
    return out


def cpu_seconds(pid: int) -> float:
    """The CPU seconds (user and system) process ``pid`` and its living descendants have used; 0 once it ended."""
    try:
        me = psutil.Process(pid)
        processes = [me, *me.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def _pss(pid: int) -> int:
    """A process's PSS from ``/proc/<pid>/smaps_rollup`` (a read of a few microseconds, unlike the whole ``smaps``)."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def _sample_until_stdin_closes(pid: int, interval: float) -> None:
    """The sampler process: polls ``pid``'s tree until its stdin closes, then prints the peak RSS and PSS."""
    import selectors

    peak = peak_pss = 0
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin, selectors.EVENT_READ)
    while True:
        try:
            rss, pss = tree_memory(pid)
        except (psutil.Error, OSError):
            break
        peak, peak_pss = max(peak, rss), max(peak_pss, pss)
        if selector.select(interval) and not sys.stdin.buffer.read1(1024):
            break
    print(peak, peak_pss, flush=True)


class PeakRss:
    """The peak summed RSS (``peak``, bytes) and PSS (``peak_pss``) of process ``pid`` (this one unless given) and
    its children while the block runs, sampled every ``interval`` seconds."""

    def __init__(self, interval: float = 0.2, pid: int | None = None):
        self.interval, self.peak, self.peak_pss, self.pid = interval, 0, 0, pid or os.getpid()

    def __enter__(self):
        self._sampler = subprocess.Popen(
            [sys.executable, __file__, str(self.pid), str(self.interval)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.peak, self.peak_pss = self._now()
        return self

    def _now(self) -> tuple[int, int]:
        try:
            return tree_memory(self.pid)
        except (psutil.Error, OSError):  # the process has ended
            return 0, 0

    def __exit__(self, *exc):
        out, _ = self._sampler.communicate(timeout=60)
        sampled = [int(n) for n in out.split()] or [0, 0]
        now = self._now()
        self.peak = max(self.peak, sampled[0], now[0])
        self.peak_pss = max(self.peak_pss, sampled[-1], now[1])
        return False


if __name__ == "__main__":
    _sample_until_stdin_closes(int(sys.argv[1]), float(sys.argv[2]))
