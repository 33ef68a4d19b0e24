"""A write task that fails after writing a file is retried by Spark: the markers list every file written,
and the commit keeps exactly one base file per file group (Hudi's marker reconciliation)."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter

import pytest
from fixture_tables import SUPPORT
from readback import hudi_read, rows
from streaming import BATCHES, DATA_COLUMNS, PYTHON, expected_after, land_all

from laketide.table import Table
from laketide.table.format.files import BaseFile


@pytest.mark.parametrize("operation, batches", [("upsert", BATCHES[:2]), ("bulk_insert", BATCHES[:1])])
def test_a_retried_write_task_leaves_one_file_per_group(tmp_path, operation, batches):
    land_all(tmp_path, batches)
    out = tmp_path / "seen.json"
    env = {
        **os.environ,
        "LAKETIDE_TEST_FAIL_FIRST_WRITE": "1",
        "PYTHONPATH": os.pathsep.join([str(SUPPORT / "failing_task"), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [PYTHON, str(SUPPORT / "retry_job.py"), str(tmp_path), str(out), operation],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "injected failure of task 0" in result.stderr, "the first attempt failed"
    seen = json.loads(out.read_text())
    assert len(seen) == len(batches)
    table = Table.open(str(tmp_path / "table"))
    for instant, at_write in seen.items():
        assert at_write["marked"] == at_write["files"], "every file written, by either attempt, has its marker"
        groups = Counter(BaseFile.parse(*p.rsplit("/", 1)).file_id for p in at_write["files"])
        assert max(groups.values()) == 2, (
            "the failed attempt's file and the retry's are both on storage before the commit"
        )
        kept = [e.path for e in table.io.walk() if e.name.endswith(f"_{instant}.parquet")]
        kept_groups = Counter(BaseFile.parse(*p.rsplit("/", 1)).file_id for p in kept)
        assert set(kept_groups.values()) == {1} and set(kept_groups) == set(groups), (
            "one base file per group after the commit"
        )
    assert not table.io.exists(".hoodie/.temp") or not list(table.io.list_dir(".hoodie/.temp"))
    assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after(batches)
