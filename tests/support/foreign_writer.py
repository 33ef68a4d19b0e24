"""A stand-in for Hudi's other writers, whose layouts laketide never writes itself: clustering (every key
into a new file group, under a replacecommit) and small-file inserts into a group chosen by the test.

Like those writers it keeps no laketide state index: tests of how laketide meets their commits
(``index.sync``) write them with this. Every other test writes through the product (``writes.py``).
A key already in the table goes back to its file group; new keys of a partition go to one new file
group per commit.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa

from laketide.table import Table
from laketide.table.format.commit import SCHEMA_KEY
from laketide.table.format.files import new_file_id
from laketide.table.format.keygen import partition_paths, record_keys
from laketide.table.format.schema import (
    FILE_NAME,
    PARTITION_PATH,
    RECORD_KEY,
    avro_schema_json,
    data_schema,
    with_meta_schema,
)
from laketide.writer.files.base_file import ensure_partition_metadata
from laketide.writer.files.bucket_writer import BucketWriter, FileGroupTarget
from laketide.writer.files.settings import FileSettings, TaskFiles


def write_file_groups(
    table: Table,
    instant: str,
    data: pa.Table,
    schema: pa.Schema,
    new_groups_only: bool = False,
    insert_into: dict[str, str] | None = None,
) -> list:
    """Write one instant's file groups; ``new_groups_only`` puts every key in a new group (as clustering does);
    ``insert_into`` sends the new keys of a partition to that existing group (as Hudi's small-file handling does)."""
    config = table.config
    data = data.append_column(RECORD_KEY, record_keys(data, config.record_key_fields, config.complex_key)[0])
    partitions = partition_paths(
        data, config.partition_fields, config.hive_style_partitioning, config.urlencode_partitions
    )[0]
    data = data.append_column("__partition", partitions)
    view = table.file_system_view()
    slices = {(s.partition, s.file_id): s for s in view.latest_slices()}
    located = {}
    snap = table.snapshot()
    if snap.num_rows and not new_groups_only:
        for key, part, name in zip(
            snap[RECORD_KEY].to_pylist(), snap[PARTITION_PATH].to_pylist(), snap[FILE_NAME].to_pylist()
        ):
            located[key] = (part, name.split("_")[0])
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    fresh: dict[str, str] = dict(insert_into or {})
    for i, (key, part) in enumerate(zip(data[RECORD_KEY].to_pylist(), data["__partition"].to_pylist())):
        target = located.get(key) or (part, fresh.setdefault(part, new_file_id()))
        groups[target].append(i)
    avro = avro_schema_json(with_meta_schema(schema), config.name)
    stats = []
    for task, ((partition, file_id), idx) in enumerate(sorted(groups.items())):
        incoming = data.take(pa.array(idx)).drop_columns(["__partition"]).sort_by(RECORD_KEY)
        current = slices.get((partition, file_id))
        target = FileGroupTarget(partition, file_id, current.base_file if current else None)
        writer = BucketWriter(table.io, target, FileSettings(data_schema(schema), avro), TaskFiles(instant, task))
        stats.append(writer.write(incoming))
    for partition in {p for p, _ in groups}:
        ensure_partition_metadata(table.io, partition, instant, len(config.partition_fields))
    return stats


def foreign_upsert(table: Table, coordinator, batch_id: int, records: list[dict], schema: pa.Schema) -> str:
    """One commit as such a writer makes it: its files and its commit, and no index."""
    instant = coordinator.begin(batch_id)
    stats = write_file_groups(table, instant, pa.Table.from_pylist(records, schema=schema), schema)
    coordinator.commit(instant, stats, {SCHEMA_KEY: avro_schema_json(data_schema(schema), table.name)})
    return instant
