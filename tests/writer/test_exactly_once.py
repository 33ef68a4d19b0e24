"""The job killed at random points and restarted from its checkpoint still writes each batch once.

The table is merge-on-read with a compaction after every second deltacommit, so kills land on
deltacommits, on compactions scheduled right after them, and on the commits that follow. Kills
of copy-on-write jobs are ``test_chaos``'s.
"""

from __future__ import annotations

import os
import random
import subprocess

from readback import hudi_read, rows
from streaming import BATCHES, DATA_COLUMNS, PYTHON, RUNNER, expected_after, land_all

from laketide.table import Table

POINTS = ("begun", "written", "committed")
SETTINGS = ["table.type=MERGE_ON_READ", "compaction.delta_commits=2", "compaction.mode=inline"]


def schedule(seed: int) -> list[tuple[str, int]]:
    """One crash at each step (on a random batch) plus one more, in an order where each is reached.

    A kill "committed" falls after the commit but before Spark records the batch.
    """
    rng = random.Random(seed)
    picks = [(point, rng.randrange(len(BATCHES))) for point in POINTS]
    picks.append((rng.choice(POINTS), rng.randrange(len(BATCHES))))
    return sorted(set(picks), key=lambda p: (p[1], POINTS.index(p[0])))


def test_kill_and_restart_gives_the_expected_table(tmp_path):
    seed = int(os.environ.get("LAKETIDE_CRASH_SEED", "20261122"))
    land_all(tmp_path)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    crashes = 0
    for point, batch in schedule(seed):
        result = subprocess.run(
            [PYTHON, str(RUNNER), str(tmp_path), point, str(batch), *SETTINGS],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode in (0, 137), result.stderr[-3000:]
        crashes += result.returncode == 137
    final = subprocess.run(
        [PYTHON, str(RUNNER), str(tmp_path), "-", "0", *SETTINGS], env=env, capture_output=True, text=True, timeout=300
    )
    assert final.returncode == 0, final.stderr[-3000:]
    assert crashes == len(schedule(seed)), f"seed {seed}: the crash schedule should kill the job at least twice"

    table = hudi_read(tmp_path / "table")
    assert rows(table, "id", DATA_COLUMNS) == expected_after(BATCHES), f"seed {seed}"
    assert len(set(table["_hoodie_record_key"].to_pylist())) == table.num_rows
    timeline = Table.open(str(tmp_path / "table")).timeline
    assert timeline.pending() == []
    deltas = [c for c in timeline.completed_writes() if c.action == "deltacommit"]
    assert len(deltas) < len(timeline.completed_writes()), "a compaction ran"
    batch_ids = [timeline.commit_metadata(c).extra_metadata["laketide.batch.id"] for c in deltas]
    assert sorted(batch_ids) == [str(b) for b in range(len(BATCHES))], f"seed {seed}: each batch committed exactly once"
