"""Tables the catalog tests register: orders of every kind of column a catalog declares, partitioned by two
fields, written through ``laketide.write``, and a ``delete_partition`` as the job runs one."""

from __future__ import annotations

import pyarrow as pa
from writes import upsert

import laketide as lt
from laketide.coordinator import Coordinator, LocalLease
from laketide.table import Table
from laketide.table.format.schema import META_COLUMNS

META = list(META_COLUMNS)
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.decimal128(10, 2)),
        ("ts", pa.int64()),
        ("day", pa.date32()),
        ("tags", pa.list_(pa.string())),
        ("region", pa.string()),
        ("shard", pa.int32()),
    ]
)
EXPECTED_COLUMNS = [
    *[(m, "string") for m in META],
    ("id", "bigint"),
    ("name", "string"),
    ("amount", "decimal(10,2)"),
    ("ts", "bigint"),
    ("day", "date"),
    ("tags", "array<string>"),
]


def rows(ids, ts: int, regions=("eu", "us")) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "id": i,
                "name": f"n{i}",
                "amount": None,
                "ts": ts,
                "day": None,
                "tags": ["a"],
                "region": regions[i % len(regions)],
                "shard": (i // 2) % 2,
            }
            for i in ids
        ],
        SCHEMA,
    )


def write(path, data, table_type="COPY_ON_WRITE", hive_style=False, **more):
    settings = {"write": {"index_shards": 2, "parallelism": 2}, "table": {"hive_style_partitioning": hive_style}}
    return lt.write(
        str(path),
        data,
        record_key="id",
        partition_by=["region", "shard"],
        ordering_field="ts",
        table_type=table_type,
        name="orders",
        settings=settings,
        **more,
    )


def delete_partition(path, data: pa.Table) -> None:
    """A ``delete_partition`` of the partitions ``data`` falls in, as the job runs one."""
    table = Table.open(str(path))
    lease = LocalLease.for_table(table.uri, job_id="ops")
    lease.acquire()
    try:
        upsert(table, Coordinator(table, lease, "ops"), 0, data.to_pylist(), data.schema, operation="delete_partition")
    finally:
        lease.release()
