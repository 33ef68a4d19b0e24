"""Archival: the active timeline stays short, the archived one is Hudi's log format, and nothing failed turns
visible."""

from __future__ import annotations

import itertools
import threading

import pyarrow as pa
import pytest
from crashes import CrashingFileIO, SimulatedCrash
from fixture_tables import FIXTURES
from java_avro import java_avro_read, java_container_read
from readback import rows
from writes import HISTORY_SCHEMA, rewritten_history, state_at, upsert

from laketide.coordinator import Coordinator
from laketide.coordinator.archiver import Archiver
from laketide.coordinator.cleaner import Cleaner
from laketide.index.state import StateIndex
from laketide.table import Table
from laketide.table.format import avro_models
from laketide.table.format.archive import ArchivedTimeline, archived_entry
from laketide.table.format.clean import Retention
from laketide.table.format.files import BaseFile
from laketide.table.format.instant import CLEAN, COMMIT, Instant, State
from laketide.table.format.logfile import Header, avro_data_block, avro_payloads, avro_records, read_blocks
from laketide.table.storage.io import FileIO

LOG_FIXTURES = ["valid_log_avro_data.log", "valid_log_delete.log", "valid_log_parquet_data.log"]


@pytest.mark.parametrize("name", LOG_FIXTURES)
def test_hudi_written_log_files_read_and_write_back_byte_for_byte(name):
    data = (FIXTURES / "hudi-log-files" / name).read_bytes()
    blocks = list(read_blocks(data))
    assert len(blocks) == 1
    assert b"".join(b.to_bytes() for b in blocks) == data


def test_an_avro_data_block_of_hudi_decodes_with_its_header_schema():
    (block,) = read_blocks((FIXTURES / "hudi-log-files" / "valid_log_avro_data.log").read_bytes())
    (record,) = avro_records(block)
    assert block.header[Header.INSTANT_TIME] == record["_hoodie_commit_time"] == "20250316025828811"
    assert record["city"] == "san_francisco" and record["uuid"] == record["_hoodie_record_key"]


def archived_table(path, commits=12, min_commits=4, max_commits=6):
    table, coordinator, lease, instants, reads = rewritten_history(path, commits=commits)
    Cleaner(coordinator, Retention(commits=3)).clean()
    result = Archiver(coordinator, min_commits, max_commits).archive()
    return table, coordinator, lease, instants, reads, result


def test_archival_keeps_min_commits_and_the_table_reads_the_same(tmp_path):
    table, _coordinator, lease, instants, reads, result = archived_table(tmp_path / "t")
    timeline = Table.open(table.uri).timeline
    active = [i.timestamp for i in timeline.completed_writes()]
    assert active == instants[-4:], "the newest min_commits writes stay active"
    assert [i.timestamp for i in result.archived if i.action == COMMIT] == instants[:-4]
    assert not any(
        table.io.exists(f".hoodie/{t}.commit") or table.io.exists(f".hoodie/{t}.inflight") for t in instants[:-4]
    )
    assert state_at(table.uri) == reads[instants[-1]], "hudi-rs reads the same table"
    for instant in instants[-3:]:
        assert state_at(table.uri, as_of=instant) == reads[instant]
    assert Table.open(table.uri).snapshot().num_rows == len(reads[instants[-1]])

    archived = ArchivedTimeline(table.io, table.config.archive_dir)
    assert [name for _, name in archived.files()] == [".hoodie/archived/.commits_.archive.1_1-0-1"]
    entries = archived.instants()
    assert sorted({(a.instant.timestamp, a.instant.state) for a in entries if a.instant.action == COMMIT}) == sorted(
        (t, s) for t in instants[:-4] for s in State
    ), "requested, inflight and completed of every archived commit"
    completed = [a for a in entries if a.instant.action == COMMIT and a.instant.state is State.COMPLETED]
    assert all(a.entry["hoodieCommitMetadata"]["partitionToWriteStats"] for a in completed)
    assert [a.extra_metadata["laketide.batch.id"] for a in completed] == [str(n) for n in range(len(completed))]
    lease.release()


def test_replayed_batches_stay_skipped_after_their_commits_are_archived(tmp_path):
    table, _coordinator, lease, instants, _reads, _ = archived_table(tmp_path / "t")
    fresh = Coordinator(Table.open(table.uri), lease, "w")
    assert fresh.is_committed(0), "batch 0's commit is archived; the newer commits carry its id forward"
    assert fresh.is_committed(len(instants) - 1) and not fresh.is_committed(len(instants))
    assert fresh.begin(3) is None
    lease.release()


def test_the_archive_file_is_read_by_javas_avro(spark, tmp_path):
    table, _coordinator, lease, _instants, _reads, _ = archived_table(tmp_path / "t")
    archived = ArchivedTimeline(table.io, table.config.archive_dir)
    (block,) = read_blocks(table.io.read_bytes(archived.files()[0][1]))
    assert block.header[Header.SCHEMA] == avro_models.schema_json("HoodieArchivedMetaEntry")
    decoded = [java_avro_read(spark, block.header[Header.SCHEMA], payload) for payload in avro_payloads(block)]
    assert len(decoded) == len(archived.instants()) and '"actionType": "commit"' in decoded[0]
    completed = [d for d in decoded if '"actionState": "COMPLETED"' in d]
    assert completed and all('"partitionToWriteStats": {"eu": [{"fileId": "' in d for d in completed)
    timeline = Table.open(table.uri).timeline
    for clean in timeline.filter({State.COMPLETED}, [CLEAN]):
        assert '"policy": "KEEP_LATEST_COMMITS"' in java_container_read(spark, timeline.read_bytes(clean))
    lease.release()


def test_every_registry_schema_parses_in_javas_avro(spark):
    jvm = spark._jvm
    for name in avro_models.DEFINITIONS:
        parsed = jvm.org.apache.avro.Schema.Parser().parse(avro_models.schema_json(name))
        assert parsed.getFullName() == f"org.apache.hudi.avro.model.{name}"


def test_a_block_we_write_reads_back(tmp_path):
    block = avro_data_block("HoodieInstantInfo", [{"commitTime": "20260101000000000", "action": "commit"}])
    (again,) = read_blocks(block.to_bytes())
    assert avro_records(again) == [{"commitTime": "20260101000000000", "action": "commit"}]


def test_a_failed_writes_leftovers_hold_archival_until_cleaned(tmp_path):
    table, coordinator, lease, instants, reads = rewritten_history(tmp_path / "t", commits=12)
    orphan = BaseFile("region=us", "orphan-0", "0-0-0", str(int(instants[2]) + 1))
    table.io.write_bytes(orphan.path, b"a failed write's file")
    archiver = Archiver(coordinator, 4, 6)
    held = archiver.archive()
    assert all(i.timestamp < orphan.instant_time for i in held.archived)
    assert Table.open(table.uri).timeline.start <= orphan.instant_time, "the orphan stays inside the active timeline"
    assert state_at(table.uri) == reads[instants[-1]]
    Cleaner(coordinator, Retention(commits=3)).clean()
    assert not table.io.exists(orphan.path)
    archiver.archive()
    assert [i.timestamp for i in Table.open(table.uri).timeline.completed_writes()] == instants[-4:]
    assert state_at(table.uri) == reads[instants[-1]]
    lease.release()


def test_an_index_run_of_a_failed_write_holds_archival(tmp_path):
    table, coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=12)
    failed = str(int(instants[3]) + 1)
    index = StateIndex.open(table.io, 2)
    table.io.write_bytes(f"{StateIndex.shard_dir(0)}/delta_{failed}_0.arrow", b"a failed write's run")
    Archiver(coordinator, 4, 6, index.instants).archive()
    assert Table.open(table.uri).timeline.start < failed
    lease.release()


def test_pending_writes_hold_archival(tmp_path):
    table, coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=12)
    pending = coordinator.begin(99)
    for n in range(3):
        instants.append(upsert(table, coordinator, 100 + n, [{"id": 1, "v": 100 + n, "region": "eu"}], HISTORY_SCHEMA))
    Archiver(coordinator, 4, 6).archive()
    timeline = Table.open(table.uri).timeline
    assert timeline.pending()[0].timestamp == pending
    assert timeline.completed_writes()[0].timestamp < pending, "the completed write before the pending one stays too"
    lease.release()


def test_an_archival_interrupted_after_any_step_is_finished_by_the_next(tmp_path):
    crash_points = 0
    for budget, after in ((b, a) for b in itertools.count(1) for a in (False, True)):
        table, _coordinator, lease, instants, reads = rewritten_history(tmp_path / f"t-{budget}-{after}", commits=9)
        crashing = Table(CrashingFileIO(table.io, budget, after), table.config)
        try:
            Archiver(Coordinator(crashing, lease, "w"), 4, 6).archive()
            finished = True
        except SimulatedCrash:
            finished = False
            crash_points += 1
        assert state_at(table.uri) == reads[instants[-1]]
        Archiver(Coordinator(Table.open(table.uri), lease, "w"), 4, 6).archive()
        timeline = Table.open(table.uri).timeline
        assert [i.timestamp for i in timeline.completed_writes()] == instants[-4:]
        assert timeline.pending() == []
        archived = ArchivedTimeline(table.io, table.config.archive_dir).instants()
        keys = [(a.instant.timestamp, a.instant.action, a.instant.state) for a in archived]
        assert len(keys) == len(set(keys)), "no timeline file archived twice"
        assert {a.instant.timestamp for a in archived} == set(instants[:-4])
        assert state_at(table.uri) == reads[instants[-1]]
        lease.release()
        if finished:
            break
    assert crash_points >= 4


def test_archivals_append_blocks_to_the_newest_file_until_it_is_full(tmp_path):
    table, _coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=8)
    archived = ArchivedTimeline(table.io, table.config.archive_dir)
    first = archived.append([archived_entry(i, b"") for i in [Instant(instants[0], "rollback", State.INFLIGHT)]])
    second = archived.append([archived_entry(i, b"") for i in [Instant(instants[1], "rollback", State.INFLIGHT)]])
    assert first == second and len(list(read_blocks(table.io.read_bytes(first)))) == 2
    assert archived.last_block_instants() == {Instant(instants[1], "rollback", State.INFLIGHT)}
    third = archived.append([archived_entry(Instant(instants[2], "rollback", State.INFLIGHT), b"")], max_file_bytes=1)
    assert third.endswith(".commits_.archive.2_1-0-1")
    assert [a.instant.timestamp for a in archived.instants()] == instants[:3]
    lease.release()


class ArchivingFileIO(FileIO):
    """A real FileIO on which archival happens between a timeline's listing and the first read of a commit file
    the listing shows, as the services thread's archival can beside a micro-batch."""

    def __init__(self, io: FileIO, archive):
        super().__init__(io.fs, io.base_path)
        self.archive = archive

    def read_bytes(self, rel):
        if self.archive is not None and rel.startswith(".hoodie/") and rel.endswith(".commit"):
            archive, self.archive = self.archive, None
            assert archive().archived, "the commit about to be read is archived"
        return super().read_bytes(rel)


def test_a_timeline_listed_before_an_archival_still_reads_the_commits_it_shows(tmp_path):
    table, coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=12)
    Cleaner(coordinator, Retention(commits=3)).clean()
    reader = Table.open(table.uri)
    before = reader.timeline
    assert [before.commit_metadata(i).extra_metadata["laketide.batch.id"] for i in before.completed_writes()]
    # the cache keeps as many commits that left the timeline as the timeline holds (a larger archival falls
    # to the readers drawing again, ``drawn_again``)
    Archiver(coordinator, 6, 8).archive()
    after = reader.timeline  # loaded on the same cache, by another thread
    assert len(after.completed_writes()) == 6 and not table.io.exists(f".hoodie/{instants[0]}.commit")
    oldest = before.completed_writes()[0]
    assert oldest.timestamp == instants[0]
    assert before.commit_metadata(oldest).extra_metadata["laketide.batch.id"] == "0"
    lease.release()


@pytest.mark.parametrize("racing", ["begin", "plan"])
def test_a_micro_batch_whose_listed_commits_are_archived_meanwhile_reads_the_timeline_again(tmp_path, racing):
    """A writer that has not read the table's commits yet (a job's first micro-batch, beside the services round
    the job starts with) lists the timeline, and archival moves a commit away before it is read: the micro-batch
    lists again rather than failing."""
    table, coordinator, lease, _instants, _reads = rewritten_history(tmp_path / "t", commits=12)
    Cleaner(coordinator, Retention(commits=3)).clean()
    racing_table = Table.open(table.uri, io=ArchivingFileIO(table.io, Archiver(coordinator, 4, 6).archive))
    # its own coordinator reads every commit when the instant begins; else the plan is the first to read them
    writer_coordinator = Coordinator(racing_table if racing == "begin" else Table.open(table.uri), lease, "w")
    if racing == "plan":
        writer_coordinator.committed_batches()
    records = [{"id": i, "v": 12, "region": ("us", "eu")[i % 2]} for i in range(20)]
    instant = upsert(racing_table, writer_coordinator, 12, records, HISTORY_SCHEMA)
    assert instant is not None and racing_table.io.archive is None, "archival ran in the middle"
    assert len(Table.open(table.uri).timeline.completed_writes()) == 5
    assert state_at(table.uri) == rows(
        pa.Table.from_pylist(records, schema=HISTORY_SCHEMA), "id", ["id", "v", "region"]
    )
    lease.release()


def test_archival_deletes_timeline_files_only_between_micro_batches(tmp_path):
    """A listing of the timeline made while archival deletes its files can show a commit gone and an older one
    still there: such a timeline starts before the commit, which then reads as never completed. A micro-batch
    planned from one saw the file groups a compaction had just rewritten as empty (the compaction's commit
    gone, its base files none of the table's) and inserted every key of theirs again into new file groups. So
    the deletes wait for the writer's batch lock: a micro-batch lists the timeline whole."""
    table, coordinator, lease, _instants, _reads = rewritten_history(tmp_path / "t", commits=12)
    Cleaner(coordinator, Retention(commits=3)).clean()
    batch_lock = threading.RLock()
    archiver = Archiver(coordinator, 4, 6, batch_lock=batch_lock)
    before = table.timeline.completed_writes()
    with batch_lock:  # a micro-batch is being written
        archiving = threading.Thread(target=archiver.archive)
        archiving.start()
        archiving.join(timeout=5)
        assert archiving.is_alive(), "archival waits for the micro-batch before it deletes"
        assert Table.open(table.uri).timeline.completed_writes() == before
    archiving.join(timeout=30)
    assert not archiving.is_alive()
    assert len(Table.open(table.uri).timeline.completed_writes()) == 4
    lease.release()


def test_the_listed_timeline_merges_the_archive_with_an_older_clean_still_active(tmp_path):
    """Archival goes by action: a clean kept on the active timeline can be older than commits archived after it.
    Every commit is listed, once, newest first, and pages of the listing join up."""
    from laketide.table.inspect.timeline import timeline_page

    table, coordinator, lease, instants, _reads = rewritten_history(tmp_path / "t", commits=4)
    assert Cleaner(coordinator, Retention(commits=1)).clean().clean_instant is not None
    instants += [
        upsert(
            table, coordinator, n, [{"id": i, "v": n, "region": ("us", "eu")[i % 2]} for i in range(6)], HISTORY_SCHEMA
        )
        for n in range(4, 12)
    ]
    Cleaner(coordinator, Retention(commits=3)).clean()
    Archiver(coordinator, 4, 6).archive()
    table = Table.open(table.uri)
    assert table.timeline.instants[0].action == CLEAN and len(table.timeline.completed_writes()) == 4
    listed = timeline_page(table, None, [COMMIT], None, 100).items
    assert [row.instant for row in listed] == sorted(instants, reverse=True)
    pages, before = [], None
    while True:
        page = timeline_page(table, None, None, before, 5)
        pages += [(row.instant, row.action) for row in page.items]
        if page.next_before is None:
            break
        before = page.next_before
    assert pages == sorted(set(pages), reverse=True) and {i for i, a in pages if a == COMMIT} == set(instants)
    lease.release()
