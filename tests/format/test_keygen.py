"""Record keys and partition paths as Hudi's key generators make them, checked against Java itself."""

from __future__ import annotations

import datetime as dt
import posixpath
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixture_tables import COW_FIXTURES, MOR_FIXTURE

from laketide.table import Table
from laketide.table.format.keygen import VirtualKeys, escape_path_name, partition_paths, record_keys, value_text
from laketide.table.format.schema import META_COLUMNS, RECORD_KEY

DOUBLES = [
    1.0,
    0.1,
    -0.0,
    0.0,
    1e7,
    9999999.0,
    1e-3,
    9.99e-4,
    1e300,
    -2.5e-5,
    123456.789,
    100.0,
    1.7976931348623157e308,
    2.0 / 3,
]
# Java before 19 prints a few doubles (subnormals such as 4.9E-324) with more than the shortest digits
# (JDK-4511638); laketide writes the shortest form, as Java 19 and later do.
FLOATS = [1.0, 0.1, 1e10, 3.4028235e38, 0.001, 1234567.0, 12345678.0, -7.5e-4]
DECIMALS = [
    Decimal("12345.67890"),
    Decimal("0E-9"),
    Decimal("0.0000001"),
    Decimal("-1.5"),
    Decimal("100"),
    Decimal("0.000001"),
    Decimal("1.0E-7"),
]


@pytest.fixture(scope="module")
def java(spark):
    return spark._jvm.java


def test_doubles_and_floats_read_as_javas_tostring(java):
    assert value_text(pa.array(DOUBLES, pa.float64())).to_pylist() == [java.lang.Double.toString(v) for v in DOUBLES]
    expected = [java.lang.Float.toString(java.lang.Float.parseFloat(repr(float(np.float32(v))))) for v in FLOATS]
    assert value_text(pa.array(FLOATS, pa.float32())).to_pylist() == expected
    assert value_text(pa.array([float("nan"), float("inf")], pa.float64())).to_pylist() == ["NaN", "Infinity"]


def test_decimals_read_as_bigdecimal_tostring(java):
    for value in DECIMALS:
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits))) * (-1 if sign else 1)
        # py4j hands a BigDecimal back as a Python Decimal; Objects.toString renders it on the Java side
        big = java.math.BigDecimal(java.math.BigInteger(str(unscaled)), -exponent)
        column = pa.array([value], pa.decimal128(38, max(0, -exponent)))
        assert value_text(column).to_pylist() == [java.util.Objects.toString(big)], value


def test_dates_and_timestamps():
    assert value_text(pa.array([dt.date(1969, 12, 31)])).to_pylist() == ["1969-12-31"]
    moment = dt.datetime(2024, 1, 1, 0, 0, 0, 5, tzinfo=dt.UTC)
    # consistent.logical.timestamp off (Hudi's default): the raw epoch microseconds
    assert value_text(pa.array([moment], pa.timestamp("us", "UTC"))).to_pylist() == ["1704067200000005"]
    assert value_text(pa.array([moment], pa.timestamp("us", "Asia/Tokyo"))).to_pylist() == ["1704067200000005"]


def test_simple_and_complex_keys():
    rows = pa.table({"a": [1, None, 3, 4], "b": ["x", "", None, ""]})
    keys, reasons = record_keys(rows, ["b"])
    assert keys.to_pylist() == ["x", None, None, None]
    assert reasons.to_pylist()[1] == "record key field 'b' is null or empty"
    keys, reasons = record_keys(rows, ["a", "b"])
    assert keys.to_pylist() == ["a:1,b:x", None, "a:3,b:__null__", "a:4,b:__empty__"]
    assert reasons.to_pylist() == [None, "every record key field (a, b) is null or empty", None, None]
    # one key field under ComplexKeyGenerator (two partition fields): field:value, not the bare value of HUDI-7001
    keys, reasons = record_keys(rows, ["b"], complex_key=True)
    assert keys.to_pylist() == ["b:x", None, None, None]
    assert reasons.to_pylist()[1] == "every record key field (b) is null or empty"


def test_partition_paths_escape_as_hive_does():
    assert escape_path_name("a/b c#%:=?*'\"\\{[]^\t\x7f") == "a%2Fb c%23%25%3A%3D%3F%2A%27%22%5C%7B%5B%5D%5E%09%7F"
    rows = pa.table({"p": ["x/y", None, "", "ok"], "q": [1.0, 2.5, 3.0, 4.0]})
    paths, reasons = partition_paths(rows, ["p", "q"], hive_style=True, urlencode=True)
    assert paths.to_pylist() == [
        "p=x%2Fy/q=1.0",
        "p=__HIVE_DEFAULT_PARTITION__/q=2.5",
        "p=__HIVE_DEFAULT_PARTITION__/q=3.0",
        "p=ok/q=4.0",
    ]
    assert reasons.null_count == 4
    paths, reasons = partition_paths(rows, ["p"], urlencode=False)
    assert reasons.to_pylist()[0] == "partition value of 'p' contains '/'"


@pytest.mark.parametrize("name", [*COW_FIXTURES, MOR_FIXTURE])
def test_our_key_generator_reproduces_every_spark_fixtures_keys_and_partitions(fixtures_dir, name):
    """Hudi's Spark writer made these keys and partition paths; ours, from the data columns alone, must equal them."""
    table = Table.open(str(fixtures_dir / name))
    config = table.config
    files = [e for e in table.io.walk() if e.name.endswith(".parquet") and not e.path.startswith(".hoodie")]
    assert files
    checked = 0
    for entry in files:
        data = pq.read_table(table.io.full_path(entry.path))
        paths, reasons = partition_paths(
            data, config.partition_fields, config.hive_style_partitioning, config.urlencode_partitions
        )
        assert reasons.null_count == len(reasons)
        assert set(paths.to_pylist()) == {posixpath.dirname(entry.path)}, "the partition directory Hudi chose"
        if config.populate_meta_fields:
            keys, _ = record_keys(data, config.record_key_fields, config.complex_key)
            assert keys.to_pylist() == data["_hoodie_record_key"].to_pylist()
            assert paths.to_pylist() == data["_hoodie_partition_path"].to_pylist()
        checked += data.num_rows
    assert checked >= 4


@pytest.mark.parametrize("bare", [False, True])
def test_a_one_field_complex_key_table_keeps_the_encoding_its_data_has(tmp_path, monkeypatch, bare):
    from writes import upsert

    from laketide.coordinator import Coordinator, LocalLease
    from laketide.table.format.properties import TableConfig
    from laketide.writer.preflight import complex_key_encoding

    table = Table.create(str(tmp_path / "t"), "t", ["id"], ["region", "day"], "v")
    assert table.config.complex_key, "two partition fields make it ComplexKeyGenerator"
    assert complex_key_encoding(table, table.file_system_view()), "an empty table takes Hudi's default, field:value"
    if bare:  # as Hudi 0.14.1 to 1.0.2 wrote it (HUDI-7001)
        monkeypatch.setattr(TableConfig, "complex_key", property(lambda self: False))
    lease = LocalLease.for_table(table.uri, job_id="w")
    lease.acquire()
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string()), ("day", pa.string())])
    upsert(table, Coordinator(table, lease, "w"), 0, [{"id": 7, "v": 1, "region": "eu", "day": "d1"}], schema)
    lease.release()
    monkeypatch.undo()
    stored = Table.open(table.uri).snapshot()["_hoodie_record_key"].to_pylist()
    assert stored == (["7"] if bare else ["id:7"])
    reopened = Table.open(table.uri)
    assert complex_key_encoding(reopened, reopened.file_system_view()) is not bare


def test_paths_made_per_distinct_value_equal_paths_made_per_row():
    """partition_paths makes each distinct value's path once; it must equal the path made row by row, for
    every type (nulls, '/', dates, zoned timestamps, decimals, booleans) and any number of fields."""
    import datetime
    import decimal

    from laketide.table.format.keygen import _partition_paths

    rows = pa.table(
        {
            "b": [True, None, False, True],
            "d": pa.array([datetime.date(2020, 1, 1), None, datetime.date(2020, 1, 1), datetime.date(2021, 1, 1)]),
            "ts": pa.array([1, 2, None, 1], pa.timestamp("ms", tz="UTC")),
            "dec": pa.array(
                [decimal.Decimal("1.50"), None, decimal.Decimal("1.50"), decimal.Decimal("2.00")], pa.decimal128(5, 2)
            ),
            "s": ["a/b", "", None, "x"],
            "i": [1, None, 1, 2],
        }
    )
    for fields in (["b"], ["d"], ["ts"], ["dec"], ["s"], ["i"], ["b", "s", "dec"], ["i", "d"]):
        for hive_style in (False, True):
            for urlencode in (False, True):
                once, each = (
                    partition_paths(rows, fields, hive_style, urlencode),
                    _partition_paths(rows, fields, hive_style, urlencode),
                )
                assert [a.to_pylist() for a in once] == [a.to_pylist() for a in each], (fields, hive_style, urlencode)


def test_virtual_keys_make_a_stored_rows_key_from_its_key_fields_and_blank_the_meta_columns():
    """A table without meta columns: its rows' keys are made as an incoming record's are (``record_keys``), the key
    fields read in place of the key column, and what is written has every meta column null."""
    stored = pa.table({RECORD_KEY: pa.nulls(2, pa.string()), "id": [7, 8], "name": ["a", None], "v": [1, 2]})
    simple, complex_ = VirtualKeys(("id",)), VirtualKeys(("id", "name"), complex_key=True)
    assert simple.columns([RECORD_KEY, "v"]) == [RECORD_KEY, "v", "id"]
    assert simple.columns(["v"]) == ["v"] and simple.columns(None) is None
    assert simple.keyed(stored, [RECORD_KEY, "v"]).to_pydict() == {RECORD_KEY: ["7", "8"], "v": [1, 2]}
    assert complex_.keyed(stored)[RECORD_KEY].to_pylist() == ["id:7,name:a", "id:8,name:__null__"]
    assert simple.keyed(stored.drop_columns([RECORD_KEY])).column_names[-1] == RECORD_KEY
    written = VirtualKeys.blank(pa.table({**{c: pa.array(["x", "y"]) for c in META_COLUMNS}, "id": [7, 8]}))
    assert all(written[c].null_count == 2 for c in META_COLUMNS) and written["id"].to_pylist() == [7, 8]
