"""``laketide upgrade`` and ``downgrade`` between table versions 6 and 8, as Hudi's ``UpgradeDowngrade`` moves a
table: a version 6 table laketide wrote (archived, cleaned to one commit, merge-on-read compacted) is upgraded
and written on by the job, downgraded and written on again; hudi-rs and laketide's reader equal the model at every
step, and a job holding the table refuses both."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from opslib import OpsTable, changes
from readback import hudi_read

import laketide
from laketide.coordinator import LocalLease
from laketide.table import Table
from laketide.table.format.lsm_history import LsmHistory

KEEP_ONE = {"clean.retain_commits": "1", "archive.min_commits": "2", "archive.max_commits": "3"}
FLOWS = {
    "cow": {"clean.async": "false"},
    "mor": {"table.type": "MERGE_ON_READ", "compaction.mode": "inline", "compaction.delta_commits": "3"},
}


def _version(t: OpsTable) -> int:
    return Table.open(str(t.path)).config.version


@pytest.mark.parametrize("flow", list(FLOWS))
def test_upgrade_then_downgrade_keep_every_row_and_the_job_goes_on(tmp_path, flow):
    t = OpsTable(tmp_path, {**KEEP_ONE, **FLOWS[flow]})
    path = str(t.path)
    t.land([changes(n) for n in range(6)])
    t.prepare()
    assert _version(t) == 6 and (t.path / ".hoodie" / "archived").is_dir(), "archived as version 6"

    dry = json.loads(t.cli("upgrade", path, "--to", "8", "--dry-run", "--json").stdout)
    assert dry["from_version"] == 6 and dry["timeline_files"] > 0 and _version(t) == 6
    t.cli("upgrade", path, "--to", "8")
    table = Table.open(path)
    assert table.config.version == 8 and table.config.extra["hoodie.table.initial.version"] == "6"
    assert not list((t.path / ".hoodie").glob("*.commit")) and not list((t.path / ".hoodie").glob("*.deltacommit"))
    assert LsmHistory(table.io, table.config.history_dir).entries(), "the archive moved into the LSM history"
    t.assert_matches(what="after the upgrade")

    t.land([changes(n) for n in range(t.landed, t.landed + 5)])
    t.run()
    t.assert_matches(what="written as version 8 after the upgrade")
    assert _version(t) == 8

    t.cli("downgrade", path, "--to", "6")
    table = Table.open(path)
    assert table.config.version == 6 and "hoodie.timeline.path" not in table.config.extra
    assert not (t.path / ".hoodie" / "timeline").exists()
    t.assert_matches(what="after the downgrade")
    t.land([changes(n) for n in range(t.landed, t.landed + 4)])
    t.run()
    t.assert_matches(what="written as version 6 after the downgrade")
    assert _version(t) == 6
    t.cli("upgrade", path, "--to", "6")  # already there: says so, changes nothing


def test_a_version_change_is_refused_while_a_job_holds_the_table(tmp_path):
    t = OpsTable(tmp_path, {})
    t.land([changes(0)])
    t.prepare()
    lease = LocalLease.for_table(str(t.path), job_id="a-running-job")
    lease.acquire()
    try:
        for command in ("upgrade", "downgrade"):
            done = t.cli(command, str(t.path), "--to", "8" if command == "upgrade" else "6", expect_code=4)
            assert "stop the job first" in done.stderr, done.stderr
    finally:
        lease.release()
    assert _version(t) == 6


def _data(table) -> pa.Table:
    return table.drop_columns([c for c in table.column_names if c.startswith("_hoodie")])


@pytest.mark.parametrize("name", ["v6_simplekeygen_nonhivestyle", "v6_trips_8i1u"])
def test_a_table_hudi_wrote_at_version_6_is_upgraded_and_takes_upserts(fixture_copy, name):
    """Apache Hudi's own version 6 tables (copy-on-write, and merge-on-read with its log files, compacted first):
    upgraded, then updated through ``laketide.write``; hudi-rs reads the rows before with the updates applied."""
    path = fixture_copy(name)
    data = _data(hudi_read(path))
    OpsTable(path.parent, {}).cli("upgrade", str(path), "--to", "8")
    table = Table.open(str(path))
    assert table.config.version == 8
    assert sorted(map(repr, _data(hudi_read(path)).to_pylist())) == sorted(map(repr, data.to_pylist()))
    key, ordering = table.config.record_key_fields[0], table.config.ordering_field
    updated = data.slice(0, 2)
    if ordering:
        at = updated.schema.get_field_index(ordering)
        updated = updated.set_column(at, updated.schema.field(at), pc.add(updated[ordering], 1))
    laketide.write(str(path), updated, settings={"write": {"parallelism": 2}})
    expected = {r[key]: r for r in data.to_pylist()} | {r[key]: r for r in updated.to_pylist()}
    assert sorted(map(repr, _data(hudi_read(path)).to_pylist())) == sorted(map(repr, expected.values()))
