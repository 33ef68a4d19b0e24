"""The job extends a table Apache Hudi's Spark writer wrote: existing keys found through its bloom filters."""

from __future__ import annotations

from laketide.config import load_config
from laketide.index.state import StateIndex
from laketide.table import Table
from laketide.writer.job import run

from conftest import hudi_read
from streaming import land

DDL = "id INT, name STRING, isActive BOOLEAN, longField BIGINT, doubleField DOUBLE, byteField INT"


def test_updates_land_in_the_spark_written_file_groups(spark, fixture_copy, tmp_path):
    path = fixture_copy("v6_simplekeygen_nonhivestyle")
    before = {r["id"]: r for r in hudi_read(path).to_pylist()}
    groups_before = {r["id"]: r["_hoodie_file_name"].split("_")[0] for r in before.values()}
    updates = [
        {"id": i, "name": f"updated-{i}", "isActive": True, "longField": 10_000_000_000 + i, "doubleField": 1.5, "byteField": before[i]["byteField"]}
        for i in (1, 2, 3, 4)
    ]
    updates.append({"id": 5, "name": "new", "isActive": False, "longField": 5, "doubleField": 2.5, "byteField": 30})
    land(tmp_path, "updates.json", updates, 1_700_000_000)
    config = load_config(
        overrides=[
            f"table.path={path}",
            'table.record_key=["id"]',
            'table.partition_by=["byteField"]',
            "table.ordering_field=longField",
            "source.format=json",
            f"source.path={tmp_path / 'landing'}",
            f"source.schema={DDL}",
            f"stream.checkpoint={tmp_path / 'checkpoint'}",
            "stream.trigger=available-now",
            "write.index_shards=2",
        ]
    )
    writer = run(config)
    (report,) = writer.status.recent
    assert (report.updates, report.inserts) == (4, 1)

    after = hudi_read(path)
    assert after.num_rows == 5
    assert len(set(after["_hoodie_record_key"].to_pylist())) == 5
    by_id = {r["id"]: r for r in after.to_pylist()}
    for i in (1, 2, 3, 4):
        assert by_id[i]["name"] == f"updated-{i}"
        assert by_id[i]["longField"] == 10_000_000_000 + i
        assert by_id[i]["_hoodie_file_name"].split("_")[0] == groups_before[i], "updated in place, in its file group"
    assert by_id[5]["name"] == "new" and by_id[5]["byteField"] == 30

    # the fixture's file groups are now covered by the state index: the next run needs no bloom lookups
    table = Table.open(str(path))
    timeline = table.timeline
    snapshot = StateIndex.open(table.io, 2).snapshot({i.timestamp for i in timeline.completed_writes()})
    assert set(groups_before.values()) <= {file_id for _, file_id in snapshot.covered}
