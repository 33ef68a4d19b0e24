"""Savepoint, restore and rollback never lose a row: end to end through `laketide run`, the CLI and the REST
API, on both table types, with compactions and cleans that keep one commit, archival on; hudi-rs and
laketide's reader compared with the model after every step, and every timeline file read by Java's Avro."""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx
import pytest
from chaoslib import free_port
from hudi_avsc import RECORD_OF, java_decode
from opslib import CLI, ENV, OpsTable, changes, region_of

from laketide.table import Table
from laketide.table.format.instant import SAVEPOINT, Instant, State
from laketide.table.format.savepoint import SavepointMetadata
from laketide.table.format.timeline import TimelineWriter

KEEP_ONE = {"clean.retain_commits": "1", "archive.min_commits": "2", "archive.max_commits": "3"}
FLOWS = {
    "mor-inline": {
        "table.type": "MERGE_ON_READ",
        "compaction.mode": "inline",
        "compaction.delta_commits": "2",
        "clean.async": "false",
    },
    "mor-async": {
        "table.type": "MERGE_ON_READ",
        "compaction.mode": "async",
        "compaction.delta_commits": "2",
        "clean.async": "true",
    },
    "cow": {"clean.async": "false"},
    # version 8 tables (Hudi 1.0's timeline, archived into its LSM history)
    "cow-v8": {"clean.async": "false", "table.version": "8"},
    "mor-async-v8": {
        "table.type": "MERGE_ON_READ",
        "compaction.mode": "async",
        "compaction.delta_commits": "2",
        "clean.async": "true",
        "table.version": "8",
    },
}
REFUSED = 4


def completed(t: OpsTable, action: str, after: str) -> list[str]:
    return [
        i["instant"]
        for i in t.timeline()
        if i["action"] == action and i["state"] == "COMPLETED" and i["instant"] > after
    ]


def assert_every_timeline_file_decodes_in_java(spark, path) -> set[str]:
    """Each Avro file on the timeline, resolved by Java's Avro against Hudi's schema for its record; the records
    read."""
    table = Table.open(str(path))
    decoded = set()
    timeline, layout = table.config.timeline_dir, table.config.timeline_layout_version
    for entry in table.io.list_dir(timeline):
        instant = None if entry.is_dir else Instant.parse_file_name(entry.name, layout)
        record = RECORD_OF.get((instant.action, instant.state.value)) if instant else None
        data = table.io.read_bytes(entry.path) if record else b""
        if data.startswith(b"Obj\x01"):
            assert java_decode(spark, data, record), entry.name
            decoded.add(record)
    return decoded


@pytest.mark.parametrize("flow", list(FLOWS))
def test_restore_returns_every_savepointed_row_and_the_job_goes_on(spark, tmp_path, flow):
    t = OpsTable(tmp_path, {**KEEP_ONE, **FLOWS[flow]})
    path = str(t.path)
    mor = flow.startswith("mor")
    t.land([changes(n) for n in range(3)])
    t.prepare(**({"compaction.mode": "off"} if mor else {}))
    first = t.newest_write()
    assert Table.open(path).config.version == int(FLOWS[flow].get("table.version", 6))
    t.cli("savepoint", "create", path, first)
    saved = {first: t.model.expected()}
    if mor:
        t.cli("compact", path, "--delta-commits", "1")
        second = t.newest_write("commit")  # the compaction's commit
        held = json.loads(t.cli("savepoint", "list", path, "--json").stdout)[0]["files"]
        assert any(".log." in f for f in held), "a savepoint of a deltacommit holds its slices' log files"
    else:
        t.land([changes(3)])
        t.prepare()
        second = t.newest_write()
    t.cli("savepoint", "create", path, second)
    saved[second] = t.model.expected()

    t.land([changes(n) for n in range(t.landed, t.landed + 5)])
    t.prepare()
    t.assert_matches(what="after running past the savepoints")
    assert completed(t, "clean", second), "cleans ran after both savepoints"
    if mor:
        assert completed(t, "commit", second), "compactions ran after both savepoints"

    for savepoint in (second, first):
        if savepoint == first:
            t.cli(
                "savepoint", "delete", path, second
            )  # a restore refuses while a newer savepoint holds what it rolls back
        t.cli("restore", path, savepoint)
        t.model.rows = {r["id"]: dict(r) for r in saved[savepoint]}
        t.assert_matches(what=f"after the restore to {savepoint}")
        assert t.read(as_of=savepoint) == saved[savepoint], (
            "hudi-rs time travel to the savepoint equals the restored table"
        )
        assert not [i for i in t.timeline() if i["state"] != "COMPLETED"], "no plan is left pending by the restore"
        before = t.model.expected()
        t.land([changes(t.landed)])
        t.run()
        t.assert_matches(what=f"a micro-batch after the restore to {savepoint}")

    decoded = assert_every_timeline_file_decodes_in_java(spark, t.path)
    newest = t.newest_write()
    compaction = mor and newest == t.newest_write("commit")
    t.cli("rollback", path, newest)  # the newest write: cleaning kept the state before it
    t.assert_matches(t.model.expected() if compaction else before, what="after a rollback of the newest write")
    kinds = {
        "HoodieCleanerPlan",
        "HoodieCleanMetadata",
        "HoodieSavepointMetadata",
        "HoodieRestorePlan",
        "HoodieRestoreMetadata",
        "HoodieRollbackPlan",
        "HoodieRollbackMetadata",
    }
    decoded |= assert_every_timeline_file_decodes_in_java(spark, t.path)
    assert decoded >= kinds | ({"HoodieCompactionPlan"} if mor else set())


def _mor_with_a_cleaned_slice_under_a_compaction(tmp_path) -> tuple[OpsTable, str, str]:
    """A compaction C of the 'us' groups, then a deltacommit D on 'eu' only, whose clean (keeping one commit)
    deletes the slice C replaced: rolling C back would leave its rows unreadable."""
    t = OpsTable(
        tmp_path, {**KEEP_ONE, "table.type": "MERGE_ON_READ", "compaction.mode": "off", "clean.async": "false"}
    )
    keys = list(range(12))
    us = [k for k in keys if region_of(k) == "us"]
    eu = [k for k in keys if region_of(k) == "eu"]
    t.land([changes(0, keys), changes(1, us), changes(4, us)])
    t.prepare()
    t.cli("compact", str(t.path), "--delta-commits", "2")
    compaction = t.newest_write("commit")
    t.land([changes(7, eu)])
    t.prepare()
    return t, compaction, t.newest_write()


def test_rollbacks_that_would_lose_rows_are_refused_over_the_cli(tmp_path):
    t, compaction, newest = _mor_with_a_cleaned_slice_under_a_compaction(tmp_path)
    path = str(t.path)
    t.assert_matches()
    # the timeline says what each instant did: the compaction is a commit, shown as a compaction
    assert {i["kind"] for i in t.timeline() if i["instant"] == compaction} == {"compaction"}
    # the real reason first: nothing allows this rollback, so the plain one does not send the operator to --force
    plain = t.cli("rollback", path, compaction, expect_code=REFUSED)
    assert "whose files are gone" in plain.stderr and "needs force" not in plain.stderr
    for args in (["--force"], ["--force", "--dry-run"]):
        refused = t.cli("rollback", path, compaction, *args, expect_code=REFUSED)
        assert "whose files are gone" in refused.stderr and "Restore a savepoint" in refused.stderr, refused.stderr
    # a deltacommit the compaction folded: deleting its logs would take back nothing readers see
    folded = max(
        i["instant"]
        for i in t.timeline()
        if i["action"] == "deltacommit" and i["state"] == "COMPLETED" and i["instant"] < compaction
    )
    for args in ([], ["--force"], ["--force", "--dry-run"]):
        refused = t.cli("rollback", path, folded, *args, expect_code=REFUSED)
        assert (
            f"compaction {compaction} folded {folded}" in refused.stderr and "Restore a savepoint" in refused.stderr
        ), refused.stderr
    t.assert_matches(what="after the refused forced rollback")

    dry = json.loads(t.cli("rollback", path, newest, "--dry-run", "--json").stdout)
    assert dry["files"] and dry["rows"]["updates"] + dry["rows"]["inserts"] > 0, (
        "a dry run names the files and rows that would go"
    )
    t.cli("savepoint", "create", path, newest)
    held = t.cli("rollback", path, newest, expect_code=REFUSED)
    assert f"savepoint {newest} holds {newest}" in held.stderr and "laketide savepoint delete" in held.stderr
    t.cli("rollback", path, newest, "--force", expect_code=REFUSED)
    t.assert_matches(what="after the refused rollback of a savepointed instant")
    t.land([changes(8, list(range(12)))])
    t.run()
    t.assert_matches(what="the job goes on")


def test_rollbacks_that_would_lose_rows_are_refused_over_rest(tmp_path):
    t, compaction, newest = _mor_with_a_cleaned_slice_under_a_compaction(tmp_path)
    port = free_port()
    server = subprocess.Popen(
        [CLI, "serve", "--table", str(t.path), "--port", str(port), "--token", "ops-token"],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    api, auth = f"http://127.0.0.1:{port}", {"Authorization": "Bearer ops-token"}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{api}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                assert server.poll() is None and time.monotonic() < deadline, (
                    server.stderr.read() if server.poll() is not None else "no answer"
                )
                time.sleep(0.3)
        for body in ({"force": True}, {"force": True, "dry_run": True}):
            refused = httpx.post(f"{api}/v1/instants/{compaction}/rollback", json=body, headers=auth, timeout=60)
            assert refused.status_code == 409 and "whose files are gone" in refused.json()["detail"], refused.text
        assert httpx.post(f"{api}/v1/savepoints", json={"instant": newest}, headers=auth, timeout=60).status_code == 200
        held = httpx.post(f"{api}/v1/instants/{newest}/rollback", json={"force": True}, headers=auth, timeout=60)
        assert held.status_code == 409 and "holds" in held.json()["detail"]
    finally:
        server.terminate()
        server.wait(30)
    t.assert_matches(what="after the refused rollbacks")


def test_a_failing_table_service_never_undoes_a_commit(tmp_path):
    t = OpsTable(tmp_path, {**KEEP_ONE, "clean.async": "false"})
    t.land([changes(0), changes(1)])
    t.prepare()
    archived = t.path / ".hoodie" / "archived"
    archived.write_text("not a directory")  # archival now fails at every attempt
    t.land([changes(2), changes(3)])
    went_on = t.run()
    assert "archive after" in went_on.stderr and "the commit stands" in went_on.stderr
    t.assert_matches(what="after a micro-batch whose archival failed once")

    # the attempt at start counts too: the job stops right after committing the next micro-batch
    t.land([changes(4)])
    stopped = t.run(expect_code=1, **{"services.max_consecutive_failures": "2"})
    assert (
        "table service 'archive' failed 2 times in a row" in stopped.stderr and "every commit stands" in stopped.stderr
    )
    t.assert_matches(what="the micro-batch whose archival failed stays committed")
    commits = completed(t, "commit", "0")

    archived.unlink()
    t.land([changes(5)])
    replay = t.run()
    assert "micro-batch 4: already committed, skipped" in replay.stderr
    t.assert_matches(what="after the restart: the replayed micro-batch was not written twice")
    assert len(completed(t, "commit", "0")) <= len(commits) + 1
    assert archived.is_dir() and any(archived.iterdir()), "archival ran again"


@pytest.mark.parametrize("setting", ["write.quarantine_path", "write.exchange_dir"])
def test_a_folder_the_job_writes_that_cannot_be_written_is_refused_at_start(tmp_path, setting):
    t = OpsTable(tmp_path, {})
    t.land([changes(0)])
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for target, why in ((blocker, "is a file"), (blocker / "below", "cannot be written")):
        refused = t.run(expect_code=2, **{setting: str(target)})
        assert f"{setting} = '{target}' {why}" in refused.stderr, refused.stderr
    assert not t.path.exists(), "nothing was written"
    assert os.listdir(tmp_path / "landing")


def test_a_restore_to_a_savepoint_whose_files_are_gone_refuses_and_names_them(tmp_path):
    """Savepoints written before they held log files name base files only, so a clean could take their logs."""
    t = OpsTable(
        tmp_path, {**KEEP_ONE, "table.type": "MERGE_ON_READ", "compaction.mode": "off", "clean.async": "false"}
    )
    path = str(t.path)
    t.land([changes(0), changes(1)])
    t.prepare()
    legacy = t.newest_write()
    table = Table.open(path)
    bases = tuple(s.base_file.path for s in table.file_system_view().latest_slices(as_of=legacy) if s.base_file)
    writer = TimelineWriter(table.io, table.config)
    writer.write(Instant(legacy, SAVEPOINT, State.INFLIGHT))
    writer.write(
        Instant(legacy, SAVEPOINT, State.COMPLETED),
        SavepointMetadata(legacy, "ops", 0, "base files only", bases).to_bytes(),
    )
    t.cli("compact", path, "--delta-commits", "1")
    compaction = t.newest_write("commit")
    t.land([changes(2)])
    t.prepare()  # its clean keeps one commit: the slices under the compaction go, all but the savepointed base files
    before = t.timeline()
    refused = t.cli("restore", path, legacy, expect_code=REFUSED)
    assert (
        "would return part of the table" in refused.stderr
        and ".log." in refused.stderr
        and "Nothing was changed" in refused.stderr
    )
    assert f"The oldest state after it that can be restored without loss is {compaction}" in refused.stderr
    assert t.timeline() == before
    t.assert_matches(what="after the refused restore")


def test_a_pending_compaction_whose_inputs_are_gone_is_rolled_back_not_run(tmp_path):
    t = OpsTable(
        tmp_path, {**KEEP_ONE, "table.type": "MERGE_ON_READ", "compaction.mode": "off", "clean.async": "false"}
    )
    path = str(t.path)
    t.land([changes(0)])
    t.prepare()
    before = t.model.expected()
    t.land([changes(1)])
    t.prepare()
    newest = t.newest_write()
    t.cli("compact", path, "--schedule", "--delta-commits", "1")
    (planned,) = [i["instant"] for i in t.timeline() if i["action"] == "compaction"]
    t.cli("rollback", path, newest)  # takes log files the plan names
    ran = t.cli("compact", path, "--run")
    assert f"compaction {planned} cannot run" in ran.stderr and "rolling it back" in ran.stderr
    assert not [i for i in t.timeline() if i["state"] != "COMPLETED"]
    t.assert_matches(before, what="after the rollback and the compaction that could not run")
    t.model.rows = {r["id"]: dict(r) for r in before}
    t.land([changes(2)])
    t.run(**{"compaction.mode": "inline", "compaction.delta_commits": "1"})
    t.assert_matches(what="the job goes on and compacts")
