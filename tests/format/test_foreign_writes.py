"""Commits the job did not write (a Hudi backfill inserting into a covered file group, clustering) are seen
by its next micro-batch: no duplicates, no lost updates, checked with hudi-rs against a model."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from foreign_writer import foreign_upsert, write_file_groups
from readback import hudi_read, rows
from streaming import DATA_COLUMNS, Model, job_config, land, row
from writes import HISTORY_SCHEMA

from laketide.coordinator import Coordinator, LocalLease
from laketide.index.state import StateIndex
from laketide.index.sync import ForeignWrites, foreign_writes
from laketide.spark.job import run
from laketide.table import Table
from laketide.table.format.commit import SCHEMA_KEY
from laketide.table.format.instant import REPLACE_COMMIT
from laketide.table.format.schema import avro_schema_json


def foreign_commit(table: Table, batch_id: int, records: list[dict], **routing) -> str:
    """One commit by another writer (no state index kept), under the table's lease."""
    lease = LocalLease.for_table(table.uri, job_id="hudi-backfill")
    lease.acquire()
    try:
        coordinator = Coordinator(table, lease, "hudi-backfill")
        replaced = routing.pop("replaced", None)
        instant = coordinator.begin(batch_id, action=REPLACE_COMMIT if replaced else "commit")
        schema = table.schema()
        data = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in records], schema=schema)
        stats = write_file_groups(table, instant, data, schema, **routing)
        coordinator.commit(
            instant,
            stats,
            {SCHEMA_KEY: avro_schema_json(schema, table.name)},
            action=REPLACE_COMMIT if replaced else "commit",
            operation="CLUSTER" if replaced else "UPSERT",
            replaced_file_ids=replaced,
        )
        return instant
    finally:
        lease.release()


def groups(table: Table, partition: str) -> list:
    return sorted((s for s in table.file_system_view().latest_slices(partition=partition)), key=lambda s: s.file_id)


def test_the_next_micro_batch_sees_inserts_and_clustering_by_other_writers(spark, tmp_path):
    model = Model()
    config = job_config(tmp_path)

    def micro_batch(n: int, lines: list) -> None:
        land(tmp_path, f"batch-{n:03d}.json", lines, 1_700_000_000 + n)
        model.apply(lines)
        run(config)
        assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == model.expected()

    micro_batch(0, [row(i, 1) for i in range(1, 41)])
    table = Table.open(str(tmp_path / "table"))
    index = StateIndex.open(table.io, 2)
    covered_group = groups(table, "eu")[0]
    timeline = table.timeline
    assert (covered_group.partition, covered_group.file_id) in index.snapshot(
        {i.timestamp for i in timeline.completed_writes()}
    ).covered

    # a backfill inserts new keys into a group the index covers
    backfill = [row(i, 1, region="eu") for i in range(1000, 1010, 2)]
    foreign_commit(table, 0, backfill, insert_into={"eu": covered_group.file_id})
    model.apply(backfill)
    assert {r["id"] for r in pq.read_table(table.io.full_path(groups(table, "eu")[0].base_file.path)).to_pylist()} >= {
        r["id"] for r in backfill
    }

    # updating those keys must find them there, not insert them a second time
    micro_batch(1, [row(i, 2, region="eu") for i in range(1000, 1010, 2)] + [row(2, 2), row(3, 2)])

    # clustering rewrites a group's rows into a new group and replaces the old one
    table = Table.open(str(tmp_path / "table"))
    clustered = groups(table, "us")[0]
    members = [r for r in pq.read_table(table.io.full_path(clustered.base_file.path)).to_pylist()]
    foreign_commit(table, 1, members, new_groups_only=True, replaced={"us": [clustered.file_id]})
    assert clustered.file_id not in {s.file_id for s in groups(Table.open(table.uri), "us")}

    # updates of the clustered keys must land in the group that now holds them
    keys = sorted(r["id"] for r in members)[:5]
    micro_batch(2, [row(i, 3, region="us") for i in keys])
    after = Table.open(table.uri)
    latest = {s.file_id for s in groups(after, "us")}
    assert clustered.file_id not in latest, "nothing was written to the replaced group"


def test_foreign_writes_from_the_timeline(tmp_path):
    table = Table.create(str(tmp_path / "t"), "t", ["id"], ["region"], "v")
    lease = LocalLease.for_table(table.uri, job_id="w")
    lease.acquire()
    coordinator = Coordinator(table, lease, "w")
    assert foreign_writes(table.timeline) == ForeignWrites((), frozenset())
    first = foreign_upsert(table, coordinator, 0, [{"id": 1, "v": 1, "region": "eu"}], HISTORY_SCHEMA)
    # only writes that keep no index: nothing tells what they changed, so every group is uncovered
    found = foreign_writes(table.timeline)
    assert found.everything and found.seen == (first,)
    # an index-keeping commit accounts for them; a later foreign write is found with the groups it touched
    instant = coordinator.begin(1)
    coordinator.commit(instant, [], found.commit_metadata())
    later = foreign_upsert(table, coordinator, 2, [{"id": 2, "v": 1, "region": "us"}], HISTORY_SCHEMA)
    found = foreign_writes(Table.open(table.uri).timeline)
    assert not found.everything and found.seen == (first, later)
    assert {p for p, _ in found.touched} == {"us"}
    lease.release()
