"""What the benchmarks measure besides time: the peak memory of this process and its children; and a
settled disk before each measured job (``settle_disk``).

The sampling runs in a process of its own: a sampling thread in the measured process took its GIL
for a few milliseconds every sample (psutil reads every process's ``/proc`` entry to find the
children), which stalled the measured engine's own Python threads.
"""

from __future__ import annotations

import os
import subprocess
import sys

import psutil


def settle_disk() -> None:
    """Write back what earlier steps left in the page cache before a measured job starts. With 1.5 GB
    waiting to be written, creating a file took 0.8 ms here against 0.03 ms on a settled disk: without
    this, a job paid for the writeback of the landing files or of the engine that ran before it."""
    os.sync()


def tree_rss(pid: int) -> int:
    """The RSS of process ``pid`` and all its descendants (Spark's JVM and Python workers)."""
    me = psutil.Process(pid)
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total


def _sample_until_stdin_closes(pid: int, interval: float) -> None:
    """The sampler process: polls ``pid``'s tree until its stdin closes, then prints the peak."""
    import selectors

    peak = 0
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin, selectors.EVENT_READ)
    while True:
        try:
            peak = max(peak, tree_rss(pid))
        except psutil.Error:
            break
        if selector.select(interval) and not sys.stdin.buffer.read1(1024):
            break
    print(peak, flush=True)


class PeakRss:
    """The peak RSS (``peak``, bytes) of process ``pid`` (this one unless given) and its children while the block
    runs, sampled every ``interval`` seconds."""

    def __init__(self, interval: float = 0.2, pid: int | None = None):
        self.interval, self.peak, self.pid = interval, 0, pid or os.getpid()

    def __enter__(self):
        self._sampler = subprocess.Popen(
            [sys.executable, __file__, str(self.pid), str(self.interval)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.peak = self._now()
        return self

    def _now(self) -> int:
        try:
            return tree_rss(self.pid)
        except psutil.Error:  # the process has ended
            return 0

    def __exit__(self, *exc):
        out, _ = self._sampler.communicate(timeout=60)
        self.peak = max(self.peak, int(out.strip() or 0), self._now())
        return False


if __name__ == "__main__":
    _sample_until_stdin_closes(int(sys.argv[1]), float(sys.argv[2]))
