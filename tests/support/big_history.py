"""A table with a long history: 10,000 file groups written by a bulk insert, and an archived timeline of
100,000 instants before it (each archival a block, as the archiver appends them), for the dashboard's timing."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import laketide
from laketide.table import Table
from laketide.table.format.archive import ArchivedTimeline, archived_entry
from laketide.table.format.commit import CommitMetadata, WriteStat
from laketide.table.format.instant import DELTA_COMMIT, Instant, State, parse_instant_time

PARTITIONS = 100


def write_file_groups(path: Path, groups: int) -> Table:
    """A merge-on-read table of ``groups`` one-row file groups over ``PARTITIONS`` partitions.

    A bulk insert writes one file group per partition; the rest are copies of those base files with a row
    of their own, under new file ids of the same committed instant, without the footer (its bloom filter and
    key range name the template's key, not the copy's)."""
    rows = pa.table(
        {
            "id": pa.array(range(PARTITIONS), pa.int64()),
            "p": pa.array([f"p{i:03d}" for i in range(PARTITIONS)]),
            "v": pa.array([float(i) for i in range(PARTITIONS)]),
            "ts": pa.array(range(PARTITIONS), pa.int64()),
        }
    )
    laketide.write(
        str(path),
        rows,
        operation="bulk_insert",
        record_key="id",
        partition_by="p",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        name="history",
    )
    table = Table.open(str(path))
    for n, file_slice in enumerate(table.file_system_view().latest_slices()):
        base = file_slice.base_file
        template = pq.read_table(table.io.full_path(base.path)).replace_schema_metadata(None)
        for copy in range(1, groups // PARTITIONS):
            key = PARTITIONS * copy + n
            file_id = f"{uuid.uuid5(uuid.NAMESPACE_URL, f'history/{key}')}-0"
            row = template.set_column(template.schema.get_field_index("id"), "id", pa.array([key], pa.int64()))
            row = row.set_column(
                row.schema.get_field_index("_hoodie_record_key"), "_hoodie_record_key", pa.array([str(key)])
            )
            pq.write_table(row, table.io.full_path(f"{base.partition}/{file_id}_0-0-0_{base.instant_time}.parquet"))
    return table


def archive_history(table: Table, instants: int, per_archival: int = 1000) -> None:
    """``instants`` completed deltacommits, one second apart, all older than the table's timeline, archived.

    The n-th writes file group ``n % 1000`` (in partition ``n % 100``): the thousand distinct commit
    records are built once and stamped with each instant's time, as only the time tells them apart."""
    archive = ArchivedTimeline(table.io, table.config.archive_dir)
    templates = [_archived_template(n) for n in range(min(1000, instants))]
    for block in range(0, instants, per_archival):
        archive.append(
            [
                {**templates[n % 1000], "commitTime": parse_instant_time(1_600_000_000 + n)}
                for n in range(block, min(block + per_archival, instants))
            ]
        )


def _archived_template(n: int) -> dict:
    stat = WriteStat(
        file_id=f"f{n}-0",
        path=f"p{n % PARTITIONS:03d}/f{n}-0.log",
        partition_path=f"p{n % PARTITIONS:03d}",
        num_writes=100,
        num_inserts=40,
        num_update_writes=60,
        total_write_bytes=4096,
    )
    body = CommitMetadata(
        partition_to_write_stats={stat.partition_path: [stat]}, operation_type="UPSERT"
    ).to_json_bytes()
    return archived_entry(Instant(parse_instant_time(1_600_000_000 + n), DELTA_COMMIT, State.COMPLETED), body)
