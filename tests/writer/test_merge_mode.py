"""Event-time and commit-time ordering, across micro-batches and within one, through the real job (hudi-rs reads)."""

from __future__ import annotations

import pytest
from readback import hudi_read
from streaming import job_config, land, row

from laketide.spark.job import run
from laketide.table import Table


def _land_history(root) -> None:
    land(root, "0.json", [row(i, 10, region="eu") for i in (1, 2, 3, 4)], 1_700_000_000)
    late = [
        row(1, 5, region="eu", name="late update"),
        row(2, 5, region="eu", deleted=True),
        row(3, 20, region="eu", name="newer update"),
        row(4, 10, region="eu", name="tie"),
    ]
    land(root, "1.json", late, 1_700_000_001)


def _land_ties(root) -> None:
    # one micro-batch of two files: key 5 twice in the earlier file (the later line wins), then once in the
    # later file with the same ordering value. The earlier file is the smaller one, so Spark reads it last.
    land(
        root,
        "2a.json",
        [row(5, 1, region="eu", name="first line"), row(5, 1, region="eu", name="second line")],
        1_700_000_002,
    )
    land(
        root,
        "2b.json",
        [row(5, 1, region="eu", name="later file " + "x" * 2000), row(6, 1, region="eu")],
        1_700_000_003,
    )


def _final(root, mode: str):
    _land_history(root)
    first = run(job_config(root, table__merge_mode=mode, source__max_files_per_trigger=1))
    _land_ties(root)
    second = run(job_config(root, table__merge_mode=mode, source__max_files_per_trigger=2))
    assert len(second.status.recent) == 1, "both tie files in one micro-batch"
    first.status.recent += second.status.recent
    return {r["id"]: r for r in hudi_read(root / "table").to_pylist()}, first


@pytest.fixture(scope="module")
def event_time(spark, tmp_path_factory):
    return _final(tmp_path_factory.mktemp("event"), "EVENT_TIME_ORDERING")


@pytest.fixture(scope="module")
def commit_time(spark, tmp_path_factory):
    return _final(tmp_path_factory.mktemp("commit"), "COMMIT_TIME_ORDERING")


def test_event_time_keeps_the_newer_stored_row(event_time):
    rows, writer = event_time
    assert rows[1]["ts"] == 10 and rows[1]["name"] != "late update", "a late, older update does not overwrite"
    assert 2 in rows and rows[2]["ts"] == 10, "a late, older delete does not delete"
    assert rows[3]["name"] == "newer update"
    assert rows[4]["name"] == "tie", "an equal ordering value goes to the incoming record"
    assert sum(r.late for r in writer.status.recent) == 2


def test_commit_time_applies_every_later_batch(commit_time):
    rows, writer = commit_time
    assert rows[1]["name"] == "late update" and rows[1]["ts"] == 5
    assert 2 not in rows
    assert rows[3]["name"] == "newer update" and rows[4]["name"] == "tie"
    assert sum(r.late for r in writer.status.recent) == 0


@pytest.mark.parametrize("mode", ["event_time", "commit_time"])
def test_ties_in_one_micro_batch_go_to_the_later_file_then_line(mode, request):
    rows, _ = request.getfixturevalue(mode)
    assert rows[5]["name"].startswith("later file")


def test_merge_mode_is_recorded_as_hudi_records_it(event_time, commit_time, tmp_path_factory):
    for (_rows, writer), mode, payload in (
        (event_time, "EVENT_TIME_ORDERING", "org.apache.hudi.common.model.DefaultHoodieRecordPayload"),
        (commit_time, "COMMIT_TIME_ORDERING", "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"),
    ):
        props = Table.open(str(writer.table.uri)).config.extra
        assert props["hoodie.record.merge.mode"] == mode
        assert props["hoodie.compaction.payload.class"] == payload
        assert props["hoodie.table.precombine.field"] == "ts"
