"""The Delta mirror, read by delta-rs (and Polars through it) against hudi-rs at every version."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa
from deltalake import DeltaTable
from readback import hudi_read, rows
from writes import HISTORY_SCHEMA, rewritten_history, state_at, upsert

from laketide.coordinator.cleaner import Cleaner
from laketide.coordinator.savepoints import Savepoints
from laketide.table import Table
from laketide.table.format.clean import Retention
from laketide.table.mirror.delta_log import LAST_CHECKPOINT, DeltaLog
from laketide.table.mirror.delta_mirror import DeltaMirror

COLUMNS = ["id", "v", "region"]


def delta_rows(uri: str, version: int | None = None) -> list[dict]:
    return rows(DeltaTable(uri, version=version).to_pyarrow_table(), "id", COLUMNS)


def test_every_version_reads_as_hudi_did_through_clean_rollback_and_restore(tmp_path):
    table, coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=4)
    mirror = DeltaMirror(table)
    expected = {}  # delta version -> hudi-rs rows when it was published

    def publish(count: int) -> None:
        versions = mirror.catch_up()
        assert len(versions) == count
        expected[versions[-1]] = state_at(table.uri)
        assert delta_rows(table.uri) == expected[versions[-1]]

    # the backlog of four commits becomes four versions, each the table as of its commit
    assert mirror.catch_up() == [0, 1, 2, 3]
    expected.update({v: reads[t] for v, t in enumerate(instants)})
    Savepoints(coordinator).create(instants[1])
    instants.append(
        upsert(
            table, coordinator, 4, [{"id": i, "v": 4, "region": ("us", "eu")[i % 2]} for i in range(3)], HISTORY_SCHEMA
        )
    )
    publish(1)
    Cleaner(coordinator, Retention(commits=1)).clean()
    publish(1)  # a clean changes no live file: its version is a commitInfo alone
    clean_version = max(expected)
    assert [a for a in DeltaLog(table.io).read_version(clean_version) if "add" in a or "remove" in a] == []
    coordinator.rollback(instants[-1], force=True)
    publish(1)  # the compensating version puts back what the rolled-back commit replaced
    assert state_at(table.uri) == reads[instants[3]]
    instants.append(
        upsert(
            table,
            coordinator,
            5,
            [{"id": 1, "v": 5, "region": "eu"}, {"id": 40, "v": 5, "region": "us"}],
            HISTORY_SCHEMA,
        )
    )
    publish(1)
    Savepoints(coordinator).restore(instants[1])
    publish(1)
    assert state_at(table.uri) == reads[instants[1]]
    for n in (6, 7):
        instants.append(upsert(table, coordinator, n, [{"id": 2, "v": n, "region": "us"}], HISTORY_SCHEMA))
        publish(1)
    lease.release()

    # time travel to every version whose files are still there: the cleaner, a rollback and a restore delete
    # files, and with them the older versions that name them, as for Hudi's own time travel
    readable = [
        v
        for v in expected
        if all(
            table.io.exists(u.split(table.uri.rstrip("/") + "/", 1)[1])
            for u in DeltaTable(table.uri, version=v).file_uris()
        )
    ]
    assert {1, max(expected) - 1, max(expected)} <= set(readable), "the savepoint's version and those after the restore"
    for version in readable:
        assert delta_rows(table.uri, version) == expected[version], f"delta version {version}"
    latest = max(expected)
    assert latest >= 10 and table.io.exists(LAST_CHECKPOINT), "a checkpoint every 10 versions"
    assert json.loads(table.io.read_text(LAST_CHECKPOINT))["version"] == 10
    polars_rows = pl.read_delta(table.uri).select(COLUMNS).sort("id").to_dicts()
    assert polars_rows == expected[latest]
    info = DeltaTable(table.uri).history(1)[0]
    assert info["laketide"]["hudiAction"] == "commit" and info["laketide"]["hudiInstant"] == instants[-1]


def test_a_restarted_mirror_catches_up_from_its_checkpoint(tmp_path):
    table, coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=12)
    assert DeltaMirror(table).catch_up() == list(range(12))
    for n in (12, 13):
        instants.append(upsert(table, coordinator, n, [{"id": n, "v": n, "region": "us"}], HISTORY_SCHEMA))
        reads[instants[-1]] = state_at(table.uri)
    # a new process: the state comes from the checkpoint at version 10 and the two commits after it
    assert DeltaMirror(Table.open(table.uri)).catch_up() == [12, 13]
    assert delta_rows(table.uri, 12) == reads[instants[12]] and delta_rows(table.uri) == reads[instants[13]]
    lease.release()


def test_schema_stats_and_partition_values(tmp_path):
    table, _coordinator, lease, _instants, _reads = rewritten_history(tmp_path / "t", commits=1)
    DeltaMirror(table).catch_up()
    dt = DeltaTable(table.uri)
    assert dt.metadata().partition_columns == ["region"]
    fields = {f.name: f.type.type for f in dt.schema().fields}
    assert fields["_hoodie_record_key"] == "string" and fields["id"] == "long" and fields["v"] == "long"
    adds = dt.get_add_actions(flatten=True)
    adds = pa.table(adds) if not isinstance(adds, pa.Table) else adds
    by_region = {r["partition.region"]: r for r in adds.to_pylist()}
    assert set(by_region) == {"us", "eu"}
    for region, add in by_region.items():
        ids = [i for i in range(6) if ("us", "eu")[i % 2] == region]
        assert add["num_records"] == len(ids)
        assert add["min.id"] == min(ids) and add["max.id"] == max(ids) and add["null_count.id"] == 0
    lease.release()


def test_the_job_mirrors_merge_on_read_as_its_read_optimized_view(spark, tmp_path):
    from streaming import COMPACTING_BATCHES, DATA_COLUMNS, expected_after, job_config, land_all

    from laketide.spark.job import run
    from laketide.table.mirror.delta_mirror import completed_actions

    land_all(tmp_path, COMPACTING_BATCHES)
    run(
        job_config(
            tmp_path,
            table__type="MERGE_ON_READ",
            compaction__delta_commits="2",
            compaction__mode="inline",
            mirror__delta="true",
        )
    )
    table = Table.open(str(tmp_path / "table"))
    actions = completed_actions(table)
    versions = DeltaLog(table.io).versions()
    assert versions == list(range(len(actions))), "one version per completed deltacommit, compaction and clean"
    dt = DeltaTable(table.uri)
    assert [h["laketide"]["hudiInstant"] for h in reversed(dt.history())] == [a.instant.timestamp for a in actions]
    # deltacommits add no base file unless they insert: the mirror is the read-optimized view, which the last compaction
    # made whole
    mirrored = rows(dt.to_pyarrow_table(), "id", DATA_COLUMNS)
    assert mirrored == rows(table.read_optimized(), "id", DATA_COLUMNS) == expected_after(COMPACTING_BATCHES)


def test_mirror_command_backfills_and_operations_keep_it_current(tmp_path):
    from commands import laketide

    table, _coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=3)
    lease.release()
    code, out, err = laketide("mirror", table.uri, "--json")
    assert code == 0, err
    assert json.loads(out) == {"written": [0, 1, 2], "latest_version": 2}
    assert delta_rows(table.uri) == reads[instants[-1]]
    code, out, err = laketide("rollback", table.uri, instants[-1], "--json")
    assert code == 0, err
    assert DeltaLog(table.io).versions() == [0, 1, 2, 3], "the rollback's compensating version"
    assert delta_rows(table.uri) == reads[instants[1]] == state_at(table.uri)
    code, out, _ = laketide("mirror", table.uri, "--json")
    assert code == 0 and json.loads(out)["written"] == []


def test_a_schema_change_is_a_metadata_action(tmp_path):
    table, coordinator, lease, _instants, _reads = rewritten_history(tmp_path / "t", commits=2)
    mirror = DeltaMirror(table)
    mirror.catch_up()
    wider = pa.schema([*list(HISTORY_SCHEMA), pa.field("note", pa.string())])
    upsert(table, coordinator, 2, [{"id": 1, "v": 2, "region": "eu", "note": "added"}], wider)
    (version,) = mirror.catch_up()
    lease.release()
    actions = DeltaLog(table.io).read_version(version)
    (meta,) = [a["metaData"] for a in actions if "metaData" in a]
    assert [f["name"] for f in json.loads(meta["schemaString"])["fields"]][-1] == "note"
    assert DeltaLog(table.io).read_version(0)[1]["metaData"]["id"] == meta["id"], "the same table, a new schema"
    columns = ["id", "v", "region", "note"]
    assert rows(DeltaTable(table.uri).to_pyarrow_table(), "id", columns) == rows(hudi_read(table.uri), "id", columns)


def test_a_writer_that_lost_its_lease_writes_no_version(tmp_path):
    """The mirror checks the lease before each version: a writer paused past its lease publishes nothing."""
    import pytest

    from laketide.coordinator.lease import LeaseLost
    from laketide.table.mirror.delta_log import commit_path

    table, coordinator, lease, _, _ = rewritten_history(tmp_path / "t", commits=2)
    lease.release()
    with pytest.raises(LeaseLost):
        DeltaMirror(table, hold=coordinator.hold).catch_up()
    assert not table.io.exists(commit_path(0))
