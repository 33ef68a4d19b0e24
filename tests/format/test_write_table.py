"""A table written by laketide alone, read back by hudi-rs and checked against a dict model."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from readback import hudi_read, rows
from writes import upsert

from laketide.coordinator import Coordinator, LocalLease, RollbackRefused
from laketide.index.bloom import FOOTER_BLOOM, FOOTER_MAX_KEY, FOOTER_MIN_KEY, BloomFilter
from laketide.table import Table
from laketide.table.format.instant import State
from laketide.table.format.schema import COMMIT_SEQNO, COMMIT_TIME, IS_DELETED, META_COLUMNS, RECORD_KEY

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("ts", pa.int64()),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("region", pa.string()),
        (IS_DELETED, pa.bool_()),
    ]
)
DATA_COLUMNS = ["id", "name", "amount", "ts", "event_time", "region"]


def record(i: int, region: str, version: int, deleted: bool = False) -> dict:
    return {
        "id": i,
        "name": f"name-{i}-v{version}",
        "amount": i * 1.5 + version,
        "ts": version,
        "event_time": datetime(2026, 1, 1, tzinfo=UTC).replace(second=version),
        "region": region,
        IS_DELETED: deleted,
    }


class Model:
    """The expected table: key -> row, plus the commit time of each live row."""

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.commit_time: dict[str, str] = {}

    def apply(self, instant: str, records: list[dict]) -> None:
        for r in records:
            key = str(r["id"])
            if r[IS_DELETED]:
                self.rows.pop(key, None)
                self.commit_time.pop(key, None)
            else:
                self.rows[key] = {c: r[c] for c in DATA_COLUMNS}
                self.commit_time[key] = instant

    def expected(self) -> list[dict]:
        return sorted(self.rows.values(), key=lambda r: r["id"])


def data_rows(table: pa.Table) -> list[dict]:
    return rows(table, "id", DATA_COLUMNS)


@pytest.fixture
def table(tmp_path):
    return Table.create(str(tmp_path / "orders"), "orders", ["id"], ["region"], "ts", schema=SCHEMA)


@pytest.fixture
def coordinator(table, tmp_path):
    lease = LocalLease(str(tmp_path / "orders.lease"), table.uri, job_id="test")
    lease.acquire()
    yield Coordinator(table, lease, writer_id="writer-a")
    lease.release()


def test_three_commits_then_dangling_instant_then_rollback(table, coordinator):
    path = table.uri
    model, snapshots = Model(), {}

    batch1 = [record(i, "us", 1) for i in range(40)] + [record(i, "eu", 1) for i in range(100, 130)]
    c1 = upsert(table, coordinator, 1, batch1, SCHEMA)
    model.apply(c1, batch1)
    snapshots[c1] = copy.deepcopy(model.expected())

    batch2 = [record(i, "us", 2) for i in range(10)] + [record(i, "eu", 2, deleted=True) for i in (100, 101)]
    c2 = upsert(table, coordinator, 2, batch2, SCHEMA)
    model.apply(c2, batch2)
    snapshots[c2] = copy.deepcopy(model.expected())

    batch3 = [record(i, "apac", 3) for i in range(200, 215)]
    c3 = upsert(table, coordinator, 3, batch3, SCHEMA)
    model.apply(c3, batch3)
    snapshots[c3] = copy.deepcopy(model.expected())
    assert c1 < c2 < c3

    dangling_batch = [record(i, "us", 4) for i in range(40)] + [record(i, "latam", 4) for i in range(300, 305)]
    dangling = upsert(table, coordinator, 4, dangling_batch, SCHEMA, commit=False)
    dangling_files = table.file_system_view().uncommitted_files(dangling)
    assert {f.split("/")[0] for f in dangling_files} == {"us", "latam"}

    # hudi-rs: the final rows, no key twice, and the dangling files ignored
    final = hudi_read(path)
    assert data_rows(final) == model.expected()
    assert len(set(final[RECORD_KEY].to_pylist())) == final.num_rows
    assert dangling not in set(final[COMMIT_TIME].to_pylist())
    assert {r[RECORD_KEY]: r[COMMIT_TIME] for r in final.to_pylist()} == model.commit_time
    assert data_rows(table.snapshot()) == model.expected()

    # time travel to each commit
    for instant, expected in snapshots.items():
        assert data_rows(hudi_read(path, as_of=instant)) == expected, instant
        assert data_rows(table.snapshot(as_of=instant)) == expected, instant

    # incremental (c1, c2]: the rows batch 2 upserted, and only those
    expected_inc = sorted(({c: r[c] for c in DATA_COLUMNS} for r in batch2 if not r[IS_DELETED]), key=lambda r: r["id"])
    assert data_rows(hudi_read(path, start=c1, end=c2)) == expected_inc
    assert data_rows(table.incremental(c1, c2)) == expected_inc

    # the dangling instant is pending on our timeline
    pending = table.timeline.pending()
    assert [(i.timestamp, i.state) for i in pending] == [(dangling, State.INFLIGHT)]

    result = coordinator.rollback(dangling)
    assert sorted(result.files) == sorted(dangling_files)
    for f in dangling_files:
        assert not table.io.exists(f)
    assert table.timeline.pending() == []
    assert [i.action for i in table.timeline if i.timestamp == result.rollback_instant] == ["rollback"]
    assert data_rows(hudi_read(path)) == model.expected()


def test_base_files_carry_hudi_footer_and_sorted_keys(table, coordinator):
    batch = [record(i, "us", 1) for i in (5, 3, 9, 1, 7)]
    instant = upsert(table, coordinator, 1, batch, SCHEMA)
    (stat,) = table.timeline.commit_metadata(table.timeline.completed_writes()[0]).write_stats()
    with table.io.open_input(stat.path) as f:
        pf = pq.ParquetFile(f)
        footer = pf.metadata.metadata
        data = pf.read()
    assert data.column_names[:5] == list(META_COLUMNS)
    keys = data[RECORD_KEY].to_pylist()
    assert keys == sorted(keys) == ["1", "3", "5", "7", "9"]
    assert footer[FOOTER_MIN_KEY.encode()] == b"1" and footer[FOOTER_MAX_KEY.encode()] == b"9"
    # sized for the file's five keys (at least 1,000 entries), not Hudi's fixed 60,000
    assert footer[FOOTER_BLOOM.encode()].decode() == BloomFilter.for_keys(keys, num_entries=1_000).serialize()
    assert b"parquet.avro.schema" in footer
    assert b"ARROW:schema" not in footer
    assert set(data[COMMIT_TIME].to_pylist()) == {instant}
    assert stat.num_inserts == 5 and stat.num_writes == 5 and stat.prev_commit == "null"


def _footer_and_keys(table: Table) -> tuple[dict, list[str]]:
    (stat,) = table.timeline.commit_metadata(table.timeline.completed_writes()[-1]).write_stats()
    with table.io.open_input(stat.path) as f:
        pf = pq.ParquetFile(f)
        return pf.metadata.metadata, pf.read(columns=[RECORD_KEY])[RECORD_KEY].to_pylist()


def test_a_merge_carries_the_bloom_filter_over_and_adds_the_inserted_keys(table, coordinator):
    # one index shard: every key may go to the one small group
    upsert(table, coordinator, 1, [record(i, "us", 1) for i in range(1, 6)], SCHEMA, index_shards=1)
    old_bloom = BloomFilter.from_footer(_footer_and_keys(table)[0])
    (_group,) = table.file_system_view().latest_slices()
    # the new keys go into the group, which is small (Hudi's small-file handling, as the product does it)
    batch = [record(2, "us", 2), record(3, "us", 2, deleted=True), record(10, "us", 2), record(11, "us", 2)]
    upsert(table, coordinator, 2, batch, SCHEMA, index_shards=1)
    footer, keys = _footer_and_keys(table)
    bloom = BloomFilter.from_footer(footer)
    assert keys == ["1", "10", "11", "2", "4", "5"]
    assert all(bloom.might_contain(k) for k in keys)
    # not rebuilt from the file's keys: the deleted key stays in the filter, which is the old one plus the inserts
    assert bloom.might_contain("3")
    old_bloom.add_many(pa.array(["10", "11"]))
    assert bloom.serialize() == old_bloom.serialize()
    assert footer[FOOTER_MIN_KEY.encode()] == b"1" and footer[FOOTER_MAX_KEY.encode()] == b"5"


def test_a_carried_bloom_filter_that_outgrew_its_file_is_built_again(tmp_path):
    """Deleted keys stay in a carried filter and keys inserted again count again, so a file group with
    deletes would carry a filter that only grows; past 1.25 times the file's rows the merge builds a new one
    from the keys it writes, as Hudi's merge handle always does."""
    from laketide.table import FileIO
    from laketide.table.format.files import BaseFile
    from laketide.table.format.schema import avro_schema_json, with_meta_schema
    from laketide.writer.files.bucket_writer import BucketWriter, FileGroupTarget
    from laketide.writer.files.settings import FileSettings, TaskFiles

    io = FileIO.for_uri(str(tmp_path))
    schema = pa.schema([("id", pa.string()), (IS_DELETED, pa.bool_())])
    avro = avro_schema_json(with_meta_schema(schema), "t")

    def merge(instant: str, keys: list[str], deleted: bool, current: str | None) -> tuple[str, BloomFilter]:
        keys = sorted(keys)
        rows = pa.table({"id": keys, RECORD_KEY: keys, IS_DELETED: [deleted] * len(keys)})
        base = BaseFile.parse("p", current.rsplit("/", 1)[1]) if current else None
        stat = BucketWriter(
            io, FileGroupTarget("p", "g", base), FileSettings(schema, avro), TaskFiles(instant, 0)
        ).write(rows)
        return stat.path, BloomFilter.from_footer(pq.read_metadata(str(tmp_path / stat.path)).metadata)

    kept = [f"k{i:05d}" for i in range(10)]
    churned = [f"c{i:05d}" for i in range(2_500)]
    path, bloom = merge("20250101000000001", kept, False, None)
    path, bloom = merge("20250101000000002", churned, False, path)
    path, bloom = merge("20250101000000003", churned, True, path)
    assert bloom.count == 2_510 and bloom.might_contain_many(pa.array(churned)).all()  # carried: the deleted keys stay
    path, bloom = merge("20250101000000004", ["k00003"], False, path)
    # 2,510 counted for a file of 10 rows (a filter row holds 1,000): built again from the ten keys
    assert (
        bloom.count == 10 and bloom.serialize() == BloomFilter.for_keys(pa.array(kept), num_entries=1_000).serialize()
    )
    assert not bloom.might_contain_many(pa.array(churned)).any()


def test_copied_rows_keep_commit_time_and_seqno(table, coordinator):
    c1 = upsert(table, coordinator, 1, [record(i, "us", 1) for i in range(6)], SCHEMA)
    before = {r[RECORD_KEY]: r for r in table.snapshot().to_pylist()}
    c2 = upsert(table, coordinator, 2, [record(2, "us", 2)], SCHEMA)
    after = {r[RECORD_KEY]: r for r in hudi_read(table.uri).to_pylist()}
    for key in ("0", "1", "3", "4", "5"):
        assert after[key][COMMIT_TIME] == c1
        assert after[key][COMMIT_SEQNO] == before[key][COMMIT_SEQNO]
    assert after["2"][COMMIT_TIME] == c2
    (stat,) = table.timeline.commit_metadata(table.timeline.completed_writes()[-1]).write_stats()
    assert (stat.num_update_writes, stat.num_inserts, stat.num_writes, stat.prev_commit) == (1, 0, 6, c1)


def test_replayed_batch_id_is_skipped(table, coordinator):
    first = upsert(table, coordinator, 7, [record(1, "us", 1)], SCHEMA)
    assert first is not None
    assert coordinator.begin(7) is None
    assert upsert(table, coordinator, 7, [record(1, "us", 9)], SCHEMA) is None
    assert len(table.timeline.completed_writes()) == 1
    assert table.snapshot()["ts"].to_pylist() == [1]
    # another writer (a new checkpoint) may use the same batch id
    other = Coordinator(table, coordinator.lease, writer_id="writer-b")
    assert other.begin(7) is not None


def test_commit_metadata_records_batch_writer_epoch_and_schema(table, coordinator):
    upsert(table, coordinator, 3, [record(1, "us", 1)], SCHEMA)
    timeline = table.timeline
    meta = timeline.commit_metadata(timeline.completed_writes()[0])
    extra = meta.extra_metadata
    assert extra["laketide.batch.id"] == "3"
    assert extra["laketide.writer.id"] == "writer-a"
    assert extra["laketide.lease.epoch"] == "1"
    assert '"name":"region"' in extra["schema"] and "_hoodie" not in extra["schema"]
    assert meta.operation_type == "UPSERT"
    assert list(meta.partition_to_write_stats) == ["us"]


def test_rollback_of_older_completed_instant_needs_force(table, coordinator):
    c1 = upsert(table, coordinator, 1, [record(i, "us", 1) for i in range(3)], SCHEMA)
    upsert(table, coordinator, 2, [record(i, "us", 2) for i in range(3)], SCHEMA)
    with pytest.raises(RollbackRefused, match="force"):
        coordinator.rollback(c1)
    dry = coordinator.rollback(c1, force=True, dry_run=True)
    assert dry.dry_run and dry.files and all(table.io.exists(f) for f in dry.files)


def test_rollback_of_newest_completed_instant_restores_previous_state(table, coordinator):
    upsert(table, coordinator, 1, [record(i, "us", 1) for i in range(3)], SCHEMA)
    expected = data_rows(hudi_read(table.uri))
    c2 = upsert(table, coordinator, 2, [record(i, "us", 2) for i in range(3)] + [record(9, "eu", 2)], SCHEMA)
    result = coordinator.rollback(c2)
    assert result.was_completed
    assert data_rows(hudi_read(table.uri)) == expected
    assert not table.timeline.is_completed_write(c2)


def test_writes_refused_without_lease(table, tmp_path):
    lease = LocalLease(str(tmp_path / "x.lease"), table.uri)
    with pytest.raises(Exception, match="not held"):
        Coordinator(table, lease, "w").begin(1)


def test_replacecommit_hides_replaced_file_groups(table, coordinator):
    from foreign_writer import write_file_groups

    from laketide.table.format.instant import REPLACE_COMMIT

    c1 = upsert(table, coordinator, 1, [record(i, "us", 1) for i in range(5)], SCHEMA)
    (old_group,) = {
        s.file_id for s in table.timeline.commit_metadata(table.timeline.completed_writes()[0]).write_stats()
    }
    # rewrite the same keys into a brand-new file group, as clustering does
    instant = coordinator.begin(2, action=REPLACE_COMMIT)
    data = pa.Table.from_pylist([record(i, "us", 2) for i in range(5)], SCHEMA)
    stats = write_file_groups(table, instant, data, SCHEMA, new_groups_only=True)
    coordinator.commit(
        instant, stats, action=REPLACE_COMMIT, operation="cluster", replaced_file_ids={"us": [old_group]}
    )
    expected = sorted(({c: record(i, "us", 2)[c] for c in DATA_COLUMNS} for i in range(5)), key=lambda r: r["id"])
    assert data_rows(hudi_read(table.uri)) == expected
    assert data_rows(table.snapshot()) == expected
    assert {s.file_id for s in table.file_system_view().latest_slices()} != {old_group}
    assert data_rows(table.snapshot(as_of=c1)) == data_rows(hudi_read(table.uri, as_of=c1))
    assert [i.action for i in table.timeline.completed_writes()] == ["commit", REPLACE_COMMIT]


def test_sequence_numbers_are_the_same_with_and_without_the_compiled_module(monkeypatch):
    """``{instant}_{task}_{n}``, counting on across the files of a task and past each power of ten, made in C where
    the module is built and by Arrow otherwise."""
    from laketide.writer.files import settings
    from laketide.writer.files.settings import SequenceNumbers

    def taken(expected: int) -> list[str]:
        numbers = SequenceNumbers("20261201000000001", 3, expected)
        return [v for n in (7, 2, 1_000, 95, 12_000) for v in numbers.next(n).to_pylist()]

    made = taken(0), taken(13_104)
    assert made[0] == made[1] == [f"20261201000000001_3_{i}" for i in range(13_104)]
    assert settings.compiled is not None
    monkeypatch.setattr(settings, "compiled", None)
    assert taken(0) == made[0]
