"""Tables without Hudi's meta columns (``hoodie.populate.meta.fields = false``, Hudi's "virtual keys"), as Apache
Hudi's Spark writer made them at table versions 6 and 8: ``laketide run`` upserts and deletes in them across
restarts, each stored row's key made from the key field; the files it writes keep the meta columns null as Hudi's
do; hudi-rs and laketide's reader equal the model; incremental reads are refused as Hudi refuses them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from commands import CLI
from fixture_tables import unzip_fixture
from readback import hudi_read
from streaming import land

from laketide.table import Table
from laketide.table.errors import UnsupportedTableError
from laketide.table.format.schema import META_COLUMNS

COLUMNS = ["id", "name", "longField", "byteField"]


def _run(path: Path, root: Path) -> None:
    config = root / "job.toml"
    config.write_text(
        f'[table]\npath = "{path}"\n'
        f'[source]\nformat = "json"\npath = "{root / "landing"}"\n'
        'schema = "id INT, name STRING, longField BIGINT, byteField INT, _hoodie_is_deleted BOOLEAN"\n'
        f'[stream]\ncheckpoint = "{root / "checkpoint"}"\ntrigger = "available-now"\n'
        "[write]\nindex_shards = 2\nparallelism = 2\n"
    )
    done = subprocess.run([CLI, "run", "--config", str(config)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _rows(table) -> list[tuple]:
    return sorted(tuple(r[c] for c in COLUMNS) for r in table.select(COLUMNS).to_pylist())


def test_laketide_run_upserts_and_deletes_in_a_table_without_meta_columns(tmp_path):
    """Version 8's table; version 6's (Hudi 0.14's) takes the same code path, and the next test reads it."""
    path = unzip_fixture("v8_simplekeygen_hivestyle_no_metafields", tmp_path / "tables")
    model = {r[0]: r for r in _rows(hudi_read(path))}
    assert sorted(model) == [1, 2, 3, 4]
    partition = {i: r[3] for i, r in model.items()}

    def change(lines: list[dict]) -> list[dict]:
        for line in lines:
            stored = model.get(line["id"])
            if stored is not None and line["longField"] < stored[2]:
                continue  # late: event-time ordering keeps the stored row
            if line.get("_hoodie_is_deleted"):
                model.pop(line["id"], None)
            else:
                model[line["id"]] = tuple(line[c] for c in COLUMNS)
        return lines

    land(
        tmp_path,
        "a.json",
        change(
            [
                {"id": 1, "name": "one", "longField": 20_000_000_000, "byteField": partition[1]},
                {"id": 2, "name": "two", "longField": 20_000_000_000, "byteField": partition[2]},
                {
                    "id": 3,
                    "name": None,
                    "longField": 20_000_000_000,
                    "byteField": partition[3],
                    "_hoodie_is_deleted": True,
                },
                {"id": 5, "name": "five", "longField": 1, "byteField": 30},
                {"id": 4, "name": "late", "longField": 1, "byteField": partition[4]},
            ]
        ),
        1_700_000_000,
    )
    _run(path, tmp_path)
    assert _rows(hudi_read(path)) == sorted(model.values())

    # a second job, after a restart: its index finds the keys the first wrote, and the ones Hudi wrote
    land(
        tmp_path,
        "b.json",
        change(
            [
                {"id": 5, "name": "five again", "longField": 2, "byteField": 30},
                {"id": 4, "name": "four", "longField": 20_000_000_001, "byteField": partition[4]},
                {
                    "id": 1,
                    "name": None,
                    "longField": 20_000_000_001,
                    "byteField": partition[1],
                    "_hoodie_is_deleted": True,
                },
            ]
        ),
        1_700_000_100,
    )
    _run(path, tmp_path)
    assert _rows(hudi_read(path)) == sorted(model.values())
    table = Table.open(str(path))
    assert _rows(table.snapshot()) == sorted(model.values())

    # what laketide wrote holds the meta columns as Hudi's writer leaves them: present, every value null
    written = [s.base_file.path for s in table.file_system_view().latest_slices() if s.base_file.instant_time > "2026"]
    assert written
    for file in written:
        meta = pq.read_table(path / file, columns=list(META_COLUMNS))
        assert all(meta[c].null_count == meta.num_rows for c in META_COLUMNS), file

    first, *_ = table.timeline.completed_writes()
    with pytest.raises(UnsupportedTableError, match="no meta columns"):
        table.incremental(first.timestamp)


def test_a_table_without_meta_columns_has_no_incremental_reads(fixture_copy):
    """As Hudi's incremental query refuses it: no row says which commit wrote it."""
    from laketide.spark.table_source import SplitEnumerator

    path = fixture_copy("v6_simplekeygen_hivestyle_no_metafields")
    table = Table.open(str(path))
    (commit,) = table.timeline.completed_writes()
    assert _rows(table.snapshot())  # a snapshot reads
    with pytest.raises(UnsupportedTableError, match="no meta columns"):
        table.incremental("20000101000000000", commit.timestamp)
    enumerator = SplitEnumerator(str(path))
    assert enumerator.splits(None, commit.timestamp)  # the Spark source's snapshot reads
    with pytest.raises(UnsupportedTableError, match="incremental"):
        enumerator.splits("20000101000000000", commit.timestamp)
