"""The writer's synced file-system view equals a fresh listing after every kind of instant, without listing the
table."""

from __future__ import annotations

import pyarrow as pa
from writes import upsert

from laketide.coordinator import Coordinator, LocalLease
from laketide.coordinator.cleaner import Cleaner
from laketide.coordinator.savepoints import Savepoints
from laketide.table import Table
from laketide.table.format.clean import CleanPolicy, Retention
from laketide.table.format.files import table_relative
from laketide.table.reading.view_sync import ViewSync

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string())])


def listed(table: Table) -> dict:
    view = table.file_system_view()
    return {key: sorted(b.path for b in g.base_files) for key, g in view.groups.items() if g.base_files}


def synced(views: ViewSync) -> dict:
    view = views.view()
    return {key: sorted(b.path for b in g.base_files) for key, g in view.groups.items() if g.base_files}


def latest(view) -> list:
    return [(s.partition, s.file_id, s.base_file.path, s.size) for s in view.latest_slices()]


def test_synced_view_follows_commits_cleans_rollbacks_and_restores(tmp_path):
    table = Table.create(str(tmp_path / "t"), "t", ["id"], ["region"], "v")
    lease = LocalLease.for_table(table.uri, job_id="writer")
    lease.acquire()
    coordinator = Coordinator(table, lease, "w")
    views = ViewSync(table)
    instants = []
    for n in range(8):
        records = [{"id": i, "v": n, "region": ("us", "eu")[i % 2]} for i in range(4 + n)]
        instants.append(upsert(table, coordinator, n, records, SCHEMA))
        assert synced(views) == listed(table)
        assert latest(views.view()) == latest(table.file_system_view())
    Savepoints(coordinator).create(instants[2])
    Cleaner(coordinator, Retention(CleanPolicy.KEEP_LATEST_COMMITS, commits=2), view=views.view).clean()
    assert synced(views) == listed(table)
    assert latest(views.view()) == latest(table.file_system_view())
    coordinator.rollback(instants[-1])
    assert synced(views) == listed(table)
    assert latest(views.view()) == latest(table.file_system_view())
    assert views.listings == 1  # commits, a savepoint, a clean and a rollback were applied, not listed
    Savepoints(coordinator).restore(instants[2])
    assert synced(views) == listed(table)
    assert latest(views.view()) == latest(table.file_system_view())
    assert views.listings == 2  # a restore is not applied: the table is listed again
    lease.release()


def test_a_view_keeps_the_slices_of_the_groups_a_commit_left_alone_and_answers_for_an_older_timeline(tmp_path):
    table = Table.create(str(tmp_path / "t"), "t", ["id"], ["region"], "v")
    lease = LocalLease.for_table(table.uri, job_id="writer")
    lease.acquire()
    coordinator = Coordinator(table, lease, "w")
    regions = ["r0", "r1", "r2", "r3"]
    upsert(table, coordinator, 0, [{"id": i, "v": 0, "region": r} for i, r in enumerate(regions)], SCHEMA)
    views = ViewSync(table)
    before = views.view()
    old = {(s.partition, s.file_id): s for s in before.latest_slices()}
    upsert(table, coordinator, 1, [{"id": 0, "v": 1, "region": "r0"}], SCHEMA)
    after = views.view()
    assert latest(after) == latest(table.file_system_view())
    for s in after.latest_slices():
        # the groups the commit did not write are the same slices; the one it wrote is new
        assert (s is old[(s.partition, s.file_id)]) == (s.partition != "r0")
    # a thread holding the timeline from before the commit sees the table as it was then
    assert latest(views.view(before.timeline)) == latest(before)
    assert latest(views.view()) == latest(table.file_system_view())
    lease.release()


def test_deleted_files_are_named_relative_to_the_table():
    assert table_relative("f.parquet", "us", "/lake/t") == "us/f.parquet"
    assert table_relative("us/f.parquet", "us", "/lake/t") == "us/f.parquet"
    assert table_relative("/lake/t/us/f.parquet", "us", "/lake/t") == "us/f.parquet"
    assert table_relative("file:/lake/t/us/f.parquet", "us", "file:///lake/t/") == "us/f.parquet"
    assert table_relative("s3://b/t/us/f.parquet", "us", "s3://b/t") == "us/f.parquet"
