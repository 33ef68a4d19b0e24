"""Schema changes between runs of the job: widening, added and missing columns, and changes refused."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from readback import hudi_read, tree_digest
from streaming import land

from laketide.config import load_config
from laketide.spark.job import run
from laketide.table import Table
from laketide.writer.preflight import JobRefused

V1 = "id BIGINT, region STRING, qty INT, price FLOAT, amount DECIMAL(10,2), ts BIGINT"
V2 = "id BIGINT, region STRING, qty BIGINT, price DOUBLE, amount DECIMAL(14,3), ts BIGINT, note STRING"


def _config(root: Path, ddl: str):
    return load_config(
        overrides=[
            f"table.path={root / 'table'}",
            'table.record_key=["id"]',
            'table.partition_by=["region"]',
            "table.ordering_field=ts",
            "source.format=json",
            f"source.path={root / 'landing'}",
            f"source.schema={ddl}",
            f"stream.checkpoint={root / 'checkpoint'}",
            "stream.trigger=available-now",
            "write.index_shards=2",
            "write.parallelism=2",
        ]
    )


@pytest.fixture(scope="module")
def widened(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("widen")
    first = [
        {"id": i, "region": r, "qty": 7, "price": 0.5, "amount": "12345678.91", "ts": 1}
        for i, r in ((1, "eu"), (2, "eu"), (3, "us"))
    ]
    land(root, "0.json", first, 1_700_000_000)
    run(_config(root, V1))
    # only "eu" is rewritten: the "us" file group keeps its int / float / decimal(10,2) file
    second = [
        {"id": 1, "region": "eu", "qty": 2**40, "price": 0.1, "amount": "1234567890.123", "ts": 2, "note": "wide"}
    ]
    second.append({"id": 4, "region": "eu", "qty": -(2**62), "price": 1e300, "amount": "-0.001", "ts": 2, "note": None})
    land(root, "1.json", second, 1_700_000_001)
    run(_config(root, V2))
    return root


def test_widened_columns_keep_their_new_values_and_hudi_rs_reads_old_and_new_files(widened):
    rows = {r["id"]: r for r in hudi_read(widened / "table").to_pylist()}
    assert rows[1]["qty"] == 2**40 and rows[4]["qty"] == -(2**62)
    assert rows[1]["price"] == 0.1 and rows[4]["price"] == 1e300, "stored as double, not through float32"
    assert rows[1]["amount"] == Decimal("1234567890.123") and rows[4]["amount"] == Decimal("-0.001")
    assert rows[1]["note"] == "wide" and rows[2]["note"] is None
    assert rows[3]["qty"] == 7 and rows[3]["price"] == 0.5 and rows[3]["amount"] == Decimal("12345678.91"), (
        "the old file, read under the new schema"
    )
    schema = Table.open(str(widened / "table")).schema()
    assert str(schema.field("qty").type) == "int64" and str(schema.field("price").type) == "double"
    assert str(schema.field("amount").type) == "decimal128(14, 3)" and "note" in schema.names


def test_a_missing_column_keeps_the_table_schema(widened, spark):
    land(widened, "2.json", [{"id": 5, "region": "us", "qty": 1, "price": 1.0, "amount": "1", "ts": 3}], 1_700_000_002)
    run(_config(widened, V1))
    rows = {r["id"]: r for r in hudi_read(widened / "table").to_pylist()}
    assert rows[5]["note"] is None and rows[5]["qty"] == 1
    assert "note" in Table.open(str(widened / "table")).schema().names


@pytest.mark.parametrize(
    "ddl, column, table_type, source_type",
    [
        (V2.replace("qty BIGINT", "qty STRING"), "qty", "int64", "string"),
        (V2.replace("ts BIGINT", "ts DOUBLE"), "ts", "int64", "double"),
        (V2.replace("amount DECIMAL(14,3)", "amount DATE"), "amount", "decimal128(14, 3)", "date32[day]"),
    ],
)
def test_an_incompatible_change_is_refused_before_anything_is_written(
    widened, spark, ddl, column, table_type, source_type
):
    land(
        widened, "3.json", [{"id": 6, "region": "us", "qty": "x", "price": 1.0, "amount": "1", "ts": 4}], 1_700_000_003
    )
    before = tree_digest(widened)
    with pytest.raises(JobRefused) as refused:
        run(_config(widened, ddl))
    message = str(refused.value)
    assert f"column '{column}'" in message and table_type in message and source_type in message
    assert tree_digest(widened) == before, "nothing was written"


def test_a_narrower_source_is_widened_on_write(spark, tmp_path):
    land(
        tmp_path,
        "0.json",
        [{"id": 1, "region": "eu", "qty": 2**40, "price": 0.1, "amount": "1.5", "ts": 1}],
        1_700_000_000,
    )
    run(_config(tmp_path, V2))
    land(
        tmp_path,
        "1.json",
        [{"id": 2, "region": "eu", "qty": 3, "price": 0.25, "amount": "2.25", "ts": 1}],
        1_700_000_001,
    )
    run(_config(tmp_path, V1))
    schema = Table.open(str(tmp_path / "table")).schema()
    assert (str(schema.field("qty").type), str(schema.field("price").type)) == ("int64", "double")
    rows = {r["id"]: r for r in hudi_read(tmp_path / "table").to_pylist()}
    assert rows[1]["price"] == 0.1 and rows[2]["price"] == 0.25 and rows[2]["amount"] == Decimal("2.25")


def test_null_list_elements_into_a_spark_written_table(spark, fixture_copy, tmp_path):
    """The fixture's parquet lists have required elements; its Avro schema allows nulls, and so does the table."""
    path = fixture_copy("v6_simplekeygen_nonhivestyle")
    ddl = (
        "id INT, name STRING, longField BIGINT, byteField INT, arrayField ARRAY<STRUCT<arr_struct_f1: STRING, "
        "arr_struct_f2: INT>>"
    )
    update = {
        "id": 1,
        "name": "nulls",
        "longField": 10_000_000_000,
        "byteField": 10,
        "arrayField": [{"arr_struct_f1": "a", "arr_struct_f2": 1}, None],
    }
    land(tmp_path, "u.json", [update], 1_700_000_000)
    config = load_config(
        overrides=[
            f"table.path={path}",
            'table.record_key=["id"]',
            "source.format=json",
            f"source.path={tmp_path / 'landing'}",
            f"source.schema={ddl}",
            f"stream.checkpoint={tmp_path / 'checkpoint'}",
            "stream.trigger=available-now",
        ]
    )
    run(config)
    rows = {r["id"]: r for r in hudi_read(path).to_pylist()}
    assert rows[1]["arrayField"] == [{"arr_struct_f1": "a", "arr_struct_f2": 1}, None]
    assert rows[3]["arrayField"][0]["arr_struct_f1"] == "black", (
        "rows copied from the Spark-written file keep their lists"
    )
