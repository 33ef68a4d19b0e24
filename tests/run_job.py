"""Run the streaming job in its own process; die abruptly at one step of one batch if asked.

    python run_job.py ROOT [POINT BATCH]

POINT is "begun", "written" or "committed". The process exits with status 137
at that point, as if killed: no cleanup, no rollback, Spark's commit log not written.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from laketide.writer.job import run  # noqa: E402
from streaming import job_config  # noqa: E402


def main() -> None:
    root = Path(sys.argv[1])
    kill = (sys.argv[2], int(sys.argv[3])) if len(sys.argv) > 3 else None

    def on_step(point: str, batch_id: int) -> None:
        if (point, batch_id) == kill:
            os._exit(137)

    run(job_config(root), on_step)


if __name__ == "__main__":
    main()
