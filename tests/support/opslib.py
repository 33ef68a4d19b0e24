"""A table driven as operators drive one: `laketide run` in a subprocess over landed JSON files, and the
ops commands through the CLI, with a model of every row to compare hudi-rs and laketide's reader against."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from chaoslib import run_here
from commands import CLI
from pydantic_core import to_jsonable_python
from readback import hudi_read, rows
from streaming import DATA_COLUMNS, SCHEMA_DDL, Model, land, row

from laketide.table import Table

REGIONS = ("us", "eu", "apac")
ENV = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}


def region_of(key: int) -> str:
    return REGIONS[key % len(REGIONS)]


def changes(n: int, keys: list[int] | None = None) -> list[dict]:
    """Micro-batch ``n``: updates and inserts over a 40-key space, a delete every third batch."""
    keys = keys if keys is not None else [(n * 7 + j) % 40 for j in range(15)]
    lines = [row(k, n + 1, region=region_of(k)) for k in keys]
    if n % 3 == 2:
        lines.append(row(keys[0], n + 1, region=region_of(keys[0]), deleted=True))
    return lines


class OpsTable:
    """One table, its landing directory, its job settings and the model of its rows."""

    def __init__(self, root: Path, settings: dict[str, str]):
        self.root = root
        self.path = root / "table"
        self.settings = settings
        self.model = Model()
        self.landed = 0

    def land(self, batches: list[list[dict]]) -> None:
        for lines in batches:
            land(self.root, f"batch-{self.landed:03d}.json", lines, 1_700_000_000 + self.landed)
            self.model.apply(lines)
            self.landed += 1

    def args(self, **overrides: str) -> list[str]:
        """The `laketide run` command line of this table's job."""
        settings = {
            "table.path": str(self.path),
            "table.name": "orders",
            "table.record_key": '["id"]',
            "table.partition_by": '["region"]',
            "table.ordering_field": "ts",
            "source.format": "json",
            "source.path": str(self.root / "landing"),
            "source.schema": SCHEMA_DDL,
            "source.max_files_per_trigger": "1",
            "stream.checkpoint": str(self.root / "checkpoint"),
            "stream.trigger": "available-now",
            "write.index_shards": "2",
            "write.parallelism": "2",
            **self.settings,
            **overrides,
        }
        return [CLI, "run"] + [a for k, v in settings.items() for a in ("--conf", f"{k}={v}")]

    def run(self, expect_code: int = 0, **overrides: str) -> subprocess.CompletedProcess:
        """`laketide run` in a subprocess, as users start it: its exit code and what it printed."""
        done = subprocess.run(self.args(**overrides), capture_output=True, text=True, env=ENV, timeout=600)
        assert done.returncode == expect_code, f"laketide run exited {done.returncode}:\n{done.stderr[-4000:]}"
        return done

    def prepare(self, **overrides: str) -> None:
        """The same job with the same settings and checkpoint, on this test process's Spark session
        (``chaoslib.run_here``): for the runs that only build the state a test starts from."""
        run_here(self.args(**overrides))

    def cli(self, *args: str, expect_code: int = 0) -> subprocess.CompletedProcess:
        done = subprocess.run([CLI, *args], capture_output=True, text=True, env=ENV, timeout=600)
        assert done.returncode == expect_code, (
            f"laketide {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
        )
        return done

    def timeline(self) -> list[dict]:
        """What `laketide timeline --json` prints, read in this process through the same inspect layer:
        the tests' bookkeeping needs no interpreter start of a second each (test_cli covers the command)."""
        page = Table.open(str(self.path)).inspect.timeline(limit=1000, archived=False)
        return to_jsonable_python(page.items)

    def newest_write(self, action: str | None = None) -> str:
        writes = [
            i
            for i in self.timeline()
            if i["state"] == "COMPLETED" and i["action"] in ("commit", "deltacommit", "replacecommit")
        ]
        return next(i["instant"] for i in writes if action is None or i["action"] == action)

    def read(self, as_of: str | None = None) -> list[dict]:
        return rows(hudi_read(self.path, as_of=as_of), "id", DATA_COLUMNS)

    def assert_matches(self, expected: list[dict] | None = None, what: str = "") -> None:
        """hudi-rs and laketide's reader both equal the model (or ``expected``), row by row."""
        expected = self.model.expected() if expected is None else expected
        assert self.read() == expected, f"hudi-rs {what}"
        ours = rows(Table.open(str(self.path)).snapshot(), "id", DATA_COLUMNS)
        assert ours == expected, f"laketide's reader {what}"
