"""The ``laketide`` command line: run the job, serve the API, inspect a table and change it.

Reads go through ``table.inspect`` (``cli/inspect.py``), changes through ``Operations``
(``cli/changes.py``, ``cli/services.py``), and every answer through ``cli/output.py``.

Exit codes (``cli.output.EXIT_CODES``): 0 done, 1 failed, 2 bad usage or configuration, 3 not found,
4 refused (a guarantee, a held lease, a rejected token), 5 the running job lost its lease (its supervisor
restarts it: the new run takes a new epoch and recovers), 6 a server it needs cannot be reached (try again).
"""

from __future__ import annotations

import faulthandler
import os

# The job's processes allocate Arrow memory with the C library's malloc, unless told otherwise. Set before pyarrow
# is first imported, which reads it then; a Spark job's workers are told the same (``spark.session.WANTED``), and a
# job started in-process takes it for its driver (``spark.session._use_driver_pool``, which has the measurements).
# Under pyarrow's default mimalloc the driver of a generator job of 2,000-row micro-batches held 336 MB against 157,
# and its 50,000-row micro-batches took 0.55 to 0.59 s against 0.46 to 0.49.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

# the modules whose commands ``app`` holds: importing them registers them, in the order ``--help`` lists them
from laketide.cli import jobs

# isort: split
from laketide.cli import catalog, changes, inspect, services
from laketide.cli.apps import app

COMMANDS = (jobs, changes, inspect, services, catalog)


def main() -> None:
    # a crash in native code (Arrow, librdkafka, uvicorn's loop, the JVM's bridge) leaves every thread's Python stack
    # on stderr, not only an exit status
    faulthandler.enable(all_threads=True)
    app(prog_name="laketide")  # the same name under ``python -m laketide`` and spark-submit


if __name__ == "__main__":
    main()
