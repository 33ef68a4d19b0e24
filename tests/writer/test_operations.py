"""write.operation (insert, bulk_insert, delete_partition) and the global index, through the real job,
read back with hudi-rs and compared with a model."""

from __future__ import annotations

import collections
import posixpath

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from readback import hudi_read, rows
from streaming import DATA_COLUMNS, Model, job_config, land, row

from laketide.index.state import StateIndex
from laketide.spark.job import run
from laketide.table import Table
from laketide.table.format import avro_models
from laketide.table.format.instant import REPLACE_COMMIT, State
from laketide.table.format.schema import COMMIT_SEQNO, COMMIT_TIME, FILE_NAME, PARTITION_PATH, RECORD_KEY


class Landing:
    """Micro-batches landed one file at a time, each run by the job under its own settings."""

    def __init__(self, root):
        self.root = root
        self.n = 0

    def run(self, lines: list, **settings) -> Table:
        land(self.root, f"batch-{self.n:03d}.json", lines, 1_700_000_000 + self.n)
        self.n += 1
        run(job_config(self.root, **settings))
        return Table.open(str(self.root / "table"))


def table_rows(root) -> list[dict]:
    return rows(hudi_read(root / "table"), "id", DATA_COLUMNS)


def last_commit(table: Table):
    instant = table.timeline.completed_writes()[-1]
    return instant, table.timeline.commit_metadata(instant)


@pytest.mark.parametrize("version", [6, 8])
def test_bulk_insert_loads_sorted_deduplicated_files_that_upserts_then_find(spark, tmp_path, version):
    landing, model = Landing(tmp_path), Model()
    load = [row(i, 1) for i in range(1, 301)] + [row(7, 5), row(8, 0), row(9, 1), row(10, 3, deleted=True)]
    model.apply(load)
    table = landing.run(
        load,
        write__operation="bulk_insert",
        write__target_file_size="2k",
        write__small_file_limit="1k",
        table__version=version,
    )
    assert table.config.version == version
    assert table_rows(tmp_path) == model.expected()
    instant, metadata = last_commit(table)
    assert metadata.operation_type == "BULK_INSERT"
    stats = metadata.write_stats()
    assert all(s.num_inserts == s.num_writes and s.prev_commit == "null" for s in stats)
    per_partition = collections.Counter(s.partition_path for s in stats)
    assert min(per_partition.values()) > 1, "a load above the target size is split into several file groups"
    seqnos = []
    for stat in stats:
        path = table.io.full_path(stat.path)
        written = pq.read_table(path, columns=[RECORD_KEY, COMMIT_SEQNO, COMMIT_TIME, PARTITION_PATH, FILE_NAME])
        keys = written[RECORD_KEY].to_pylist()
        assert keys == sorted(keys) and len(keys) == len(set(keys))
        seqnos += written[COMMIT_SEQNO].to_pylist()
        # the meta columns of one value per file, written from dictionaries, read back as Hudi writes them
        assert [written[c].type for c in (COMMIT_TIME, PARTITION_PATH, FILE_NAME)] == [pa.string()] * 3
        assert set(written[COMMIT_TIME].to_pylist()) == {instant.timestamp}
        assert set(written[PARTITION_PATH].to_pylist()) == {stat.partition_path}
        assert set(written[FILE_NAME].to_pylist()) == {posixpath.basename(stat.path)}
        footer = pq.ParquetFile(path)
        named = footer.metadata.row_group(0).column(footer.schema_arrow.get_field_index(FILE_NAME)).statistics
        assert named.min == named.max == posixpath.basename(stat.path)
    assert len(seqnos) == len(set(seqnos)) == len(model.rows), "one seqno per record of the instant"
    # every key is indexed and every new group covered: updates find their group, nothing is probed
    index = StateIndex.open(table.io, 2)
    snapshot = index.snapshot({instant.timestamp})
    assert {(s.partition_path, s.file_id) for s in stats} <= snapshot.covered
    assert sum(index.load_shard(snapshot, shard).hashes.size for shard in range(2)) == len(model.rows)

    updates = [row(i, 2) for i in range(1, 300, 7)] + [row(1000, 2)]
    model.apply(updates)
    table = landing.run(updates)
    assert table_rows(tmp_path) == model.expected()
    _, metadata = last_commit(table)
    assert metadata.operation_type == "UPSERT" and metadata.totals()["updates"] == 43


@pytest.mark.parametrize("version", [6, 8])
def test_insert_does_not_look_keys_up(spark, tmp_path, version):
    landing = Landing(tmp_path)
    assert landing.run([row(i, 1) for i in range(1, 11)], table__version=version).config.version == version
    # no small file to fill, so every insert opens a new file group: an existing key is written a second time
    table = landing.run([row(1, 2), row(2, 2), row(50, 2)], write__operation="insert", write__small_file_limit="1")
    _, metadata = last_commit(table)
    assert metadata.operation_type == "INSERT" and metadata.totals()["inserts"] == 3
    read = hudi_read(tmp_path / "table")
    ids = collections.Counter(read["id"].to_pylist())
    assert ids[1] == 2 and ids[2] == 2 and ids[50] == 1 and ids[3] == 1
    assert sorted(r["ts"] for r in read.to_pylist() if r["id"] == 1) == [1, 2]


def test_delete_partition_replaces_every_file_group_of_the_partitions(spark, tmp_path):
    landing, model = Landing(tmp_path), Model()
    first = (
        [row(i, 1) for i in range(1, 21)]
        + [row(i, 1, region="apac") for i in range(100, 110)]
        + [row(i, 1, region="apac-2") for i in range(200, 205)]
    )
    model.apply(first)
    landing.run(first)
    before = Table.open(str(tmp_path / "table")).file_system_view()
    apac_groups = {s.file_id for p in ("apac", "apac-2") for s in before.latest_slices(partition=p)}

    table = landing.run([row(1, 9)], write__operation="delete_partition", write__partitions_to_delete='["apac*"]')
    model.rows = {k: v for k, v in model.rows.items() if v["region"] not in ("apac", "apac-2")}
    assert table_rows(tmp_path) == model.expected()
    instant, metadata = last_commit(table)
    assert instant.action == REPLACE_COMMIT and metadata.operation_type == "DELETE_PARTITION"
    assert metadata.write_stats() == [] and metadata.replaced_file_ids() == {
        (p, f)
        for p in ("apac", "apac-2")
        for f in apac_groups
        if (p, f) in {(s.partition, s.file_id) for s in before.latest_slices()}
    }
    requested = table.io.read_bytes(f".hoodie/{instant.timestamp}.replacecommit.requested")
    assert (
        avro_models.read_container(requested, "HoodieRequestedReplaceMetadata")["operationType"] == "DELETE_PARTITION"
    )
    assert [i.state for i in table.timeline.find(instant.timestamp)][-1] is State.COMPLETED

    # without partitions_to_delete, the partitions of the micro-batch's records go
    landing.run([row(2, 9)], write__operation="delete_partition")
    model.rows = {k: v for k, v in model.rows.items() if v["region"] != "eu"}
    assert table_rows(tmp_path) == model.expected()

    # keys of a deleted partition come back as new records: the index entries naming replaced groups are stale
    again = [row(2, 10), row(4, 10), row(101, 10, region="apac")]
    model.apply(again)
    landing.run(again)
    assert table_rows(tmp_path) == model.expected()


def test_global_index_moves_a_record_between_partitions(spark, tmp_path):
    landing, model = Landing(tmp_path), Model()
    # a bulk load: a key in two partitions is kept once, where its winning record puts it
    first = [row(i, 1) for i in range(1, 21)] + [row(3, 0, region="apac"), row(8, 5, region="apac")]
    model.apply(first)
    landing.run(first, index__global="true", write__operation="bulk_insert")
    assert table_rows(tmp_path) == model.expected()

    moves = [
        row(1, 2, region="eu"),  # us -> eu
        row(2, 2, region="apac"),  # eu -> a new partition
        row(4, 2, region="us", deleted=True),  # a delete names another partition: the key's copy goes anyway
        row(5, 0, region="eu"),  # late under event-time ordering: the stored row stays where it is
        row(6, 2),  # a plain update
        row(7, 1, region="eu"),  # a tie goes to the incoming record, which moves
    ]
    model.apply([line for line in moves if line["id"] != 5])
    table = landing.run(moves, index__global="true")
    assert table_rows(tmp_path) == model.expected()
    read = hudi_read(tmp_path / "table")
    located = collections.defaultdict(list)
    for key, partition in zip(read["id"].to_pylist(), read[PARTITION_PATH].to_pylist()):
        located[key].append(partition)
    assert (
        located[1] == ["eu"]
        and located[2] == ["apac"]
        and located[7] == ["eu"]
        and located[5] == ["us"]
        and 4 not in located
    )
    _, metadata = last_commit(table)
    totals = metadata.totals()
    assert totals["deletes"] == 4 and totals["updates"] == 1 and totals["inserts"] == 3

    # a moved key is found in its new partition by the next micro-batch, even with an in-batch duplicate elsewhere
    again = [row(1, 3, region="us"), row(1, 4, region="apac")]
    model.apply(again)
    landing.run(again, index__global="true")
    assert table_rows(tmp_path) == model.expected()
    read = hudi_read(tmp_path / "table")
    assert [p for k, p in zip(read["id"].to_pylist(), read[PARTITION_PATH].to_pylist()) if k == 1] == ["apac"]


def test_an_index_of_the_other_scope_is_refused(tmp_path):
    table = Table.create(str(tmp_path / "t"), "t", ["id"], ["region"], "ts")
    StateIndex.open(table.io, 2)
    with pytest.raises(ValueError, match=r"index.global = true"):
        StateIndex.open(table.io, 2, global_keys=True)
