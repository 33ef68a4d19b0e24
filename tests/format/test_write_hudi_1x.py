"""Writing table version 8 (Hudi 1.0): a new table, and copies of the tables Apache Hudi 1.x wrote, take upserts
that hudi-rs reads back equal to a model, at every write; the timeline is layout 2, its commit metadata Avro."""

from __future__ import annotations

import json
import re
import shutil

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from fixture_tables import unzip_fixture
from readback import hudi_read, rows
from streaming import DATA_COLUMNS, Model, row
from writes import NEW_ORDERS, orders

import laketide
from laketide.table import Table
from laketide.table.errors import LaketideError
from laketide.table.format import metadata_table
from laketide.table.format.files import BaseFile, LogFile
from laketide.table.format.instant import Instant, State
from laketide.table.format.lsm_history import LsmHistory
from laketide.table.format.properties import TableConfig
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSystemView
from laketide.table.inspect.timeline import services, timeline_page

# archival off, where a test looks at the whole active timeline
V8 = {"table": {"version": 8}, "archive": {"enabled": False}, "write": {"index_shards": 2, "parallelism": 2}}
META = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path",
        "_hoodie_file_name"]  # fmt: skip


def test_a_new_version_8_table_takes_upserts_that_hudi_rs_reads_at_every_write(tmp_path):
    path, model, seen = str(tmp_path / "orders"), Model(), {}
    batches = [
        [row(i, 1) for i in range(1, 41)],
        [row(i, 2) for i in range(30, 51)] + [row(3, 2, deleted=True)],
        [row(i, 3) for i in (1, 2, 60)] + [row(7, 3, deleted=True)],
    ]
    for lines in batches:
        laketide.write(path, orders(lines), settings=V8, **NEW_ORDERS)
        model.apply(lines)
        commit = Table.open(path).timeline.latest_completed_write()
        assert commit is not None
        seen[commit.timestamp] = model.expected()
        assert rows(hudi_read(path), "id", DATA_COLUMNS) == model.expected()
    for instant, expected in seen.items():  # hudi-rs's time travel, by each write's instant
        assert rows(hudi_read(path, as_of=instant), "id", DATA_COLUMNS) == expected, instant

    table = Table.open(path)
    props = table.config.extra
    assert props["hoodie.table.version"] == "8" and props["hoodie.timeline.layout.version"] == "2"
    assert props["hoodie.table.initial.version"] == "8" and props["hoodie.timeline.path"] == "timeline"
    assert props["hoodie.table.keygenerator.type"] == "SIMPLE"
    timeline = tmp_path / "orders" / ".hoodie" / "timeline"
    assert (timeline / "history").is_dir()
    completed = sorted(p.name for p in timeline.iterdir() if re.fullmatch(r"\d{17}_\d{17}\.commit", p.name))
    assert [name[:17] for name in completed] == list(seen)
    for name in completed:
        requested, done = name.removesuffix(".commit").split("_")
        assert done > requested
        with open(timeline / name, "rb") as body:  # Avro, as Hudi 1.x writes a commit's metadata
            reader = fastavro.reader(body)
            assert reader.writer_schema["name"] == "org.apache.hudi.avro.model.HoodieCommitMetadata"
            record = next(iter(reader))
        assert record["operationType"] in ("UPSERT", "BULK_INSERT", "INSERT")
        assert all(s["fileId"] and s["path"] for stats in record["partitionToWriteStats"].values() for s in stats)
    assert not list((tmp_path / "orders" / ".hoodie").glob("*.commit"))  # nothing at layout 1's place


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_version_8_tables_delta_mirror_reads_as_hudi_rs_after_every_write(tmp_path, table_type):
    """The Delta mirror of a version 8 table (its completed actions found under ``.hoodie/timeline/``): delta-rs
    reads what hudi-rs reads after each write, a delete_partition included (a replacecommit, Avro on version 8)."""
    from deltalake import DeltaTable

    path, model = str(tmp_path / "orders"), Model()
    settings = {**V8, "mirror": {"delta": True}, "compaction": {"mode": "inline", "delta_commits": 2}}
    for n in range(1, 6):
        lines = [row(i, n) for i in range(n, 40, 2)] + [row(n * 3, n, deleted=True)]
        laketide.write(path, orders(lines), table_type=table_type, settings=settings, **NEW_ORDERS)
        model.apply(lines)
        hudi = rows(hudi_read(path), "id", DATA_COLUMNS)
        assert hudi == model.expected(), n
        if table_type == "COPY_ON_WRITE":  # merge-on-read mirrors its read-optimized view: base files only
            assert rows(DeltaTable(path).to_pyarrow_table(), "id", DATA_COLUMNS) == hudi, n
    if table_type == "COPY_ON_WRITE":
        gone = row(1, 9)["region"]  # the partition of the micro-batch's rows goes
        laketide.write(path, orders([row(1, 9)]), operation="delete_partition", settings=settings)
        hudi = rows(hudi_read(path), "id", DATA_COLUMNS)
        assert hudi == [r for r in model.expected() if r["region"] != gone] and hudi
        assert rows(DeltaTable(path).to_pyarrow_table(), "id", DATA_COLUMNS) == hudi
        assert any(p.name.endswith(".replacecommit") for p in (tmp_path / "orders" / ".hoodie" / "timeline").iterdir())
    assert DeltaTable(path).version() >= 5


def test_the_empty_version_8_table_takes_its_first_rows(tmp_path):
    path = unzip_fixture("v8_empty", tmp_path)
    schema = pa.schema([("id", pa.int32()), ("name", pa.string()), ("isActive", pa.bool_())])
    first = pa.Table.from_pylist([{"id": i, "name": f"n{i}", "isActive": i % 2 == 0} for i in range(5)], schema)
    laketide.write(str(path), first, settings={"write": {"parallelism": 2}})
    second = pa.Table.from_pylist([{"id": i, "name": f"m{i}", "isActive": True} for i in range(3, 7)], schema)
    laketide.write(str(path), second, settings={"write": {"parallelism": 2}})
    expected = {r["id"]: r for r in first.to_pylist()} | {r["id"]: r for r in second.to_pylist()}
    got = hudi_read(path).select(["id", "name", "isActive"]).to_pylist()
    assert sorted(got, key=lambda r: r["id"]) == [expected[k] for k in sorted(expected)]


def test_a_version_8_table_with_hudis_metadata_table_is_refused_until_it_is_dropped(tmp_path):
    """hudi-rs's merge-on-read trips table keeps a metadata table (record and secondary indexes): refused, naming
    ``laketide metadata drop``; once dropped, it takes updates and deletes on top of Hudi's own log files."""
    path = unzip_fixture("v8_trips_8i3u1d", tmp_path)
    before = hudi_read(path)
    data = before.drop_columns([c for c in META if c in before.column_names])
    with pytest.raises(LaketideError, match="laketide metadata drop"):
        laketide.write(str(path), data.slice(0, 1), settings={"write": {"parallelism": 2}})
    metadata_table.drop(Table.open(str(path)).io)
    updated = data.slice(0, 2)
    updated = updated.set_column(
        updated.schema.get_field_index("fare"), "fare", pa.array([1.5, 2.5], updated.schema.field("fare").type)
    )
    updated = updated.set_column(updated.schema.get_field_index("ts"), "ts", pc.add(updated["ts"], 1))
    laketide.write(str(path), updated, settings={"write": {"parallelism": 2}})
    expected = {r["uuid"]: r for r in data.to_pylist()} | {r["uuid"]: r for r in updated.to_pylist()}
    after = hudi_read(path)
    got = after.drop_columns([c for c in META if c in after.column_names]).to_pylist()
    assert sorted(map(repr, got)) == sorted(map(repr, expected.values()))
    ours = Table.open(str(path)).snapshot()
    assert sorted(ours["uuid"].to_pylist()) == sorted(expected)


def test_java_avro_reads_each_version_8_commit_against_the_schema_hudi_1x_writes(spark, tmp_path):
    """Every Avro file of the timeline a version 8 write leaves (inflight and completed commits), read by Java's
    Avro (from the pyspark wheel) resolved against the schema Apache Hudi 1.0 itself put in a commit of the
    corpus, as Hudi's ``TimelineMetadataUtils`` resolves it against its own."""
    hudi = unzip_fixture("v8_nonpartitioned", tmp_path / "corpus") / ".hoodie" / "timeline"
    with open(next(hudi.glob("*_*.commit")), "rb") as body:
        hudis_schema = fastavro.reader(body).metadata["avro.schema"]
    path = tmp_path / "orders"
    for ts in (1, 2):
        laketide.write(str(path), orders([row(i, ts) for i in range(1, 21)]), settings=V8, **NEW_ORDERS)
    jvm = spark._jvm
    schema = jvm.org.apache.avro.Schema.Parser().parse(hudis_schema)
    decoded = 0
    for file in sorted((path / ".hoodie" / "timeline").iterdir()):
        data = file.read_bytes() if file.is_file() else b""
        if not data.startswith(b"Obj\x01"):
            continue
        stream = jvm.org.apache.avro.file.SeekableByteArrayInput(bytearray(data))
        reader = jvm.org.apache.avro.file.DataFileReader(stream, jvm.org.apache.avro.generic.GenericDatumReader(schema))
        record = json.loads(str(reader.next().toString()))
        assert record["operationType"], file.name
        decoded += 1
    assert decoded == 4  # two inflight, two completed


@pytest.mark.parametrize(
    "name",
    [
        "v8_complexkeygen_hivestyle",
        "v8_nonpartitioned",
        "v8_simplekeygen_nonhivestyle",
        "v8_simplekeygen_hivestyle_no_metafields",
    ],
)
def test_a_version_8_table_hudi_wrote_takes_upserts(tmp_path, name):
    """Updates to every other row and two new rows, made from the table's own rows (every type it holds);
    hudi-rs reads the model after: the rows before, the updates applied, the new rows added."""
    path = unzip_fixture(name, tmp_path)
    before = hudi_read(path)
    data = before.drop_columns([c for c in META if c in before.column_names])
    updated = data.filter(pa.array([i % 2 == 0 for i in range(data.num_rows)]))
    at = updated.schema.get_field_index("longField")  # the ordering field: a later value wins
    updated = updated.set_column(at, updated.schema.field(at), pc.add(updated["longField"], 1000))
    fresh = data.slice(0, 2).set_column(0, "id", pa.array([9001, 9002], data.schema.field("id").type))
    batch = pa.concat_tables([updated, fresh])
    laketide.write(str(path), batch, settings={"archive": {"enabled": False}, "write": {"parallelism": 2}})

    key = ["id", "name"] if name == "v8_complexkeygen_hivestyle" else ["id"]
    expected = {tuple(r[k] for k in key): r for r in data.to_pylist()}
    expected.update({tuple(r[k] for k in key): r for r in batch.to_pylist()})
    after = hudi_read(path)
    assert Table.open(str(path)).config.version == 8
    got = after.drop_columns([c for c in META if c in after.column_names])
    assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, expected.values()))


def test_a_new_version_8_merge_on_read_table_takes_upserts_and_compactions(tmp_path):
    """Each deltacommit writes log files named by itself (Hudi 1.x's naming), compaction folds them into base files
    and completes as a commit; hudi-rs reads the model after every write and as of each."""
    path, model, seen = str(tmp_path / "orders"), Model(), {}
    settings = {**V8, "compaction": {"mode": "inline", "delta_commits": 2}}
    batches = [[row(i, 1) for i in range(1, 41)]] + [
        [row(i, n) for i in range(n, 45, 3)] + [row(n * 7, n, deleted=True)] for n in range(2, 7)
    ]
    for lines in batches:
        laketide.write(path, orders(lines), table_type="MERGE_ON_READ", settings=settings, **NEW_ORDERS)
        model.apply(lines)
        timeline = Table.open(path).timeline
        newest = max(timeline.completed_writes(), key=lambda i: i.completion_time or "")
        seen[newest.timestamp] = model.expected()
        assert rows(hudi_read(path), "id", DATA_COLUMNS) == model.expected()
    for instant, expected in seen.items():
        assert rows(hudi_read(path, as_of=instant), "id", DATA_COLUMNS) == expected, instant

    timeline = Table.open(path).timeline
    deltacommits = {i.timestamp for i in timeline.completed_writes() if i.action == "deltacommit"}
    compactions = [i for i in timeline.completed_writes() if i.action == "commit"]
    assert deltacommits and compactions, "deltacommits, and compactions completed as commits"
    logs = list((tmp_path / "orders").rglob(".*.log.*"))
    assert logs and {p.name.split("_")[1].split(".")[0] for p in logs} <= deltacommits, "each log names its writer"
    assert all(".log.1_" in p.name for p in logs)


def test_a_version_8_merge_on_read_clean_takes_each_slices_logs_with_its_base_file(tmp_path):
    """Cleaning a version 8 table deletes an old slice's log files (named by their deltacommits, not by the slice's
    base instant) with its base file, so a table compacted and cleaned for months holds only the slices reads
    need; hudi-rs reads the model after every write."""
    path, model = str(tmp_path / "orders"), Model()
    settings = {
        **V8,
        "compaction": {"mode": "inline", "delta_commits": 2},
        "clean": {"retain_commits": 1, "async": False},
    }
    batches = [[row(i, 1) for i in range(1, 21)]] + [
        [row(i, n) for i in range(n % 4, 21, 4)] + [row(n, n, deleted=True)] for n in range(2, 12)
    ]
    for lines in batches:
        laketide.write(path, orders(lines), table_type="MERGE_ON_READ", settings=settings, **NEW_ORDERS)
        model.apply(lines)
        assert rows(hudi_read(path), "id", DATA_COLUMNS) == model.expected()
    table = Table.open(path)
    view = table.file_system_view(table.timeline)
    assert len([i for i in table.timeline.completed_writes() if i.action == "commit"]) >= 1
    for group in view.groups.values():
        bases = sorted(b.instant_time for b in group.base_files)
        assert len(bases) <= 2, f"{group.file_id}: {bases}"
        orphans = [lf.name for lf in group.log_files if view.log_slice(lf, bases) is None]
        assert not orphans, f"logs of cleaned slices left behind: {orphans}"


def test_a_version_8_log_belongs_to_the_slice_its_deltacommit_completed_on():
    """A deltacommit that began before a compaction and completed after it: its log file is on the compacted slice
    (Hudi 1.x's completion-time rule); one that completed before is folded into the compacted base file."""
    config = TableConfig(name="t", table_type="MERGE_ON_READ", version=8, record_key_fields=["id"])
    before, during, compaction = "20260101000000100", "20260101000000200", "20260101000000300"
    instants = [
        Instant("20260101000000000", "deltacommit", State.COMPLETED, "20260101000000050"),
        Instant(before, "deltacommit", State.COMPLETED, "20260101000000150"),
        Instant(during, "deltacommit", State.COMPLETED, "20260101000000400"),  # completed after the compaction began
        Instant(compaction, "commit", State.COMPLETED, "20260101000000350"),
    ]
    timeline = Timeline(None, config, instants)  # type: ignore[arg-type]  # no file is read
    base = [BaseFile("p", "fg-0", "0-0-0", t) for t in ("20260101000000000", compaction)]
    logs = [LogFile("p", "fg-0", t, 1, "0-1-0") for t in (before, during)]
    (latest,) = FileSystemView(timeline, base, logs).latest_slices()
    assert latest.base_instant == compaction and [lf.base_instant for lf in latest.log_files] == [during]
    (earlier,) = FileSystemView(timeline, base, logs).latest_slices(as_of=during)
    assert [lf.base_instant for lf in earlier.log_files] == [before, during]


def test_a_version_8_slices_logs_apply_in_the_order_of_their_deltacommits(tmp_path):
    """A version 8 slice's logs are named by the deltacommits that wrote them, and each write token starts with the
    task that wrote it: an older deltacommit's update written by task 1 and a newer one's delete written by task 0
    apply update first (Hudi's ``HoodieLogFile.LogFileComparator``), or the deleted key came back on compaction."""
    from laketide.table.format.encoding import SORTED_MARKER
    from laketide.table.format.logfile import Header, delete_block, parquet_data_block
    from laketide.table.format.schema import RECORD_KEY
    from laketide.table.format.view import FileSlice
    from laketide.table.reading.slice_reader import MergeRule, merge_slice_batches

    config = TableConfig(name="t", table_type="MERGE_ON_READ", version=8, record_key_fields=["k"], ordering_field="ts")
    table = Table.create_from_config(str(tmp_path), config)
    base = BaseFile("", "fg-0", "0-0-0", "20260101000000000")
    stored = pa.table({RECORD_KEY: ["a", "b"], "k": ["a", "b"], "ts": [7, 7]})
    pq.write_table(stored.replace_schema_metadata({SORTED_MARKER: RECORD_KEY}), tmp_path / base.name)
    older, newer = "20260101000000100", "20260101000000200"
    update = parquet_data_block(
        pa.table({RECORD_KEY: ["a", "b"], "k": ["a", "b"], "ts": [8, 8]}), {Header.INSTANT_TIME: older}
    )
    delete = delete_block(["a"], [""], [9], pa.int64(), {Header.INSTANT_TIME: newer})
    logs = [LogFile("", "fg-0", newer, 1, "0-2-0"), LogFile("", "fg-0", older, 1, "1-1-0")]
    for log_file, block in zip(logs, (delete, update)):
        (tmp_path / log_file.name).write_bytes(block.to_bytes())
    fs = FileSlice("", "fg-0", base.instant_time, base, logs)
    (merged,) = merge_slice_batches(table.io, fs, lambda instant: True, MergeRule("ts"))
    assert merged.select(["k", "ts"]).to_pylist() == [{"k": "b", "ts": 8}]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_version_8_table_archives_into_the_lsm_history_and_keeps_every_row(spark, tmp_path, table_type):
    """Archival moves old actions off the active timeline into ``timeline/history`` (parquet files, manifests and
    ``_version_``); layer 0 is merged once it holds 10 files, and only three snapshots' files stay. hudi-rs reads the
    model after every write."""
    path, model, seen = str(tmp_path / "orders"), Model(), {}
    settings = {
        "table": {"version": 8},
        "write": {"index_shards": 2, "parallelism": 2},
        "clean": {"retain_commits": 1},
        "archive": {"min_commits": 2, "max_commits": 3},
        "compaction": {"mode": "inline", "delta_commits": 2},
    }
    for n in range(1, 31):
        lines = [row(i, n) for i in range(n % 7, 60, 7)]
        laketide.write(path, orders(lines), table_type=table_type, settings=settings, **NEW_ORDERS)
        model.apply(lines)
        seen[Table.open(path).timeline.latest_completed_write().timestamp] = model.expected()  # type: ignore[union-attr]
        assert rows(hudi_read(path), "id", DATA_COLUMNS) == model.expected(), n

    table = Table.open(path)
    history = LsmHistory(table.io, table.config.history_dir)
    archived = history.entries()
    active = {i.timestamp for i in table.timeline.completed_writes()}
    assert len(active) <= 4 and archived, "old writes left the active timeline"
    assert {e.instant_time for e in archived if e.action in ("commit", "deltacommit")}.isdisjoint(active)
    assert all(e.completion_time > e.instant_time and e.metadata for e in archived)
    names = sorted(p.name for p in (tmp_path / "orders" / ".hoodie" / "timeline" / "history").iterdir())
    assert "_version_" in names and len([n for n in names if n.startswith("manifest_")]) <= 3
    assert any(n.endswith("_1.parquet") for n in names), "layer 0 was merged into layer 1"
    assert len([n for n in names if n.endswith("_0.parquet")]) < 10
    # what the CLI, REST and the dashboard show of it
    page = timeline_page(table, None, None, None, 200)
    assert any(r.archived and r.action in ("commit", "deltacommit") and r.records for r in page.items)
    assert services(table).archive.files >= 1
    # Java's parquet reader (parquet-mr, in the pyspark wheel) reads the history's files as Hudi's reader does
    history_files = [str(p) for p in (tmp_path / "orders" / ".hoodie" / "timeline" / "history").glob("*.parquet")]
    read = spark.read.parquet(*[f"file://{f}" for f in history_files])
    assert read.columns == ["instantTime", "completionTime", "action", "metadata", "plan", "version"]
    assert read.count() >= len(archived)
    newest, expected = list(seen.items())[-1]  # cleaning kept one commit: only the newest is there to travel to
    assert rows(hudi_read(path, as_of=newest), "id", DATA_COLUMNS) == expected


def test_a_version_6_table_refuses_table_version_8(tmp_path):
    path = str(tmp_path / "orders")
    laketide.write(path, orders([row(1, 1)]), settings={"write": {"parallelism": 2}}, **NEW_ORDERS)
    with pytest.raises(LaketideError, match=r"table\.version = 8, but the table"):
        laketide.write(path, orders([row(2, 1)]), settings=V8)
    shutil.rmtree(path)
