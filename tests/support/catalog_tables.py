"""Tables the catalog tests register: orders of every kind of column a catalog declares, partitioned by two
fields (or one, or none), written through ``laketide.write``; a ``delete_partition`` as the job runs one, and an
operator's savepoint, restore and rollback."""

from __future__ import annotations

import pyarrow as pa
from writes import upsert

import laketide as lt
from laketide.coordinator import Coordinator, LocalLease
from laketide.table import Table
from laketide.table.format.schema import META_COLUMNS
from laketide.writer.job.operations import Operations

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


def write(path, data, table_type="COPY_ON_WRITE", hive_style=False, partition_by=("region", "shard"), **more):
    settings = {"write": {"index_shards": 2, "parallelism": 2}, "table": {"hive_style_partitioning": hive_style}}
    return lt.write(
        str(path),
        data,
        record_key="id",
        partition_by=list(partition_by),
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


def operate(path, action):
    """``action(operations)`` under the table's lease, as ``laketide savepoint|restore|rollback`` runs it."""
    table = Table.open(str(path))
    with Operations.under_lease(table, LocalLease.for_table(table.uri, job_id="ops")) as operations:
        return action(operations)
