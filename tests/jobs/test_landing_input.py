"""Input nobody tried before: hostile partition values, mistyped landing files, CSV as people write it."""

from __future__ import annotations

import os
from datetime import UTC
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from readback import hudi_read
from streaming import job_config, land, row

from laketide.config import load_config
from laketide.spark.job import run
from laketide.table import Table

HOSTILE = [
    "..",
    ".",
    "tab\there",
    "nul\x00byte",
    "a/b",
    "#hash",
    "100%",
    "x" * 300,
    ".hidden",
    "_under",
    "plain",
    "ünï/cödé",
]


@pytest.mark.parametrize("hive_style", [False, True])
def test_every_partition_value_is_stored_safely_or_quarantined(spark, tmp_path, hive_style):
    lines = [row(i, 1, region=value) for i, value in enumerate(HOSTILE)]
    land(tmp_path, "0.json", lines, 1_700_000_000)
    (report,) = run(job_config(tmp_path, table__hive_style_partitioning=str(hive_style).lower())).status.recent

    table = tmp_path / "table"
    outside = sorted(p.name for p in tmp_path.iterdir())
    assert outside == ["checkpoint", "landing", "table", "table_quarantine"], "nothing is written outside the table"
    for path in table.rglob("*.parquet"):
        assert path.resolve().is_relative_to(table.resolve())
        rel = path.relative_to(table)
        assert (len(rel.parts) == 2 and not rel.parts[0].startswith((".", "_"))) or rel.parts[0].startswith("__HIVE")

    stored = {r["id"]: r["region"] for r in hudi_read(table).to_pylist()}
    quarantine = pq.read_table(tmp_path / "table_quarantine").to_pylist()
    quarantined = {HOSTILE.index(_region_of(q["raw"])): q["reason"] for q in quarantine}
    assert sorted(stored) + sorted(quarantined) == sorted(range(len(HOSTILE))) or sorted(
        [*stored, *quarantined]
    ) == list(range(len(HOSTILE)))
    assert not set(stored) & set(quarantined)
    for i, value in stored.items():
        assert value == HOSTILE[i], "read back by hudi-rs with its original value"
    assert report.inserts == len(stored) and report.quarantined == len(quarantined)
    always_stored = {"tab\there", "nul\x00byte", "a/b", "#hash", "100%", "plain", "ünï/cödé"}
    assert {HOSTILE[i] for i in stored} >= always_stored
    expected_quarantined = {"x" * 300} if hive_style else {"..", ".", "x" * 300, ".hidden", "_under"}
    assert {HOSTILE[i] for i in quarantined} == expected_quarantined
    assert all(reason.startswith("partition value of 'region'") for reason in quarantined.values())


def _region_of(raw: str) -> str:
    import json

    return json.loads(raw)["region"]


PARQUET_DDL = "id BIGINT, region STRING, qty INT, ts BIGINT"


def _parquet(path: Path, table: pa.Table, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    os.utime(path, (mtime, mtime))


def test_a_mistyped_parquet_file_goes_to_quarantine_and_later_files_are_written(spark, tmp_path):
    def good(ids):
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "region": ["eu"] * len(ids),
                "qty": pa.array([1] * len(ids), pa.int32()),
                "ts": pa.array([1] * len(ids), pa.int64()),
            }
        )

    landing = tmp_path / "landing"
    _parquet(landing / "0.parquet", good([1, 2]), 1_700_000_000)
    _parquet(landing / "1.parquet", good([3]).set_column(2, "qty", pa.array([2**40], pa.int64())), 1_700_000_001)
    _parquet(landing / "2.parquet", good([4]).set_column(2, "qty", pa.array(["seven"], pa.string())), 1_700_000_002)
    _parquet(landing / "3.parquet", good([5, 6]), 1_700_000_003)
    config = job_config(tmp_path, source__format="parquet", source__schema=PARQUET_DDL)
    writer = run(config)
    assert [r.quarantined for r in writer.status.recent] == [0, 1, 1, 0]
    assert sorted(r["id"] for r in hudi_read(tmp_path / "table").to_pylist()) == [1, 2, 5, 6]
    quarantine = pq.read_table(tmp_path / "table_quarantine").to_pylist()
    assert sorted(Path(q["raw"]).name for q in quarantine) == ["1.parquet", "2.parquet"]
    assert all(q["reason"].startswith("unreadable landing file: ") and len(q["reason"]) > 30 for q in quarantine)
    copies = sorted(p.name for p in (tmp_path / "table_quarantine").rglob("_files/*"))
    assert copies == ["1.parquet", "2.parquet"], "the whole file is kept aside"


CSV_DDL = "id BIGINT, name STRING, amount DOUBLE, ts BIGINT, region STRING"


def _csv(root: Path, name: str, text: str, mtime: float) -> None:
    landing = root / "landing"
    landing.mkdir(exist_ok=True)
    path = landing / name
    path.write_text(text)
    os.utime(path, (mtime, mtime))


@pytest.mark.parametrize("files_per_batch", [1, 3])
def test_csv_quoting_multiline_records_and_header_order(spark, tmp_path, files_per_batch):
    """With several files per micro-batch, the batch is read again file by file, and the files are joined up."""
    _csv(
        tmp_path, "0.csv", 'id,name,amount,ts,region\n1,"say ""hi""",1.5,1,eu\n2,"two\nlines",2.5,1,eu\n', 1_700_000_000
    )
    _csv(tmp_path, "1.csv", 'region,ts,amount,name,id\nus,1,3.5,"c, d",3\n', 1_700_000_001)
    _csv(tmp_path, "2.csv", "id,name,amount,ts,region\n4,four,4.5,1,eu\n", 1_700_000_002)
    config = job_config(
        tmp_path, source__format="csv", source__schema=CSV_DDL, source__max_files_per_trigger=files_per_batch
    )
    writer = run(config)
    rows = {r["id"]: r for r in hudi_read(tmp_path / "table").to_pylist()}
    assert rows[1]["name"] == 'say "hi"'
    assert rows[2]["name"] == "two\nlines"
    assert (rows[3]["name"], rows[3]["amount"], rows[3]["region"]) == ("c, d", 3.5, "us"), (
        "columns matched by header name"
    )
    assert sorted(rows) == [1, 2, 3, 4]
    assert sum(r.quarantined for r in writer.status.recent) == 0


def test_source_options_reach_sparks_reader(spark, tmp_path):
    _csv(tmp_path, "0.csv", "id;name;amount;ts;region\n1;semi;1.0;1;eu\n", 1_700_000_000)
    config = load_config(overrides=[*_overrides(tmp_path), "source.options.sep=;"])
    run(config)
    assert [r["name"] for r in hudi_read(tmp_path / "table").to_pylist()] == ["semi"]


def _overrides(root: Path) -> list[str]:
    return [
        f"table.path={root / 'table'}",
        'table.record_key=["id"]',
        'table.partition_by=["region"]',
        "table.ordering_field=ts",
        "source.format=csv",
        f"source.path={root / 'landing'}",
        f"source.schema={CSV_DDL}",
        f"stream.checkpoint={root / 'checkpoint'}",
        "stream.trigger=available-now",
    ]


def test_an_empty_record_key_is_quarantined_not_written(spark, tmp_path):
    lines = [
        {"id": "", "region": "eu", "ts": 1},
        {"id": "a", "region": "eu", "ts": 1},
        {"id": None, "region": "eu", "ts": 1},
    ]
    land(tmp_path, "0.json", lines, 1_700_000_000)
    (report,) = run(job_config(tmp_path, source__schema="id STRING, region STRING, ts BIGINT")).status.recent
    assert [r["_hoodie_record_key"] for r in hudi_read(tmp_path / "table").to_pylist()] == ["a"]
    assert report.quarantined == 2
    reasons = {q["reason"] for q in pq.read_table(tmp_path / "table_quarantine").to_pylist()}
    assert reasons == {"record key field 'id' is null or empty"}
    # the summary the API and the dashboard show says where each row came from, in which micro-batch and when
    from laketide.writer import quarantine

    sample = quarantine.summarize(str(tmp_path / "table_quarantine")).sample
    assert len(sample) == 2 and all(
        r.source.endswith("landing/0.json") and r.batch_id == 0 and r.quarantined_at for r in sample
    )


def test_an_empty_micro_batch_makes_no_instant(spark, tmp_path):
    land(tmp_path, "0.json", [row(1, 1), row(2, 1)], 1_700_000_000)
    land(tmp_path, "1.json", [], 1_700_000_001)
    land(tmp_path, "2.json", [row(1, 2)], 1_700_000_002)
    (tmp_path / "landing" / "1.json").write_text("")
    writer = run(job_config(tmp_path))
    assert [r.records for r in writer.status.recent] == [2, 1]
    assert len(Table.open(str(tmp_path / "table")).timeline) == 2, "two commits and nothing else"
    assert sorted((r["id"], r["ts"]) for r in hudi_read(tmp_path / "table").to_pylist()) == [(1, 2), (2, 1)]


def test_parquet_read_by_the_driver_equals_sparks_read_or_is_left_to_spark(spark, tmp_path):
    """A driver-written micro-batch reads parquet landing files itself only when Spark would read the same values."""
    from datetime import date, datetime
    from decimal import Decimal

    from pyspark.sql.pandas.types import to_arrow_schema

    from laketide.table.storage.io import FileIO
    from laketide.writer.landing import read_landed_parquet

    def landed(*paths: str) -> dict:
        return {path: FileIO.for_uri(path).entry("") for path in paths}

    ddl = (
        "id BIGINT, name STRING, amount DOUBLE, price DECIMAL(10,2), seen TIMESTAMP, day DATE, ok BOOLEAN, tags "
        "ARRAY<STRING>"
    )
    schema = spark.createDataFrame([], ddl).schema
    declared = to_arrow_schema(schema, timezone=spark.conf.get("spark.sql.session.timeZone"))
    rows = {
        "id": [1, 2, None],
        "name": ["a", None, "ünï"],
        "amount": [1.5, None, -0.0],
        "price": [Decimal("1.25"), None, Decimal("-3.10")],
        "seen": [datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC), None, datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)],
        "day": [date(2026, 1, 2), None, date(1900, 1, 1)],
        "ok": [True, None, False],
        "tags": [["x", "y"], None, []],
    }
    written = pa.table(
        rows,
        schema=pa.schema(
            [
                f.with_type(f.type if not pa.types.is_timestamp(f.type) else pa.timestamp("us", tz="UTC"))
                for f in declared
            ]
        ),
    )
    for n in range(2):
        pq.write_table(written, tmp_path / f"{n}.parquet")
    paths = [f"file://{tmp_path / f'{n}.parquet'}" for n in range(2)]

    read = read_landed_parquet(landed(*paths), declared)
    if read is None:
        pytest.fail("exactly the declared types: the driver reads the files itself")
    ours, arrival = read
    theirs = spark.read.schema(schema).parquet(*paths).toArrow()
    assert ours.to_pylist() == theirs.to_pylist()
    assert arrival.to_pylist() == [0, 1, 2, 1 << 40, (1 << 40) + 1, (1 << 40) + 2], (
        "each file's rows in order, the files in arrival order"
    )

    # a column of another type (as the mistyped-file test lands), or a missing one: Spark decides
    pq.write_table(written.set_column(0, "id", written["id"].cast(pa.int32())), tmp_path / "narrow.parquet")
    pq.write_table(written.drop_columns(["ok"]), tmp_path / "missing.parquet")
    pq.write_table(written, tmp_path / "broken.parquet")
    (tmp_path / "broken.parquet").write_bytes((tmp_path / "broken.parquet").read_bytes()[:100])
    for name in ("narrow", "missing", "broken"):
        assert read_landed_parquet(landed(paths[0], f"file://{tmp_path / name}.parquet"), declared) is None, name


def test_spark_tasks_read_parquet_pieces_in_the_order_the_driver_reads_them(tmp_path):
    """Pieces of parquet landing files (row groups, and slices of a large one for idle tasks) read the
    rows the driver reads, each numbered in the same arrival order."""
    import numpy as np

    from laketide.table.storage.io import FileIO
    from laketide.writer.landing import PIECE_LEAST_ROWS, parquet_pieces, read_landed_parquet, read_piece

    n = 2 * PIECE_LEAST_ROWS + 7
    table = pa.table({"id": pa.array(np.arange(n), pa.int64()), "region": pa.array(["eu", "us"] * (n // 2) + ["eu"])})
    _parquet(tmp_path / "late.parquet", table, 1_700_000_001)  # one row group, cut into two pieces
    _parquet(tmp_path / "early.parquet", table.slice(0, 1000), 1_700_000_000)
    pq.write_table(table.slice(0, 900), tmp_path / "groups.parquet", row_group_size=300)  # three row groups
    os.utime(tmp_path / "groups.parquet", (1_700_000_000, 1_700_000_000))
    files = {
        f"file://{tmp_path / name}": FileIO.for_uri(f"file://{tmp_path / name}").entry("")
        for name in ("late.parquet", "early.parquet", "groups.parquet")
    }

    assert len(parquet_pieces(files, table.schema, tasks=8)) == 5, (
        "five row groups keep 8 tasks busy enough: no group is cut"
    )
    pieces = parquet_pieces(files, table.schema, tasks=16)
    sizes = [p[4] for p in pieces if "late" in p[0]]
    assert len(sizes) == 2 and sum(sizes) == n and sizes[0] > sizes[1], (
        "the second piece's task also decodes the first's rows, so it holds fewer"
    )
    assert len([p for p in pieces if "groups" in p[0]]) == 3, "a row group under the least rows is read whole"
    read = [read_piece(piece, table.schema) for piece in pieces]
    ours = pa.concat_tables([rows.append_column("arrival", arrival) for rows, arrival in read]).sort_by("arrival")

    driver, arrival = read_landed_parquet(files, table.schema)
    driver = driver.select(["id", "region"]).append_column("arrival", arrival).sort_by("arrival")
    assert ours.equals(driver)
    assert (
        parquet_pieces(
            {**files, f"file://{tmp_path / 'x.parquet'}": files[f"file://{tmp_path / 'late.parquet'}"]}, table.schema, 8
        )
        is None
    ), "a missing file: Spark reads them"


def test_parquet_on_sparks_tasks_keeps_the_latest_of_a_key_across_files_and_within_one(spark, tmp_path):
    """A micro-batch of parquet files that Spark's tasks read as pieces: duplicates with an equal ordering
    value resolve by arrival (the later file, the later row), as on the driver."""

    def batch(ids, names, ts):
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "region": ["eu"] * len(ids),
                "qty": pa.array(names, pa.int32()),
                "ts": pa.array(ts, pa.int64()),
            }
        )

    landing = tmp_path / "landing"
    _parquet(landing / "0.parquet", batch([1, 2, 2, 3], [10, 20, 21, 30], [5, 5, 5, 5]), 1_700_000_000)
    _parquet(landing / "1.parquet", batch([1, 3, 4], [11, 29, 40], [5, 4, 5]), 1_700_000_001)
    _parquet(landing / "2.parquet", batch([4, 5], [41, 50], [5, 5]), 1_700_000_002)
    config = job_config(
        tmp_path,
        source__format="parquet",
        source__max_files_per_trigger=2,
        write__driver_batch_bytes=0,
        source__schema=PARQUET_DDL,
    )
    writer = run(config)
    assert [r.ran_on for r in writer.status.recent] == ["tasks", "tasks"]
    assert sorted((r["id"], r["qty"]) for r in hudi_read(tmp_path / "table").to_pylist()) == [
        (1, 11),
        (2, 21),
        (3, 30),
        (4, 41),
        (5, 50),
    ]


def test_change_event_lines_read_by_the_driver_equal_sparks_text_rows_or_are_left_to_spark(spark, tmp_path):
    """Landing lines of change events (``spark.sources.landed_lines``) read on the driver without the JVM, row for row
    as Spark's text source gives them: line ends, blank lines, a byte order mark, bytes that are not UTF-8."""
    from pyspark.sql import functions as F

    from laketide.index.columns import SOURCE_FILE, SOURCE_MTIME
    from laketide.spark.sources import with_origin
    from laketide.table.storage.io import FileIO
    from laketide.writer.landing import read_landed_lines

    contents = {
        "0.json": b'\xef\xbb\xbf{"a": 1}\r\n\r\n   \n{"b": "\xc3\xbcn\xc3\xaf"} \n\xff\xfe not text\n',
        "1.json": b'{"c": 3}\n\n{"d": 4}',
        "2.json": b"",
    }
    for n, (name, data) in enumerate(contents.items()):
        (tmp_path / name).write_bytes(data)
        os.utime(tmp_path / name, (1_700_000_000 + n, 1_700_000_000 + n))
    lines = with_origin(spark.read.format("text").load([str(tmp_path / name) for name in contents]))
    theirs = lines.filter(F.trim(F.col("value")) != "").toArrow()
    files = {path: FileIO.for_uri(path).entry("") for path in set(theirs[SOURCE_FILE].to_pylist())}
    files[f"file:{tmp_path / '2.json'}"] = FileIO.for_uri(str(tmp_path / "2.json")).entry("")

    ours = read_landed_lines(files, {})
    if ours is None:
        pytest.fail("uncompressed lines with a line feed, or a carriage return and line feed, are the driver's")

    def rows(table: pa.Table) -> list[tuple]:
        values = table["value"].cast(pa.binary()).to_pylist()
        return sorted(zip(table[SOURCE_FILE].to_pylist(), table[SOURCE_MTIME].to_pylist(), values, strict=True))

    assert rows(ours) == rows(theirs)
    assert ours["value"].cast(pa.binary()).to_pylist() == [
        b'{"a": 1}',
        '{"b": "ünï"} '.encode(),
        b"\xff\xfe not text",
        b'{"c": 3}',
        b'{"d": 4}',
    ], "the files in arrival order, each file's lines in order"

    # what Spark reads otherwise: a carriage return alone, a compressed file, a line separator of the source's own
    (tmp_path / "cr.json").write_bytes(b'{"a": 1}\r{"b": 2}\n')
    (tmp_path / "gz.json.gz").write_bytes(b"")
    one = {f"file:{tmp_path / '1.json'}": files[f"file:{tmp_path / '1.json'}"]}
    for name in ("cr.json", "gz.json.gz"):
        path = f"file:{tmp_path / name}"
        assert read_landed_lines({**one, path: FileIO.for_uri(path).entry("")}, {}) is None, name
    assert read_landed_lines(one, {"lineSep": ";"}) is None
