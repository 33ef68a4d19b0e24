"""A damaged table is refused or recovered as Apache Hudi would, never "repaired" from a job's settings.

Each case builds a table with commits, damages one file, lands more changes and runs `laketide run` in a
subprocess: the job either recovers as Hudi's writers do (``hoodie.properties`` from its
backup) or exits naming the file and the way out, and nothing is written after the finding.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opslib import OpsTable, changes
from readback import hudi_read, rows
from streaming import DATA_COLUMNS

from laketide.table import Table
from laketide.writer.job.state import JOB_STATE, JobState


def _table_with_commits(tmp_path: Path, **settings: str) -> OpsTable:
    ops = OpsTable(tmp_path, settings)
    ops.land([changes(n) for n in range(3)])
    ops.prepare()
    return ops


def _tree(path: Path) -> dict[str, int]:
    """Every file of the table but the lease's own, by size: what a run that writes nothing leaves as it was."""
    return {
        str(p.relative_to(path)): p.stat().st_size
        for p in path.rglob("*")
        if p.is_file() and ".laketide/lease" not in str(p)
    }


def _written_after(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """Files a stopped run added or changed other than at its start (its lease epoch, its last word in
    ``job.json``) and in the instant it began before the finding (its requested and inflight files, data files
    and index runs, which readers skip and the next start rolls back)."""
    begun = set(_instants(after)) - set(_instants(before))
    changed = [p for p in after if before.get(p) != after[p]]
    return [
        p
        for p in changed
        if "/.laketide/epochs/" not in p and not p.endswith(JOB_STATE) and not any(i in p for i in begun)
    ]


def test_a_lost_hoodie_properties_is_refused_with_the_way_out(tmp_path):
    ops = _table_with_commits(tmp_path)
    (ops.path / ".hoodie" / "hoodie.properties").unlink()
    ops.land([changes(3)])
    before = _tree(ops.path)
    done = ops.run(expect_code=1)
    assert "hoodie.properties is damaged" in done.stderr and "Put back the file" in done.stderr, done.stderr[-2000:]
    assert _tree(ops.path) == before, "nothing was written: no new hoodie.properties made up from the job's settings"


def test_hoodie_properties_is_recovered_from_its_backup_as_hudi_recovers_it(tmp_path):
    """A change of the properties cut short between deleting the file and writing it anew
    (``HoodieTableConfig.modify``) leaves the backup: readers read it, and the next writer puts it back."""
    ops = _table_with_commits(tmp_path)
    hoodie = ops.path / ".hoodie"
    (hoodie / "hoodie.properties").rename(hoodie / "hoodie.properties.backup")
    assert Table.open(str(ops.path)).config.name == "orders", "readers fall back to the backup"
    ops.land([changes(3)])
    done = ops.run()
    assert "recovered it from .hoodie/hoodie.properties.backup" in done.stderr
    assert (hoodie / "hoodie.properties").exists() and not (hoodie / "hoodie.properties.backup").exists()
    assert rows(hudi_read(ops.path), "id", DATA_COLUMNS) == ops.model.expected()


@pytest.mark.parametrize(
    "table_type, driver_batch_bytes", [("COPY_ON_WRITE", "64MiB"), ("COPY_ON_WRITE", "0"), ("MERGE_ON_READ", "64MiB")]
)
def test_a_truncated_base_file_stops_the_job_naming_the_file(tmp_path, table_type, driver_batch_bytes):
    """On the driver and in Spark's tasks, where the finding reaches the driver as a task's error text."""
    settings = {
        "table.type": table_type,
        "compaction.mode": "inline",
        "compaction.delta_commits": "1",
        "write.driver_batch_bytes": driver_batch_bytes,
    }
    ops = _table_with_commits(tmp_path, **settings)
    table = Table.open(str(ops.path))
    victim = next(
        s.base_file for s in table.file_system_view().latest_slices() if s.base_file is not None and s.partition == "us"
    )
    path = ops.path / victim.path
    victim_size = path.stat().st_size
    path.write_bytes(path.read_bytes()[: victim_size // 2])
    ops.land([changes(3, keys=[k for k in range(40) if k % 3 == 0])])  # every key of the partition
    before = _tree(ops.path)
    done = ops.run(expect_code=1)
    assert f"{victim.path} is damaged" in done.stderr, done.stderr[-3000:]
    assert "roll back" in done.stderr and "restore a savepoint" in done.stderr
    assert "Traceback" not in done.stderr.split("error:")[-1], "the error is a sentence, not a traceback"
    newest_before = max(_instants(before))
    if table_type == "COPY_ON_WRITE":
        # the upsert merges the base file: found before the commit, and nothing is written after it
        assert _written_after(before, _tree(ops.path)) == []
        assert not [i for i in ops.timeline() if i["state"] == "COMPLETED" and i["instant"] > newest_before]
    else:
        # a deltacommit does not read base files: it stands, and the compaction after it stops at the file
        assert not [
            i
            for i in ops.timeline()
            if i["action"] == "commit" and i["state"] == "COMPLETED" and i["instant"] > newest_before
        ]
    assert path.stat().st_size == victim_size // 2, "the damaged file is left as it was found"
    last_word = JobState.read(table.io)  # what `laketide serve` and the dashboard show once the job is gone
    assert last_word.state == "failed" and victim.path in last_word.error


def _instants(tree: dict[str, int]) -> list[str]:
    return [Path(p).name.split(".")[0] for p in tree if p.startswith(".hoodie/") and Path(p).name[:1].isdigit()]


def test_garbage_in_the_newest_commit_stops_the_job_naming_the_file(tmp_path):
    ops = _table_with_commits(tmp_path)
    hoodie = ops.path / ".hoodie"
    newest = max(p for p in hoodie.glob("*.commit"))
    newest.write_text('{"partitionToWriteStats": 42, "garbage')
    ops.land([changes(3)])
    before = _tree(ops.path)
    done = ops.run(expect_code=1)
    assert f"{newest.name} is damaged" in done.stderr, done.stderr[-3000:]
    assert "Put back an intact copy" in done.stderr or "put back an intact copy" in done.stderr
    assert _tree(ops.path) == before, "nothing was written"
