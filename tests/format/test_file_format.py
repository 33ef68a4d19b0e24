"""What new files carry: zstd-compressed parquet (``write.parquet_compression``'s default, and log blocks
with ``write.log_compression = zstd``) and bloom filters sized to the file (``write.bloom_entries`` unset), on both
table types, through merges that update, insert
between stored keys, delete and drop late records; read back by hudi-rs against a model, and the base
files by Spark's own parquet reader."""

from __future__ import annotations

import glob

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from readback import hudi_read, rows
from streaming import DATA_COLUMNS, row
from writes import ORDERS_SCHEMA, orders

import laketide
from laketide.index.bloom import DEFAULT_NUM_ENTRIES, BloomFilter
from laketide.table.format.logfile import Header
from laketide.table.format.schema import RECORD_KEY
from laketide.writer.report import BatchReport

SETTINGS = {
    "write": {
        "index_shards": 2,
        "parallelism": 2,
        "log_compression": "zstd",
        "target_file_size": "256KB",
        "small_file_limit": "128KB",
    }
}


def _write(path: str, lines: list[dict], model: dict, **new_table) -> BatchReport:
    report = laketide.write(
        path,
        orders(lines),
        settings=SETTINGS,
        **new_table,
    )
    for line in lines:
        stored = model.get(line["id"])
        if stored is not None and stored["ts"] > line["ts"]:
            continue  # late: event-time ordering keeps the stored row
        if line.get("_hoodie_is_deleted"):
            model.pop(line["id"], None)
        else:
            model[line["id"]] = {c: line[c] for c in DATA_COLUMNS}
    return report


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_zstd_files_with_sized_blooms_read_back(tmp_path, table_type, spark):
    path, model = str(tmp_path / "t"), {}
    _write(
        path,
        [row(i, 1) for i in range(0, 6000, 2)],
        model,
        table_type=table_type,
        record_key="id",
        partition_by="region",
        ordering_field="ts",
        name="t",
    )
    # odd keys fall between the stored even ones; 10 and 12 arrive late; every 50th key is deleted
    _write(
        path,
        [row(i, 2) for i in range(1, 3000, 2)] + [row(i, 3) for i in range(0, 3000, 4)] + [row(10, 0), row(12, 0)],
        model,
    )
    report = _write(
        path, [row(i, 4, deleted=True) for i in range(0, 6000, 50)] + [row(i, 4) for i in range(6000, 6100)], model
    )
    assert report.deletes == 120 and report.inserts == 100
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == [model[k] for k in sorted(model)]

    if table_type == "MERGE_ON_READ":
        assert glob.glob(f"{path}/*/.*.log.*")  # the updates went to zstd log blocks, which hudi-rs read above
    base_files = glob.glob(f"{path}/*/*.parquet")
    assert base_files
    for f in base_files:
        meta = pq.read_metadata(f)
        assert meta.row_group(0).column(0).compression == "ZSTD"
        bloom = BloomFilter.from_footer(meta.metadata)
        assert (
            bloom.row_capacity < DEFAULT_NUM_ENTRIES
            and bloom.might_contain_many(pq.read_table(f, columns=["_hoodie_record_key"])[0]).all()
        )
    # Java's parquet reader, as a Hudi reader on Spark uses it
    assert spark.read.parquet(*base_files).count() == sum(pq.read_metadata(f).num_rows for f in base_files)


def test_a_small_file_group_carries_a_small_filter_that_grows_with_it(tmp_path):
    """Hudi's fixed 60,000 entries made a file of three rows 430 KB; sized to its keys, it grows by rows as
    merges add keys (copy-on-write carries the filter over), and hudi-rs reads every row."""
    path, model = str(tmp_path / "t"), {}
    settings = {"write": {"index_shards": 2, "parallelism": 1}}
    new_table = {
        "table_type": "COPY_ON_WRITE",
        "record_key": "id",
        "partition_by": "region",
        "ordering_field": "ts",
        "name": "t",
    }
    lines = [row(i, 1, region="eu") for i in range(3)]
    laketide.write(path, pa.Table.from_pylist(lines, ORDERS_SCHEMA), settings=settings, **new_table)
    (first,) = glob.glob(f"{path}/eu/*.parquet")
    assert len(pq.read_metadata(first).metadata[b"org.apache.hudi.bloomfilter"]) < 20_000
    more = [row(i, 2, region="eu") for i in range(3, 2500)]
    laketide.write(path, pa.Table.from_pylist(more, ORDERS_SCHEMA), settings=settings)
    model.update({line["id"]: {c: line[c] for c in DATA_COLUMNS} for line in lines + more})
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == [model[k] for k in sorted(model)]
    newest = max(glob.glob(f"{path}/eu/*.parquet"), key=lambda f: f.rsplit("_", 1)[1])
    bloom = BloomFilter.from_footer(pq.read_metadata(newest).metadata)
    keys = pq.read_table(newest, columns=["_hoodie_record_key"])[0]
    assert len(keys) == 2500 and len(bloom.rows) == 3 and bloom.might_contain_many(keys).all()


def test_a_write_task_decides_its_log_blocks_dictionary_columns_once_from_its_records():
    """Which columns a task's log blocks dictionary-encode is decided once from its records: a repeating
    column and the meta columns with one value per file are encoded, unique values and laketide's own columns not."""
    import io

    import numpy as np

    from laketide.table.format.encoding import ONE_PER_FILE, records_dictionary_columns
    from laketide.table.format.logfile import parquet_data_block
    from laketide.table.format.schema import COMMIT_TIME

    n = 1000
    records = pa.table(
        {
            RECORD_KEY: [str(i) for i in range(n)],
            "status": ["new", "paid"] * (n // 2),
            "amount": np.arange(n) / 7,
            "_lt_file_id": ["g"] * n,
        }
    )
    decided = records_dictionary_columns(records)
    assert "status" in decided and set(ONE_PER_FILE) <= set(decided)
    assert not {RECORD_KEY, "amount", "_lt_file_id"} & set(decided)
    written = records.drop_columns(["_lt_file_id"]).append_column(COMMIT_TIME, pa.array(["20260101000000000"] * n))
    block = parquet_data_block(written.slice(0, 3), {Header.INSTANT_TIME: "20260101000000000"}, decided)
    meta = pq.ParquetFile(io.BytesIO(block.content)).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert any("DICTIONARY" in e for e in encodings["status"]), "three rows alone would not have chosen it"
    assert not any("DICTIONARY" in e for e in encodings[RECORD_KEY])
