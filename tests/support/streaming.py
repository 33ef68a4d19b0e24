"""Helpers for tests that run the real streaming job over a landing directory of JSON files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from laketide.config import JobConfig, load_config

SCHEMA_DDL = "id BIGINT, name STRING, amount DOUBLE, ts BIGINT, region STRING, _hoodie_is_deleted BOOLEAN"
DATA_COLUMNS = ["id", "name", "amount", "ts", "region"]


def job_config(root: Path, **overrides) -> JobConfig:
    settings = [
        f"table.path={root / 'table'}",
        "table.name=orders",
        'table.record_key=["id"]',
        'table.partition_by=["region"]',
        "table.ordering_field=ts",
        "source.format=json",
        f"source.path={root / 'landing'}",
        f"source.schema={SCHEMA_DDL}",
        "source.max_files_per_trigger=1",
        f"stream.checkpoint={root / 'checkpoint'}",
        "stream.trigger=available-now",
        "write.index_shards=2",
        "write.parallelism=2",
    ]
    settings += [f"{k.replace('__', '.')}={v}" for k, v in overrides.items()]
    return load_config(overrides=settings)


def land(root: Path, name: str, lines: list, mtime: float) -> None:
    """Drop one file into the landing directory; its mtime orders it among the others."""
    landing = root / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{name}"
    tmp.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    os.utime(tmp, (mtime, mtime))
    tmp.rename(landing / name)


class Model:
    """The expected table after each micro-batch: dedupe by highest ts, then later line; deletes drop.
    With ``event_time``, an incoming row older than the stored one (a late event) changes nothing."""

    def __init__(self, event_time: bool = False):
        self.rows: dict[int, dict] = {}
        self.event_time = event_time

    def apply(self, lines: list) -> None:
        best: dict[int, tuple[int, int, dict]] = {}
        for pos, line in enumerate(lines):
            if (
                not isinstance(line, dict)
                or line.get("id") is None
                or not isinstance(line.get("ts"), int)
                or line.get("region") in (".", "..")
            ):
                continue
            current = best.get(line["id"])
            if current is None or (line["ts"], pos) > current[:2]:
                best[line["id"]] = (line["ts"], pos, line)
        for key, (ts, _, line) in best.items():
            if self.event_time and key in self.rows and self.rows[key]["ts"] > ts:
                continue
            if line.get("_hoodie_is_deleted"):
                self.rows.pop(key, None)
            else:
                self.rows[key] = {c: line.get(c) for c in DATA_COLUMNS}

    def expected(self) -> list[dict]:
        return [self.rows[k] for k in sorted(self.rows)]


def row(i: int, ts: int, region: str | None = None, deleted: bool = False, **extra) -> dict:
    out = {
        "id": i,
        "name": f"n{i}-{ts}",
        "amount": round(i * 1.25 + ts, 2),
        "ts": ts,
        "region": region or ("us" if i % 2 else "eu"),
    }
    if deleted:
        out["_hoodie_is_deleted"] = True
    out.update(extra)
    return out


BATCHES = [
    [row(i, 1) for i in range(1, 31)],
    # updates, in-batch duplicates with out-of-order ordering values, deletes, bad rows
    [row(i, 2) for i in range(1, 11)]
    + [row(3, 5), row(3, 4), row(4, 3), row(4, 6), row(5, 9), row(5, 7)]
    + [row(20, 2, deleted=True), row(21, 2, deleted=True), row(999, 2, deleted=True)]
    + [
        {"id": None, "ts": 2, "region": "us", "name": "no key"},
        {"id": 77, "ts": "abc", "region": "us"},
        "{not json",
        {"id": 78, "ts": 2, "region": ".."},
    ]
    # stored: a '/' in a partition value is escaped into one directory (a%2Fb)
    + [row(79, 2, region="a/b")],
    [row(i, 3, region="apac") for i in range(100, 110)] + [row(6, 3), row(20, 4)],
]
BAD_ROWS = 4


# updates and a delete per micro-batch on 40 keys: with compaction.delta_commits = 2 every group compacts every other
# batch
COMPACTING_BATCHES = [[row(i, 1) for i in range(1, 41)]] + [
    [row(i, t) for i in range(1 + t, 20 + t)] + [row(30 + t, t, deleted=True)] for t in range(2, 8)
]


def land_all(root, batches=BATCHES):
    for n, lines in enumerate(batches):
        land(root, f"batch-{n:03d}.json", lines, 1_700_000_000 + n)


def expected_after(batches):
    model = Model()
    for lines in batches:
        model.apply(lines)
    return model.expected()


RUNNER = Path(__file__).with_name("run_job.py")
PYTHON = sys.executable
