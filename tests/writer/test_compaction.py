"""Compaction of merge-on-read tables: inline and async in the job, the ``compact`` command beside writes, a kill
part-way, archival of a completed compaction's plan, and the async compactor yielding to micro-batches; every
read against the model through hudi-rs."""

from __future__ import annotations

import itertools
import json

import pyarrow.parquet as pq
import pytest
from readback import hudi_read, rows
from streaming import COMPACTING_BATCHES, DATA_COLUMNS, expected_after, job_config, land_all

from laketide.spark.job import run
from laketide.table import Table


@pytest.mark.parametrize("mode", ["inline", "async"])
def test_compaction_in_the_job_keeps_every_read_equal_to_the_model(spark, tmp_path, mode):
    from commands import laketide

    land_all(tmp_path, COMPACTING_BATCHES)
    run(job_config(tmp_path, table__type="MERGE_ON_READ", compaction__delta_commits="2", compaction__mode=mode))
    path = tmp_path / "table"
    table = Table.open(str(path))
    writes = table.timeline.completed_writes()
    compactions = [i for i in writes if i.action == "commit"]
    assert len(compactions) == 3 and all(table.timeline.commit_metadata(c).compacted for c in compactions)
    assert not table.timeline.pending()
    # every slice is compacted: base files at the last compaction, no logs left on them
    slices = table.file_system_view().latest_slices()
    assert {s.base_instant for s in slices} == {compactions[-1].timestamp} and not any(s.log_files for s in slices)
    assert rows(table.read_optimized(), "id", DATA_COLUMNS) == expected_after(COMPACTING_BATCHES)
    deltas = [i for i in writes if i.action == "deltacommit"]
    for n, instant in enumerate(deltas, start=1):
        expected = expected_after(COMPACTING_BATCHES[:n])
        assert rows(hudi_read(path, as_of=instant.timestamp), "id", DATA_COLUMNS) == expected, instant
        assert rows(table.snapshot(instant.timestamp), "id", DATA_COLUMNS) == expected, instant
    # incremental reads across compactions: a compaction adds no change of its own
    for start, end in itertools.pairwise(deltas):
        theirs = hudi_read(path, start=start.timestamp, end=end.timestamp)
        assert rows(table.incremental(start.timestamp, end.timestamp), "id", DATA_COLUMNS) == rows(
            theirs, "id", DATA_COLUMNS
        )
        assert {r["ts"] for r in rows(theirs, "id", DATA_COLUMNS)} <= {deltas.index(end) + 1}

    # cleaning down to one version per group removes the older slices, logs included
    view = table.file_system_view()
    assert any(lf.base_instant != compactions[-1].timestamp for g in view.groups.values() for lf in g.log_files)
    code, _out, err = laketide(
        "clean", str(path), "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retain-file-versions", "1", "--json"
    )
    assert code == 0, err
    view = Table.open(str(path)).file_system_view()
    assert all(len(g.base_files) == 1 and not g.log_files for g in view.groups.values())
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == expected_after(COMPACTING_BATCHES)


def test_compact_command_and_writes_during_a_pending_compaction(spark, tmp_path):
    from commands import laketide

    land_all(tmp_path, COMPACTING_BATCHES[:3])
    config = dict(table__type="MERGE_ON_READ", compaction__mode="off")
    run(job_config(tmp_path, **config))
    path = tmp_path / "table"
    code, out, err = laketide("compact", str(path), "--schedule", "--delta-commits", "2", "--json")
    assert code == 0, err
    scheduled = json.loads(out)["scheduled"]
    assert scheduled and Table.open(str(path)).timeline.pending()[0].action == "compaction"

    planned = {lf.name for s in Table.open(str(path)).file_system_view().latest_slices() for lf in s.log_files}
    # micro-batches while the compaction is pending: their logs stay on the committed slices, where every reader sees
    # them
    land_all(tmp_path, COMPACTING_BATCHES[:5])
    run(job_config(tmp_path, **config))
    table = Table.open(str(path))
    late = [lf for s in table.file_system_view().latest_slices() for lf in s.log_files if lf.name not in planned]
    assert late and all(lf.base_instant < scheduled for lf in late)
    assert (
        rows(hudi_read(path), "id", DATA_COLUMNS)
        == expected_after(COMPACTING_BATCHES[:5])
        == rows(table.snapshot(), "id", DATA_COLUMNS)
    )

    # the job's write.parquet_compression, given to the command, which does not read the job's configuration
    code, out, err = laketide("compact", str(path), "--run", "--json", "--parquet-compression", "snappy")
    assert code == 0, err
    assert [c["instant"] for c in json.loads(out)["compacted"]] == [scheduled]
    table = Table.open(str(path))
    slices = table.file_system_view().latest_slices()
    assert {
        pq.ParquetFile(table.io.full_path(s.base_file.path)).metadata.row_group(0).column(0).compression for s in slices
    } == {"SNAPPY"}
    # the logs written since the plan were carried over to the new slices, blocks and all
    carried = [lf for s in slices for lf in s.log_files]
    assert {s.base_instant for s in slices} == {scheduled} and len(carried) == len(late)
    assert all(lf.base_instant == scheduled for lf in carried)
    assert sorted(table.io.read_bytes(lf.path) for lf in carried) == sorted(table.io.read_bytes(lf.path) for lf in late)
    assert (
        rows(hudi_read(path), "id", DATA_COLUMNS)
        == expected_after(COMPACTING_BATCHES[:5])
        == rows(table.snapshot(), "id", DATA_COLUMNS)
    )

    code, out, err = laketide("compact", str(Table.open(str(tmp_path / "table")).uri), "--run")
    assert code == 0 and "no pending compaction" in out


def test_a_kill_during_compaction_then_recovery(tmp_path):
    """The job killed while a compaction writes its base files (kills at the steps of a deltacommit are
    ``test_exactly_once``'s): readers go on seeing the logs, the restart finishes the compaction, and
    the table equals the model."""
    import os
    import subprocess

    from streaming import PYTHON, RUNNER

    land_all(tmp_path, COMPACTING_BATCHES)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    settings = ["table.type=MERGE_ON_READ", "compaction.delta_commits=2", "compaction.mode=inline"]
    path = tmp_path / "table"
    for point, batch in [("compaction-written", -1), ("-", 0)]:
        result = subprocess.run(
            [PYTHON, str(RUNNER), str(tmp_path), point, str(batch), *settings],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == (0 if point == "-" else 137), result.stderr[-3000:]
        if point == "compaction-written":
            # killed with the base files written: the compaction is pending, and readers still see the logs
            pending = Table.open(str(path)).timeline.pending()
            assert [i.action for i in pending] == ["compaction"]
            assert rows(hudi_read(path), "id", DATA_COLUMNS) == expected_after(COMPACTING_BATCHES[:3])
    table = Table.open(str(path))
    timeline = table.timeline
    assert timeline.pending() == []
    assert (
        rows(hudi_read(path), "id", DATA_COLUMNS)
        == expected_after(COMPACTING_BATCHES)
        == rows(table.snapshot(), "id", DATA_COLUMNS)
    )
    deltas = [c for c in timeline.completed_writes() if c.action == "deltacommit"]
    assert sorted(int(timeline.commit_metadata(c).extra_metadata["laketide.batch.id"]) for c in deltas) == list(
        range(len(COMPACTING_BATCHES))
    )
    assert len([c for c in timeline.completed_writes() if c.action == "commit"]) >= 2


def test_archival_takes_a_compaction_plan_with_its_commit(spark, tmp_path):
    """A completed compaction is a commit plus its plan files: archived together, or the plan would read as pending."""
    from laketide.table.format.archive import ArchivedTimeline

    land_all(tmp_path, COMPACTING_BATCHES)
    run(
        job_config(
            tmp_path,
            table__type="MERGE_ON_READ",
            compaction__delta_commits="2",
            compaction__mode="inline",
            archive__min_commits="4",
            archive__max_commits="6",
            clean__retain_commits="3",
        )
    )
    table = Table.open(str(tmp_path / "table"))
    timeline = table.timeline
    assert timeline.pending() == []
    archived = [a.instant for a in ArchivedTimeline(table.io, table.config.archive_dir).instants()]
    plans = [i for i in archived if i.action == "compaction"]
    assert plans and {i.timestamp for i in plans} <= {i.timestamp for i in archived if i.action == "commit"}
    names = [e.name for e in table.io.list_dir(table.config.timeline_dir) if not e.is_dir]
    assert not any(name.split(".")[0] in {i.timestamp for i in plans} for name in names)
    assert rows(hudi_read(tmp_path / "table"), "id", DATA_COLUMNS) == expected_after(COMPACTING_BATCHES)


def test_an_async_compaction_waits_for_the_micro_batch_being_written_but_not_forever():
    """Before each slice, the compactor waits for the job's batch lock (held while a micro-batch is
    written), up to ``compaction.yield_seconds``; the CLI's compactor, whose lock no job holds, never waits."""
    import threading
    import time

    from laketide.config import CompactionSection
    from laketide.writer.job.compactor import Compactor

    def waited(held_for: float, yield_seconds: float, job: bool = True) -> float:
        compactor = Compactor.__new__(Compactor)
        compactor.settings = CompactionSection(yield_seconds=yield_seconds)
        compactor.finish_lock = threading.RLock()
        compactor._yield_to = compactor.finish_lock
        batch_lock = compactor.finish_lock if job else threading.RLock()
        taken, release = threading.Event(), threading.Event()

        def micro_batch():
            with batch_lock:
                taken.set()
                release.wait(held_for)

        writer = threading.Thread(target=micro_batch)
        writer.start()
        taken.wait(5)
        started = time.monotonic()
        compactor._yield_to_batch()
        seconds = time.monotonic() - started
        release.set()
        writer.join()
        return seconds

    assert 0.25 <= waited(held_for=0.3, yield_seconds=10) < 5  # until the micro-batch is done
    assert 0.15 <= waited(held_for=5, yield_seconds=0.2) < 2  # no longer than yield_seconds
    assert waited(held_for=5, yield_seconds=0) < 0.1
    assert waited(held_for=5, yield_seconds=10, job=False) < 0.1
