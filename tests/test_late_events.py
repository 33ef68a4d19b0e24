"""Late events under event-time ordering: counted the same on both table types, and never written over a newer row.

Copy-on-write meets the stored row when it merges; merge-on-read reads the slice's key and ordering
columns only when a stored row can be newer (``LogWriter.drop_late``). Either way the micro-batch's log
line says how many were late, and its updates and deletes count only what changed.
"""

from __future__ import annotations

import re

import pytest

from conftest import hudi_read, rows
from opslib import OpsTable, region_of
from streaming import DATA_COLUMNS, row

LINE = re.compile(r"micro-batch (\d+): instant=\d+ records=(\d+) inserts=(\d+) updates=(\d+) deletes=(\d+) late=(\d+)")


def _r(key: int, ts: int, deleted: bool = False) -> dict:
    return row(key, ts, region=region_of(key), deleted=deleted)


BATCHES = [
    [_r(k, 10) for k in range(30)],
    # keys 0-9 updated; 10-14 late updates; 15-19 late deletes; 20-22 deleted
    [_r(k, 20) for k in range(10)] + [_r(k, 5) for k in range(10, 15)] + [_r(k, 5, True) for k in range(15, 20)] + [_r(k, 20, True) for k in range(20, 23)],
    # against rows the previous micro-batch stored (in log files, on merge-on-read): 0-4 late, 5-9 newer,
    # and 23 a tie, which goes to the incoming record
    [_r(k, 15) for k in range(5)] + [_r(k, 25) for k in range(5, 10)] + [_r(23, 10)],
    # every record of every group late: nothing to write but the counts
    [_r(k, 1) for k in range(24, 30)],
]
# (inserts, updates, deletes, late) of each micro-batch
COUNTS = [(30, 0, 0, 0), (0, 10, 3, 10), (0, 6, 0, 5), (0, 0, 0, 6)]


def _expected() -> list[dict]:
    stored: dict[int, dict] = {}
    for lines in BATCHES:
        for line in lines:
            current = stored.get(line["id"])
            if current is not None and current["ts"] > line["ts"]:
                continue
            stored[line["id"]] = line
    return [{c: stored[k][c] for c in DATA_COLUMNS} for k in sorted(stored) if not stored[k].get("_hoodie_is_deleted")]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_late_updates_and_deletes_are_counted_and_lose_to_the_stored_row(tmp_path, table_type):
    ops = OpsTable(tmp_path, {"table.type": table_type, "compaction.mode": "off"})
    ops.land(BATCHES)
    done = ops.run()
    counts = [tuple(int(g) for g in m.groups()[2:]) for m in LINE.finditer(done.stderr)]
    assert counts == COUNTS, done.stderr[-3000:]
    assert rows(hudi_read(ops.path), "id", DATA_COLUMNS) == _expected()
