"""The per-task stages of a micro-batch, as functions over Arrow batches.

``route`` runs once per index shard on the routing columns of its rows (``assign`` wraps it for a task
that holds whole rows, after the shuffle by shard) and ``write`` once per set of file groups (after the
shuffle by file group, or the driver's split by write slot); a bulk
insert's one stage is in ``writer.bulk_stage``. All take a ``BatchPlan`` the
driver built, and touch storage only through ``FileIO``; they do not import
Spark, so they run in tests without it.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.assigner import AssignPlan, BucketAssigner
from laketide.index.bloom import BloomSpec
from laketide.index.columns import (
    ARRIVAL,
    ARRIVAL_FILE,
    EXISTED,
    FILE_ID,
    KEY_HASH,
    PARTITION,
    ROW,
    SHARD,
    WRITE_SLOT,
)
from laketide.index.dedupe import first_of_each_run
from laketide.index.hashing import index_keys
from laketide.index.key_order import by_key, stable_order
from laketide.index.state import (
    IndexSnapshot,
    StateIndex,
    index_entries,
    shard_of,
)
from laketide.table.format.commit import WriteStat
from laketide.table.format.encoding import BASE_FILE_CODEC, LOG_BLOCK_CODEC, ONE_PER_FILE, records_dictionary_columns
from laketide.table.format.files import BaseFile
from laketide.table.format.keygen import VirtualKeys
from laketide.table.format.markers import CREATE, MERGE, WriteMarkers
from laketide.table.format.schema import IS_DELETED, RECORD_KEY, with_meta_schema
from laketide.table.storage.io import FileIO
from laketide.writer.files.base_file import encoded_text, ensure_partition_metadata
from laketide.writer.files.bucket_writer import BucketWriter, FileGroupTarget
from laketide.writer.files.log_writer import LogTarget, LogWriter, OrderingSpan, ordering_spans
from laketide.writer.files.settings import FileSettings, TaskFiles
from laketide.writer.files.stored_files import column_reader, footer_reader, key_reader
from laketide.writer.slots import present, split_by

# a write status as it travels from a task: its write stat as Hudi's JSON, then the file group and late records
STATUS_SCHEMA = pa.schema(
    [("stat", pa.string()), ("partition", pa.string()), ("file_id", pa.string()), ("late", pa.int64())]
)


@dataclass(frozen=True)
class WriteStatus:
    """What one write task wrote into one file group; ``stat`` is None when every record it got was late."""

    partition: str
    file_id: str
    stat: WriteStat | None
    late: int = 0

    @classmethod
    def of(cls, stat: WriteStat | None, late: int = 0, group: tuple[str, str] | None = None) -> WriteStatus:
        if stat is not None:
            return cls(stat.partition_path or "", stat.file_id, stat, late)
        if group is None:
            raise ValueError("a write status needs its write's statistics or its file group")
        return cls(*group, stat, late)

    def to_row(self) -> dict:
        return {
            "stat": self.stat.model_dump_json(by_alias=True) if self.stat else "",
            "partition": self.partition,
            "file_id": self.file_id,
            "late": self.late,
        }

    @classmethod
    def from_row(cls, row: dict) -> WriteStatus:
        stat = WriteStat.model_validate_json(row["stat"]) if row["stat"] else None
        return cls(row["partition"], row["file_id"], stat, row["late"])


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
    bloom: BloomSpec
    partition_depth: int
    ordering_field: str | None = None  # set under event-time ordering
    target_file_size: int = 128 * 2**20  # where a bulk insert starts a new file group
    # merge-on-read: where each existing file group's log file goes (None for copy-on-write)
    log_targets: dict[tuple[str, str], LogTarget] | None = None
    # the write task of each existing file group, by file id; a new group goes to its shard's
    write_slots: dict[str, int] | None = None
    write_tasks: int = 1
    table_empty: bool = False  # the table had no file slice when the plan was made
    # the columns every new file of the micro-batch dictionary-encodes, decided once from its records
    # (``records_dictionary_columns``) by whoever holds them; None: each write task decides from its own
    dictionary: list[str] | None = None
    # a table without meta columns: how stored rows get their record keys (``TableConfig.virtual_keys``)
    virtual_keys: VirtualKeys | None = None
    compression: str = BASE_FILE_CODEC  # of base files (Hudi's hoodie.parquet.compression.codec)
    log_compression: str = LOG_BLOCK_CODEC  # of parquet log blocks
    # how a task reaches the table's storage (object_store's keys; empty for a local or HDFS table)
    storage_options: dict[str, str] = field(default_factory=dict)
    # a truncate's position in the change feed: only records after it are written (``EVENT_POSITION`` above it)
    after: str | None = None

    def table_io(self) -> FileIO:
        return FileIO.for_uri(self.table_uri, self.storage_options)

    def file_settings(self) -> FileSettings:
        """What every data file of the instant is written with."""
        return FileSettings(
            self.table_schema,
            self.avro_schema,
            self.bloom,
            self.ordering_field,
            self.compression,
            self.log_compression,
            self.assign.placeholder,
            self.virtual_keys,
        )


def repeated(value: str, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), n)


def _concat(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    held = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(held) if held else None


def routing_columns(rows: pa.Table, ordering_field: str | None) -> pa.Table:
    """The columns of prepared rows that decide where each goes, and each row's position (``ROW``): the
    assign stage works on these, and only the write stage's rows are taken whole (``routed_rows``).
    Deduplicating, splitting and filtering every column at each step of the assign stage cost it a fifth
    more thread time on a 100,000-row merge-on-read micro-batch."""
    names = dict.fromkeys(
        c
        for c in (RECORD_KEY, PARTITION, SHARD, KEY_HASH, ARRIVAL_FILE, ARRIVAL, IS_DELETED, ordering_field)
        if c and c in rows.column_names
    )
    return rows.select(list(names)).append_column(ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))


def route(plan: BatchPlan, rows: pa.Table) -> pa.Table:
    """Where each of ``rows`` (``routing_columns``, at least one) goes, per index shard: the surviving rows' key,
    partition, ``ROW``, file group, whether the table held the key and the write task; and the index
    entries the micro-batch adds, written as each shard's delta run."""
    io = plan.table_io()
    index = StateIndex(io, plan.index.shards)
    shards = rows[SHARD].to_numpy()
    routed = []
    for shard in present(shards):
        mine = shards == shard
        part = rows if mine.all() else rows.filter(pa.array(mine))  # the driver's parts hold one shard each
        hashes = part[KEY_HASH].to_numpy()
        run = index.load_shard(plan.index, int(shard))
        assigner = BucketAssigner(
            int(shard),
            plan.assign,
            run,
            key_reader(io, plan.virtual_keys),
            footer_reader(io),
            column_reader(io, plan.virtual_keys),
        )
        assigned, entries = assigner.assign(part.drop_columns([SHARD, KEY_HASH]), hashes)
        index.write_delta(int(shard), plan.instant, entries, part=0)
        routed.append(assigned.append_column(WRITE_SLOT, record_write_slots(plan, assigned[FILE_ID].combine_chunks())))
    return pa.concat_tables(routed, promote_options="default")


def routed_rows(rows: pa.Table, routing: pa.Table, out_schema: pa.Schema) -> pa.Table:
    """The rows ``routing`` names (by ``ROW``, a row twice when it moves partition), with the columns
    ``route`` set: what the write stage takes, in ``out_schema``."""
    taken = [name for name in out_schema.names if name not in routing.column_names]
    data = rows.select(taken).take(routing[ROW])
    for name in routing.column_names:
        if name in out_schema.names:
            data = data.append_column(name, routing[name])
    if IS_DELETED in out_schema.names and IS_DELETED not in data.column_names:
        data = data.append_column(IS_DELETED, pa.repeat(pa.scalar(False), data.num_rows))
    return data.select(out_schema.names).cast(out_schema)


def assign(plan: BatchPlan, rows: pa.Table, out_schema: pa.Schema) -> list[tuple[int, pa.Table]]:
    """The assign stage over whole prepared rows: ``route``, then the routed rows of each write slot. The rows
    are taken once, by the routing split by slot (narrow columns only). They are not put in file-group order
    here: a write task gets its slot's rows from every assign task, so it orders them itself
    (``_by_file_group``); ordering each part first was a sixth of an assign task. A task may hold none:
    every row of its shard went to quarantine."""
    if not rows.num_rows:
        return []
    routing = route(plan, routing_columns(rows, plan.assign.ordering_field))
    return [
        (slot, routed_rows(rows, part, out_schema)) for slot, part in split_by(routing, routing[WRITE_SLOT].to_numpy())
    ]


def slot_rows(rows: pa.Table, routing: pa.Table, out_schema: pa.Schema) -> pa.Table:
    """``routed_rows`` of one write slot's ``routing``, in file-group order: the narrow routing columns are
    ordered, and the whole rows taken once, in that order."""
    order = stable_order(file_group_order(routing))
    return routed_rows(rows, routing.take(pa.array(order)), out_schema)


def record_write_slots(plan: BatchPlan, file_ids: pa.Array) -> pa.Array:
    """The write task of each record, by its file group: the driver's choice for existing groups, and
    one chosen from the group's id for a new one, which several shards' inserts may share."""
    slots = dict(plan.write_slots or {})
    for file_id in pc.unique(file_ids).to_pylist():
        if file_id not in slots:
            slots[file_id] = zlib.crc32(file_id.encode()) % plan.write_tasks
    at = pc.index_in(file_ids, value_set=pa.array(list(slots), pa.string()))
    return pa.array(list(slots.values()), pa.int32()).take(at)


def _index_whole_group(plan: BatchPlan, io: FileIO, paths: list[str], partition: str, file_id: str, task: int) -> None:
    """Add every key of a file group the index did not cover, so it is covered from now on."""
    read = key_reader(io, plan.virtual_keys)
    keys = pc.unique(pa.concat_arrays([read(p) for p in paths]))
    partitions = repeated(partition, len(keys))
    write_entries(
        plan, io, index_keys(partitions, keys, plan.index.global_keys), partitions, repeated(file_id, len(keys)), task
    )


def write_entries(
    plan: BatchPlan, io: FileIO, hashes: np.ndarray, partitions: pa.Array, file_ids: pa.Array, task: int
) -> None:
    """Index entries a write task adds, one delta run per shard: each key's index hash (``index_keys``), partition and
    file group."""
    shards = shard_of(hashes, plan.index.shards)
    index = StateIndex(io, plan.index.shards)
    for shard in present(shards):
        mine = shards == shard
        at = pa.array(mine)
        index.write_delta(
            int(shard),
            plan.instant,
            index_entries(hashes[mine], partitions.filter(at), file_ids.filter(at)),
            part=_WRITE_PART_BASE + task,
        )


def ordered_codes(values: pa.ChunkedArray) -> np.ndarray:
    """A code per value that sorts as the values do: its rank among the distinct values (1 for the least),
    so that a string column is ordered by sorting small integers."""
    encoded = values.combine_chunks().dictionary_encode()
    rank = pc.rank(encoded.dictionary, "ascending").to_numpy().astype(np.int64)
    return rank[encoded.indices.to_numpy()]


def file_group_order(rows: pa.Table) -> np.ndarray:
    """A code per row that orders rows by (partition, file id), whatever order they come in."""
    file_ids = ordered_codes(rows[FILE_ID])
    return ordered_codes(rows[PARTITION]) * (int(file_ids.max(initial=0)) + 1) + file_ids


def _by_file_group(rows: pa.Table) -> tuple[pa.Table, np.ndarray, list[tuple[str, str]]]:
    """Rows with each file group's rows together, in the order they came, where each group starts, and
    each group's (partition, file id).
    Rows that come so (the driver's write workers order their slot as they take it, ``slot_rows``) are not
    copied, and only compared with their neighbours: ranking both string columns again to check took a
    twentieth of a merge-on-read write. Others (a task's parts from several assign tasks) are ordered by
    (partition, file id). Only a base file needs its rows sorted by key (a log block is merged by key
    whatever its order), so only those are, group by group: sorting every row by its string key took a
    sixth of a merge-on-read write."""
    starts = np.flatnonzero(first_of_each_run(rows, [PARTITION, FILE_ID]))
    groups = _groups_at(rows, starts)
    if len(set(groups)) == len(groups):
        return rows, starts, groups  # every group is one run
    group = file_group_order(rows)
    order = stable_order(group)
    rows = rows.take(pa.array(order))
    # where the ordered codes change: the string columns need not be compared again
    starts = np.flatnonzero(np.diff(group[order], prepend=-1))
    return rows, starts, _groups_at(rows, starts)


def _groups_at(rows: pa.Table, starts: np.ndarray) -> list[tuple[str, str]]:
    at = pa.array(starts)
    return list(zip(rows[PARTITION].take(at).to_pylist(), rows[FILE_ID].take(at).to_pylist()))


def _ordering_spans(
    plan: BatchPlan, rows: pa.Table, starts: np.ndarray, log_schema: pa.Schema
) -> list[OrderingSpan] | None:
    """Each file group's ``OrderingSpan`` when a merge-on-read task logs under event-time ordering."""
    field = plan.ordering_field
    if plan.log_targets is None or field is None or field not in rows.column_names:
        return None
    return ordering_spans(rows, starts, field, log_schema.field(field).type)


def write(
    plan: BatchPlan, batches: Iterator[pa.RecordBatch], task: int, token: str | None = None
) -> Iterator[pa.RecordBatch]:
    """Write the file groups of one task; ``token`` names this task attempt in its file names."""
    rows = _concat(batches)
    if rows is None:
        return
    if WRITE_SLOT in rows.column_names:
        rows = rows.drop_columns([WRITE_SLOT])
    rows, starts, groups = _by_file_group(rows)
    ends = np.append(starts[1:], rows.num_rows)
    # once a task, not once a log block: the one-value meta columns go to parquet as dictionaries (``LogWriter``)
    log_schema = encoded_text(with_meta_schema(plan.table_schema), ONE_PER_FILE)
    spans = _ordering_spans(plan, rows, starts, log_schema)
    writing = _TaskWrite(plan, task, token, log_schema, rows)
    rows = rows.drop_columns([PARTITION, FILE_ID])  # once, not from every group's slice
    ensured: set[str] = set()
    statuses = []
    for at, ((partition, file_id), start, end) in enumerate(zip(groups, starts, ends)):
        incoming = rows.slice(start, end - start)
        ensure_partition_metadata(writing.io, partition, plan.instant, plan.partition_depth, ensured)
        log_target = plan.log_targets.get((partition, file_id)) if plan.log_targets is not None else None
        if log_target is not None:
            stat, late = writing.append_log(log_target, incoming, spans[at] if spans else None)
        else:
            stat, late = writing.merge_base(partition, file_id, incoming)
        if (partition, file_id) in plan.uncovered:
            # a new base file holds the whole group; a log file adds to its slice
            written = [*(log_target.slice_paths if log_target else []), *([stat.path] if stat else [])]
            _index_whole_group(plan, writing.io, written, partition, file_id, task)
        statuses.append(WriteStatus.of(stat, late, (partition, file_id)).to_row())
    yield pa.RecordBatch.from_pylist(statuses, schema=STATUS_SCHEMA)


class _TaskWrite:
    """What one write task's file groups share: the store, the instant's markers, the task's sequence numbers and
    its rows' dictionary columns, and how a log block's schema is encoded."""

    def __init__(self, plan: BatchPlan, task: int, token: str | None, log_schema: pa.Schema, rows: pa.Table):
        self.plan, self.log_schema = plan, log_schema
        self.io = plan.table_io()
        self.markers = WriteMarkers(self.io, plan.instant)
        dictionary = plan.dictionary if plan.dictionary is not None else records_dictionary_columns(rows)
        self.files = TaskFiles(plan.instant, task, token, rows.num_rows, dictionary)
        self.settings = plan.file_settings()

    def append_log(
        self, target: LogTarget, incoming: pa.Table, span: OrderingSpan | None
    ) -> tuple[WriteStat | None, int]:
        """Merge-on-read: the group's records as one log file on its slice, those older than its stored rows left
        out as late (every record late: no log file, only the count)."""
        writer = LogWriter(self.io, target, self.settings, self.files, self.log_schema)
        incoming, late = writer.drop_late(incoming, span)
        if not incoming.num_rows:
            return None, late
        self.markers.create(writer.log_file.path, CREATE)
        return writer.write(incoming, incoming[EXISTED], span.highest if span else None), late

    def merge_base(self, partition: str, file_id: str, incoming: pa.Table) -> tuple[WriteStat, int]:
        """Copy-on-write (or a new group): the group's base file merged with its records into a new one."""
        plan = self.plan
        current = plan.current.get((partition, file_id))
        base = BaseFile.parse(partition, current) if current else None
        bucket = BucketWriter(self.io, FileGroupTarget(partition, file_id, base), self.settings, self.files)
        self.markers.create(bucket.new_file.path, MERGE if base else CREATE)
        stat = bucket.write(by_key(incoming))  # a base file is sorted by key: merges stream it
        return stat, bucket.counts.late
