"""The job extends a table Apache Hudi's Spark writer wrote: existing keys found through its bloom filters."""

from __future__ import annotations

import base64
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from readback import hudi_read
from streaming import land

from laketide.config import load_config
from laketide.index.bloom import FOOTER_BLOOM, FOOTER_BLOOM_TYPE, FOOTER_MAX_KEY, FOOTER_MIN_KEY
from laketide.index.state import StateIndex
from laketide.spark.job import run
from laketide.table import Table
from laketide.table.format.schema import RECORD_KEY

DDL = "id INT, name STRING, isActive BOOLEAN, longField BIGINT, doubleField DOUBLE, byteField INT"


def _config(path, tmp_path):
    """The job upserting the landing directory under ``tmp_path`` into the fixture copy at ``path``: only the
    table's path, as for any existing table (its hoodie.properties give the key id, the partition field
    byteField and the ordering field longField)."""
    return load_config(
        overrides=[
            f"table.path={path}",
            "source.format=json",
            f"source.path={tmp_path / 'landing'}",
            f"source.schema={DDL}",
            f"stream.checkpoint={tmp_path / 'checkpoint'}",
            "stream.trigger=available-now",
            "write.index_shards=2",
        ]
    )


def test_updates_land_in_the_spark_written_file_groups(spark, fixture_copy, tmp_path):
    path = fixture_copy("v6_simplekeygen_nonhivestyle")
    before = {r["id"]: r for r in hudi_read(path).to_pylist()}
    groups_before = {r["id"]: r["_hoodie_file_name"].split("_")[0] for r in before.values()}
    updates = [
        {
            "id": i,
            "name": f"updated-{i}",
            "isActive": True,
            "longField": 10_000_000_000 + i,
            "doubleField": 1.5,
            "byteField": before[i]["byteField"],
        }
        for i in (1, 2, 3, 4)
    ]
    updates.append({"id": 5, "name": "new", "isActive": False, "longField": 5, "doubleField": 2.5, "byteField": 30})
    land(tmp_path, "updates.json", updates, 1_700_000_000)
    writer = run(_config(path, tmp_path))
    (report,) = writer.status.recent
    assert (report.updates, report.inserts) == (4, 1)

    after = hudi_read(path)
    assert after.num_rows == 5
    assert len(set(after["_hoodie_record_key"].to_pylist())) == 5
    by_id = {r["id"]: r for r in after.to_pylist()}
    for i in (1, 2, 3, 4):
        assert by_id[i]["name"] == f"updated-{i}"
        assert by_id[i]["longField"] == 10_000_000_000 + i
        assert by_id[i]["_hoodie_file_name"].split("_")[0] == groups_before[i], "updated in place, in its file group"
    assert by_id[5]["name"] == "new" and by_id[5]["byteField"] == 30

    # the fixture's file groups are now covered by the state index: the next run needs no bloom lookups
    table = Table.open(str(path))
    timeline = table.timeline
    snapshot = StateIndex.open(table.io, 2).snapshot({i.timestamp for i in timeline.completed_writes()})
    assert set(groups_before.values()) <= {file_id for _, file_id in snapshot.covered}


def _rekey_with_hadoop_blooms(jvm, table_path, new_id) -> None:
    """Give every row of a Spark-written table a new id (and record key), with footers Hadoop's code builds.

    The bloom filter of each base file is made by ``org.apache.hadoop.util.bloom.BloomFilter``
    at Hudi's default size, so the probe below reads filters that are not ours.
    """
    from hadoop_bloom import hadoop_simple_filter

    for path in sorted(Path(table_path).glob("*/*.parquet")):
        data = pq.read_table(path)
        footer = dict(pq.read_metadata(path).metadata)
        ids = [new_id(i) for i in data["id"].to_pylist()]
        keys = [str(i) for i in ids]
        data = data.set_column(data.schema.get_field_index("id"), "id", pa.array(ids, pa.int32()))
        data = data.set_column(data.schema.get_field_index(RECORD_KEY), RECORD_KEY, pa.array(keys, pa.string()))
        footer[FOOTER_BLOOM.encode()] = base64.b64encode(hadoop_simple_filter(jvm, keys, 2_587_966, 30))
        footer[FOOTER_BLOOM_TYPE.encode()] = b"SIMPLE"
        footer[FOOTER_MIN_KEY.encode()] = min(keys).encode()
        footer[FOOTER_MAX_KEY.encode()] = max(keys).encode()
        pq.write_table(data.replace_schema_metadata(footer), path)


def test_upserts_of_3_and_7_byte_keys_find_hadoop_built_filters(spark, fixture_copy, tmp_path):
    path = fixture_copy("v6_simplekeygen_nonhivestyle")
    new_id = lambda i: 100 + i if i % 2 else 1_000_000 + i  # noqa: E731 - "101" (3 bytes), "1000002" (7 bytes)
    _rekey_with_hadoop_blooms(spark._jvm, path, new_id)
    before = {r["id"]: r for r in hudi_read(path).to_pylist()}
    assert sorted(len(str(i)) for i in before) == [3, 3, 7, 7]
    updates = [
        {
            "id": i,
            "name": f"updated-{i}",
            "isActive": True,
            "longField": 10_000_000_000 + i,
            "doubleField": 1.5,
            "byteField": row["byteField"],
        }
        for i, row in before.items()
    ]
    updates.append({"id": 777, "name": "new", "isActive": False, "longField": 5, "doubleField": 2.5, "byteField": 10})
    land(tmp_path, "updates.json", updates, 1_700_000_000)
    (report,) = run(_config(path, tmp_path)).status.recent
    assert (report.updates, report.inserts) == (4, 1)
    after = hudi_read(path)
    keys = after["_hoodie_record_key"].to_pylist()
    assert sorted(keys) == sorted([str(i) for i in before] + ["777"]), "no key written twice"
    by_id = {r["id"]: r for r in after.to_pylist()}
    for i in before:
        assert by_id[i]["name"] == f"updated-{i}"
