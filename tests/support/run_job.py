"""Run the streaming job in its own process; die abruptly at one step of one batch if asked.

    python run_job.py ROOT [POINT BATCH [KEY=VALUE ...]]

POINT is "begun", "written" or "committed", or a compaction step
("compaction-closing", "compaction-written", "compaction-carried") with BATCH -1.
The process exits with status 137 at that point, as if killed: no cleanup, no
rollback, Spark's commit log not written. "freeze:POINT" stops the process there
instead (SIGSTOP, as a long pause would), the first time it gets there; SIGCONT
wakes it. KEY=VALUE pairs override the job's settings.
"""

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from streaming import job_config

from laketide.spark.job import run


def main() -> None:
    root = Path(sys.argv[1])
    kill = (sys.argv[2], int(sys.argv[3])) if len(sys.argv) > 3 and sys.argv[2] != "-" else None
    freeze = kill is not None and kill[0].startswith("freeze:")
    if freeze:
        kill = (kill[0].removeprefix("freeze:"), kill[1])
    overrides = dict(arg.split("=", 1) for arg in sys.argv[4:])
    frozen = []

    def on_step(point: str, batch_id: int) -> None:
        if (point, batch_id) != kill:
            return
        if not freeze:
            os._exit(137)
        if not frozen:
            frozen.append(point)
            os.kill(os.getpid(), signal.SIGSTOP)

    run(job_config(root, **{k.replace(".", "__"): v for k, v in overrides.items()}), on_step)


if __name__ == "__main__":
    main()
