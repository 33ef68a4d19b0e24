"""The bucket writer's merge memory does not grow with the file group: 1x and 8x in fresh processes."""

from __future__ import annotations

import json
import subprocess
import sys

from fixture_tables import REPO

SCRIPT = REPO / "bench" / "merge_memory.py"


def test_peak_rss_of_8x_file_group_stays_close_to_1x(tmp_path):
    out = tmp_path / "merge_memory.json"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--rows", "250000", "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    result = json.loads(out.read_text())
    small, large = result["results"]
    assert large["rows"] == 8 * small["rows"] >= 2_000_000
    assert large["updates"] == small["updates"] == result["updates"]
    # 8x the rows, not 8x the memory: allow the fixed cost of bigger parquet pages and bloom rows
    assert result["rss_ratio_8x_1x"] < 1.4, result
