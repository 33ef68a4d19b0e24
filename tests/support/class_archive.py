"""Archive the JVM classes a `laketide run` loads (Java's class-data sharing), for the suite's Spark JVMs.

The suite starts a Spark driver JVM a few hundred times, and each spends seconds loading Spark's classes
from its jars. ``make test`` runs this once per virtual environment: one small job on the generator
source, its JVM started with ``-XX:ArchiveClassesAtExit``. ``conftest.py`` then starts every driver JVM
with ``-XX:SharedArchiveFile`` (through ``SPARK_SUBMIT_OPTS``), which maps those classes in ready-made:
a job starts about 3.5 s sooner. Only start-up changes; a JVM whose classpath or JDK no longer matches
the archive ignores it.

    python tests/support/class_archive.py .venv/spark-classes.jsa
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def main(archive: Path) -> None:
    laketide = Path(sys.executable).parent / "laketide"
    with tempfile.TemporaryDirectory(prefix="laketide-class-archive-") as root:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={archive}"}
        settings = [
            f"table.path={root}/table",
            f"stream.checkpoint={root}/checkpoint",
            "source.generator.batches=2",
            "source.generator.rows_per_batch=100",
        ]
        subprocess.run(
            [str(laketide), "run", *(arg for s in settings for arg in ("--conf", s))],
            env=env,
            check=True,
            capture_output=True,
        )
    if not archive.exists():
        sys.exit(f"the JVM wrote no class archive at {archive}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
