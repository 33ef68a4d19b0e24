"""The two per-task stages of a micro-batch, as functions over Arrow batches.

``assign`` runs once per index shard (after the shuffle by shard) and
``write`` once per set of file groups (after the shuffle by file group). Both
take a ``BatchPlan`` the driver built, and touch storage only through
``FileIO``; they do not import Spark, so they run in tests without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from laketide.index.assigner import FILE_ID, PARTITION, AssignPlan, BucketAssigner
from laketide.index.state import IndexSnapshot, StateIndex, index_entries, index_keys, shard_of
from laketide.table.commit import WriteStat
from laketide.table.files import BaseFile
from laketide.table.io import FileIO
from laketide.table.markers import CREATE, MERGE, WriteMarkers
from laketide.table.schema import RECORD_KEY
from laketide.writer.base_file import ensure_partition_metadata
from laketide.writer.bucket_writer import BucketWriter, FileGroupTarget
from laketide.writer.prepare import RAW, REASON, SHARD

STATUS_SCHEMA = pa.schema(
    [("stat", pa.string()), ("partition", pa.string()), ("file_id", pa.string()), ("newly_covered", pa.bool_()), ("late", pa.int64())]
)
# delta part numbers: 0 for the assign stage, 1 + task id for keys the write stage indexes
_WRITE_PART_BASE = 1


@dataclass
class BatchPlan:
    table_uri: str
    instant: str
    assign: AssignPlan
    index: IndexSnapshot
    current: dict[tuple[str, str], str]
    uncovered: frozenset[tuple[str, str]]
    table_schema: pa.Schema
    avro_schema: str
    bloom_type: str
    partition_depth: int
    ordering_field: str | None = None  # set under event-time ordering


def _concat(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    batches = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(batches) if batches else None


def _read_keys(io: FileIO) -> Callable[[str], pa.Array]:
    def read(path: str) -> pa.Array:
        with io.open_input(path) as f:
            return pq.read_table(f, columns=[RECORD_KEY])[RECORD_KEY].combine_chunks()

    return read


def _read_footer(io: FileIO) -> Callable[[str], dict]:
    def read(path: str) -> dict:
        with io.open_input(path) as f:
            return pq.read_metadata(f).metadata or {}

    return read


def assign(plan: BatchPlan, batches: Iterator[pa.RecordBatch], out_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    rows = _concat(batches)
    if rows is None:
        return
    io = FileIO.for_uri(plan.table_uri)
    index = StateIndex(io, plan.index.shards)
    rows = rows.drop_columns([c for c in (REASON, RAW) if c in rows.column_names])
    shards = rows[SHARD].to_numpy()
    for shard in np.unique(shards):
        part = rows.filter(pa.array(shards == shard)).drop_columns([SHARD])
        assigner = BucketAssigner(int(shard), plan.assign, index.load_shard(plan.index, int(shard)), _read_keys(io), _read_footer(io))
        assigned, entries = assigner.assign(part)
        index.write_delta(int(shard), plan.instant, entries, part=0)
        yield from assigned.select(out_schema.names).cast(out_schema).to_batches()


def _index_whole_group(plan: BatchPlan, io: FileIO, path: str, partition: str, file_id: str, task: int) -> None:
    """Add every key of a file group the index did not cover, so it is covered from now on."""
    keys = _read_keys(io)(path)
    hashes = index_keys(pa.array([partition] * len(keys), pa.string()), keys)
    shards = shard_of(hashes, plan.index.shards)
    index = StateIndex(io, plan.index.shards)
    for shard in np.unique(shards):
        count = int((shards == shard).sum())
        entries = index_entries(hashes[shards == shard], [partition] * count, [file_id] * count)
        index.write_delta(int(shard), plan.instant, entries, part=_WRITE_PART_BASE + task)


def write(plan: BatchPlan, batches: Iterator[pa.RecordBatch], task: int, token: str | None = None) -> Iterator[pa.RecordBatch]:
    """Write the file groups of one task; ``token`` names this task attempt in its file names."""
    rows = _concat(batches)
    if rows is None:
        return
    io = FileIO.for_uri(plan.table_uri)
    markers = WriteMarkers(io, plan.instant)
    rows = rows.sort_by([(PARTITION, "ascending"), (FILE_ID, "ascending"), (RECORD_KEY, "ascending")])
    partitions = rows[PARTITION].to_numpy(zero_copy_only=False)
    file_ids = rows[FILE_ID].to_numpy(zero_copy_only=False)
    starts = np.concatenate([[0], np.nonzero((partitions[1:] != partitions[:-1]) | (file_ids[1:] != file_ids[:-1]))[0] + 1])
    ends = np.append(starts[1:], len(partitions))
    statuses = []
    seqno = 0
    for start, end in zip(starts, ends):
        partition, file_id = partitions[start], file_ids[start]
        incoming = rows.slice(start, end - start).drop_columns([PARTITION, FILE_ID])
        current = plan.current.get((partition, file_id))
        base = BaseFile.parse(partition, current) if current else None
        ensure_partition_metadata(io, partition, plan.instant, plan.partition_depth)
        target = FileGroupTarget(partition, file_id, base)
        writer = BucketWriter(
            io, target, plan.instant, task, plan.table_schema, plan.avro_schema, plan.bloom_type, plan.ordering_field, token, first_seqno=seqno
        )
        markers.create(writer.new_file.path, MERGE if base else CREATE)
        stat = writer.write(incoming)
        seqno = writer.counts.seqno
        newly_covered = (partition, file_id) in plan.uncovered
        if newly_covered:
            _index_whole_group(plan, io, stat.path, partition, file_id, task)
        statuses.append({"stat": stat.model_dump_json(by_alias=True), "partition": partition, "file_id": file_id, "newly_covered": newly_covered, "late": writer.counts.late})
    yield pa.RecordBatch.from_pylist(statuses, schema=STATUS_SCHEMA)


def stat_of(row: dict) -> WriteStat:
    return WriteStat.model_validate_json(row["stat"])
