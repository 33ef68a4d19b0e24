"""Our reader against hudi-rs on the tables Apache Hudi's Spark writer wrote."""

from __future__ import annotations

import pytest
from fixture_tables import COW_FIXTURES
from readback import hudi_read, rows

from laketide.table import Table
from laketide.table.format.instant import State


@pytest.mark.parametrize("name", COW_FIXTURES)
def test_snapshot_matches_hudi_rs(fixtures_dir, name):
    path = fixtures_dir / name
    ours = Table.open(str(path)).snapshot()
    theirs = hudi_read(path)
    assert ours.num_rows == theirs.num_rows == 4
    assert ours.column_names == theirs.column_names
    assert rows(ours, "id") == rows(theirs, "id")


@pytest.mark.parametrize("name", COW_FIXTURES)
def test_time_travel_matches_hudi_rs(fixtures_dir, name):
    path = fixtures_dir / name
    table = Table.open(str(path))
    commits = table.timeline.completed_writes()
    assert commits and all(c.state is State.COMPLETED for c in commits)
    for commit in commits:
        times = {commit.timestamp, commit.completion_time or commit.timestamp}
        for as_of in times:
            assert rows(table.snapshot(as_of=as_of), "id") == rows(hudi_read(path, as_of=as_of), "id"), as_of


# a table without meta columns has no incremental reads (test_no_meta_columns), as in Hudi
@pytest.mark.parametrize("name", [n for n in COW_FIXTURES if "no_metafields" not in n])
def test_incremental_matches_hudi_rs(fixtures_dir, name):
    path = fixtures_dir / name
    table = Table.open(str(path))
    timeline = table.timeline
    points = ["19700101000000000"] + [timeline.visible_time(c) for c in timeline.completed_writes()]
    for i, start in enumerate(points):
        for end in points[i + 1 :]:
            ours = table.incremental(start, end)
            theirs = hudi_read(path, start=start, end=end)
            assert rows(ours, "id") == rows(theirs, "id"), (start, end)


def test_two_commit_fixture_incremental_has_only_second_commit_rows(fixtures_dir):
    table = Table.open(str(fixtures_dir / "v6_simplekeygen_nonhivestyle"))
    first, second = table.timeline.completed_writes()
    got = table.incremental(first.timestamp, second.timestamp)
    assert sorted(got["id"].to_pylist()) == [1, 4]
    assert set(got["_hoodie_commit_time"].to_pylist()) == {second.timestamp}


def test_no_meta_fields_fixture_reads_without_meta_columns(fixtures_dir):
    table = Table.open(str(fixtures_dir / "v6_simplekeygen_hivestyle_no_metafields"))
    assert table.config.populate_meta_fields is False
    assert table.config.hive_style_partitioning is True
    snap = table.snapshot()
    assert not [c for c in snap.column_names if c.startswith("_hoodie")]
    assert sorted(snap["id"].to_pylist()) == [1, 2, 3, 4]


def test_v8_timeline_has_completion_times(fixtures_dir):
    timeline = Table.open(str(fixtures_dir / "v8_simplekeygen_nonhivestyle")).timeline
    commits = timeline.completed_writes()
    assert len(commits) == 2
    assert all(c.completion_time and c.completion_time > c.timestamp for c in commits)
    meta = timeline.commit_metadata(commits[-1])
    assert meta.operation_type == "UPSERT"
    assert {s.file_id for s in meta.write_stats()} == {
        "7b0ea4f9-3768-4e87-b12c-8d33efd22b55-0",
        "6653c109-b3c0-470e-8ad4-f45947474a34-0",
    }


def test_missing_table_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"hoodie.properties"):
        Table.open(str(tmp_path))
