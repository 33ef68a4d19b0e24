"""Run the job in its own process with task retries on, recording the markers and data files of each
instant at the point its files are written (before the commit).

    python retry_job.py ROOT OUT.json [OPERATION]
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from streaming import job_config

from laketide.spark.job import run
from laketide.table import Table
from laketide.table.format.markers import WriteMarkers


def main() -> None:
    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    operation = sys.argv[3] if len(sys.argv) > 3 else "upsert"
    seen = {}

    def on_step(point: str, batch_id: int) -> None:
        if point != "written":
            return
        table = Table.open(str(root / "table"))
        (instant,) = [i.timestamp for i in table.timeline.pending()]
        files = [
            e.path
            for e in table.io.walk()
            if e.name.endswith(".parquet") and instant in e.name and not e.path.startswith(".hoodie")
        ]
        seen[instant] = {"marked": sorted(WriteMarkers(table.io, instant).data_paths()), "files": sorted(files)}

    # Spark tasks, not the driver, so that Spark retries the failed one
    run(job_config(root, spark__master="local[2,4]", write__operation=operation, write__driver_batch_bytes=0), on_step)
    out.write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
