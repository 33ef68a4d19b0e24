"""Every Spark SQL type Hudi stores, through the real job, read back value by value.

The landing files are written by Spark itself from rows of every type (with
nulls at every level); the job upserts them in two micro-batches, so some rows
are copied from the first base file into the second.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from readback import hudi_read

from laketide.config import load_config
from laketide.spark.job import run
from laketide.table import Table

DDL = (
    "k INT, d DOUBLE, b BOOLEAN, t TINYINT, s SMALLINT, i INT, l BIGINT, f FLOAT, "
    "dec38 DECIMAL(38,9), dec5 DECIMAL(5,2), str STRING, bin BINARY, day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, "
    "arr ARRAY<INT>, arr_s ARRAY<STRUCT<x: STRING, y: DOUBLE>>, m MAP<STRING, BIGINT>, "
    "st STRUCT<a: INT, inner: STRUCT<b: STRING, c: ARRAY<DATE>>>"
)
UTC = dt.UTC


def _row(k: int, d: float, **values) -> dict:
    return {**values, "k": k, "d": d}


FULL = dict(
    b=True,
    t=-128,
    s=32767,
    i=-2147483648,
    l=9223372036854775807,
    f=0.1,
    dec38=Decimal("12345678901234567890123456789.123456789"),
    dec5=Decimal("-999.99"),
    str='ünïcode, "quoted"\n',
    bin=b"\x00\xffbytes",
    day=dt.date(1969, 12, 31),
    ts=dt.datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC),
    ntz=dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
    arr=[1, None, 3],
    arr_s=[{"x": "a", "y": 1.5}, None, {"x": None, "y": None}],
    m={"one": 1, "none": None},
    st={"a": 7, "inner": {"b": "deep", "c": [dt.date(2000, 1, 1), None]}},
)
FIRST = [
    _row(1, 1.0, **FULL),
    _row(2, 0.001, **{k: None for k in FULL}),
    _row(
        3,
        1e7,
        b=False,
        t=0,
        s=0,
        i=0,
        l=0,
        f=-0.0,
        dec38=Decimal("0E-9"),
        dec5=Decimal("0.01"),
        str="",
        bin=b"",
        day=dt.date(2262, 4, 11),
        ts=dt.datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC),
        ntz=dt.datetime(1900, 1, 1),
        arr=[],
        arr_s=[],
        m={},
        st={"a": None, "inner": None},
    ),
]
SECOND = [
    _row(
        2,
        0.001,
        **{**FULL, "day": None, "str": "updated", "arr": [None], "st": {"a": None, "inner": {"b": None, "c": None}}},
    ),
    _row(4, -2.5e-5, **{**FULL, "f": 3.4028235e38, "l": -1, "m": None}),
]


def _land(spark, root: Path, name: str, rows: list[dict], mtime: float) -> None:
    """One parquet landing file written by Spark from ``rows`` under ``DDL``."""
    staging = root / f"staging-{name}"
    spark.createDataFrame(rows, DDL).coalesce(1).write.parquet(str(staging))
    (part,) = staging.glob("part-*.parquet")
    landing = root / "landing"
    landing.mkdir(exist_ok=True)
    os.utime(part, (mtime, mtime))
    part.rename(landing / f"{name}.parquet")
    shutil.rmtree(staging)


def _expected(spark) -> dict[int, dict]:
    """The final rows as Spark itself reads them back (its own FLOAT rounding, map order, time zone)."""
    latest = {r["k"]: r for r in FIRST}
    latest.update({r["k"]: r for r in SECOND})
    return {r["k"]: r for r in spark.createDataFrame(list(latest.values()), DDL).toArrow().to_pylist()}


def _parts() -> list[str]:
    """The column definitions of ``DDL``, split at top-level commas."""
    depth, out, current = 0, [], ""
    for ch in DDL + ",":
        depth += (ch in "<(") - (ch in ">)")
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    return out


def _top_columns() -> list[str]:
    return [part.split(" ")[0] for part in _parts()]


def _run(root: Path, columns: list[str]):
    ddl = ", ".join(part for part, name in zip(_parts(), _top_columns()) if name in columns)
    config = load_config(
        overrides=[
            f"table.path={root / 'table'}",
            "table.name=types",
            'table.record_key=["k", "d"]',
            'table.partition_by=["day"]',
            "source.format=parquet",
            f"source.path={root / 'landing'}",
            f"source.schema={ddl}",
            "source.max_files_per_trigger=1",
            f"stream.checkpoint={root / 'checkpoint'}",
            "stream.trigger=available-now",
            "write.index_shards=2",
            "write.parallelism=2",
        ]
    )
    return run(config)


@pytest.fixture(scope="module")
def typed_tables(spark, tmp_path_factory):
    """Two tables from the same landing files: every type, and every type but TIMESTAMP_NTZ (hudi-rs 0.5 cannot read
    it)."""
    out = {}
    for label, columns in (("all", _top_columns()), ("no_ntz", [c for c in _top_columns() if c != "ntz"])):
        root = tmp_path_factory.mktemp(f"types-{label}")
        _land(spark, root, "b0", FIRST, 1_700_000_000)
        _land(spark, root, "b1", SECOND, 1_700_000_001)
        out[label] = (root / "table", _run(root, columns), columns)
    return out


def _compare(actual: pa.Table, expected: dict[int, dict], columns: list[str]) -> None:
    got = {r["k"]: r for r in actual.to_pylist()}
    assert sorted(got) == sorted(expected)
    for k, row in expected.items():
        for column in columns:
            want, have = row[column], got[k][column]
            assert have == want, f"row {k}, column {column}: {have!r} != {want!r}"


def test_every_type_round_trips_through_hudi_rs(spark, typed_tables):
    path, writer, columns = typed_tables["no_ntz"]
    assert [(r.inserts, r.updates) for r in writer.status.recent] == [(3, 0), (1, 1)]
    _compare(hudi_read(path), _expected(spark), columns)


def test_every_type_round_trips_through_our_reader(spark, typed_tables):
    path, _, columns = typed_tables["all"]
    _compare(Table.open(str(path)).snapshot(), _expected(spark), columns)


def test_keys_and_partitions_are_encoded_as_hudis_key_generators_do(spark, typed_tables):
    """ComplexKeyGenerator text of (INT, DOUBLE) and date partitions: what Java's toString makes."""
    path, _, _ = typed_tables["no_ntz"]
    double = spark._jvm.java.lang.Double
    table = hudi_read(path).to_pylist()
    for row in table:
        assert row["_hoodie_record_key"] == f"k:{row['k']},d:{double.toString(float(row['d']))}"
        expected_partition = row["day"].isoformat() if row["day"] is not None else "__HIVE_DEFAULT_PARTITION__"
        assert row["_hoodie_partition_path"] == expected_partition
    assert {r["_hoodie_record_key"] for r in table} == {"k:1,d:1.0", "k:2,d:0.001", "k:3,d:1.0E7", "k:4,d:-2.5E-5"}


# What Hudi's Spark writer puts in its Avro schema for each Spark type
# (hudi-spark-common: org/apache/spark/sql/avro/SchemaConverters.scala, toAvroType; nulls first, as AvroConversionUtils
# does).
HUDI_AVRO = {
    "k": "int",
    "d": "double",
    "b": "boolean",
    "t": "int",
    "s": "int",
    "i": "int",
    "l": "long",
    "f": "float",
    "dec38": {
        "type": "fixed",
        "name": "fixed",
        "namespace": "hoodie.types.types_record.dec38",
        "size": 16,
        "logicalType": "decimal",
        "precision": 38,
        "scale": 9,
    },
    "dec5": {
        "type": "fixed",
        "name": "fixed",
        "namespace": "hoodie.types.types_record.dec5",
        "size": 3,
        "logicalType": "decimal",
        "precision": 5,
        "scale": 2,
    },
    "str": "string",
    "bin": "bytes",
    "day": {"type": "int", "logicalType": "date"},
    "ts": {"type": "long", "logicalType": "timestamp-micros"},
    "ntz": {"type": "long", "logicalType": "local-timestamp-micros"},
    "arr": {"type": "array", "items": ["null", "int"]},
    "arr_s": {
        "type": "array",
        "items": [
            "null",
            {
                "type": "record",
                "name": "arr_s",
                "namespace": "hoodie.types.types_record",
                "fields": [
                    {"name": "x", "type": ["null", "string"], "default": None},
                    {"name": "y", "type": ["null", "double"], "default": None},
                ],
            },
        ],
    },
    "m": {"type": "map", "values": ["null", "long"]},
    "st": {
        "type": "record",
        "name": "st",
        "namespace": "hoodie.types.types_record",
        "fields": [
            {"name": "a", "type": ["null", "int"], "default": None},
            {
                "name": "inner",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "inner",
                        "namespace": "hoodie.types.types_record.st",
                        "fields": [
                            {"name": "b", "type": ["null", "string"], "default": None},
                            {
                                "name": "c",
                                "type": [
                                    "null",
                                    {"type": "array", "items": ["null", {"type": "int", "logicalType": "date"}]},
                                ],
                                "default": None,
                            },
                        ],
                    },
                ],
                "default": None,
            },
        ],
    },
}


def test_avro_schema_uses_hudis_logical_types(typed_tables):
    path, _, columns = typed_tables["all"]
    table = Table.open(str(path))
    commit = table.timeline.completed_writes()[-1]
    schema = json.loads(table.timeline.commit_metadata(commit).extra_metadata["schema"])
    assert (schema["name"], schema["namespace"]) == ("types_record", "hoodie.types")
    fields = {f["name"]: f for f in schema["fields"]}
    assert list(fields) == columns
    for name, avro in HUDI_AVRO.items():
        assert fields[name] == {"name": name, "type": ["null", avro], "default": None}, name
