"""Run a job of a whole database, dying abruptly once some of its tables committed a micro-batch.

    python run_database_job.py NTH KEY=VALUE ...

The process exits with status 137 (as if killed: no cleanup, no rollback, Spark's commit log not written) right
after the NTH table committed the first micro-batch this process writes; KEY=VALUE pairs are the job's settings,
as ``laketide run --conf`` takes them.
"""

import logging
import os
import sys

from laketide.config import load_config
from laketide.spark.job import run


def main() -> None:
    nth = int(sys.argv[1])
    config = load_config(overrides=sys.argv[2:])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    first: list[int] = []
    committed: list[int] = []

    def on_step(point: str, batch_id: int) -> None:
        if point == "begun" and not first:
            first.append(batch_id)
        if point == "committed" and first and batch_id == first[0]:
            committed.append(batch_id)
            if len(committed) == nth:
                os._exit(137)

    run(config, on_step)


if __name__ == "__main__":
    main()
