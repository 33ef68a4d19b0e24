"""Planning one instant: what the stages need to know before any record moves.

Read from the table's timeline and the job's synced view, once per instant, on the driver.
"""

from __future__ import annotations

import fnmatch
import logging
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from laketide.config import WriteSection
from laketide.index.assigner import AssignPlan, SmallFileGroup, UncoveredGroup
from laketide.index.bloom import BloomSpec, KeyRange
from laketide.index.state import IndexSnapshot, StateIndex
from laketide.index.sync import ForeignWrites, foreign_writes
from laketide.table import Table
from laketide.table.format.properties import EVENT_TIME
from laketide.table.format.schema import avro_schema_json, evolve, with_meta_schema
from laketide.table.format.timeline import Timeline, redrawn
from laketide.table.format.view import FileSlice, FileSystemView, GroupKey
from laketide.table.reading.view_sync import ViewSync
from laketide.table.storage.io import FileIO
from laketide.writer import stages
from laketide.writer.files.log_writer import LogTarget
from laketide.writer.files.stored_files import footer_reader
from laketide.writer.slots import balanced_slots

log = logging.getLogger("laketide.job")
DEFAULT_RECORD_SIZE = 1024


class FirstKeys:
    """The first record key of each small file group's base file, which routes inserts by key range.

    Read from the file's footer (``hoodie_min_record_key``) once, since a base file never changes, and
    kept while its group is small: a copy-on-write group that takes inserts has a new base file each
    micro-batch, so a batch reads one footer per small group it rewrote. Used by the batch thread only.
    """

    def __init__(self, io: FileIO):
        self._read_footer = footer_reader(io)
        self._keys: dict[str, str | None] = {}

    def of(self, paths: list[str]) -> dict[str, str | None]:
        missing = [p for p in paths if p not in self._keys]
        if len(missing) > 1:
            with ThreadPoolExecutor(min(8, len(missing))) as pool:
                read = dict(zip(missing, pool.map(self._read, missing)))
        else:
            read = {p: self._read(p) for p in missing}
        # only the groups still small: the cache stays the size of the table's small groups
        self._keys = {p: read[p] if p in read else self._keys[p] for p in paths}
        return dict(self._keys)

    def _read(self, path: str) -> str | None:
        try:
            key_range = KeyRange.from_footer(self._read_footer(path))
        except FileNotFoundError:  # cleaned since the view was read: the write that needs it will say so
            return None
        return key_range.min_key if key_range else None


def bloom_spec(write: WriteSection, record_size: int) -> BloomSpec:
    """The bloom filter of the table's new base files, sized to a file of the target size."""
    return BloomSpec.sized(write.bloom_type, write.bloom_entries, write.target_file_size, record_size)


def average_record_size(timeline: Timeline) -> int:
    """Bytes per record in the table's recent base files (Hudi's average record size estimate)."""
    writes = timeline.completed_writes()[-5:]
    stats = [s for i in writes for s in timeline.commit_metadata(i).write_stats() if s.num_writes]
    total = sum(s.num_writes for s in stats)
    return max(64, sum(s.file_size_in_bytes for s in stats) // total) if total else DEFAULT_RECORD_SIZE


@redrawn
def plan_instant(
    table: Table,
    views: ViewSync,
    index: StateIndex,
    write: WriteSection,
    instant: str,
    incoming: pa.Schema,
    first_keys: FirstKeys,
    placeholder: str | None = None,
) -> tuple[stages.BatchPlan, ForeignWrites]:
    """What the stages of one instant need: where each key may live (the index snapshot, the groups it
    does not cover, the small groups with room and where their keys begin), the schema, the write slots
    and, on merge-on-read, each group's next log file. Other writers' commits since the last instant
    uncover the groups they touched.

    It reads the commits its listing of the timeline shows, and the services thread may archive one meanwhile:
    the plan is then drawn again from a new listing."""
    timeline = table.timeline
    view = views.view(timeline)
    latest = view.latest_slices()
    bases = [(s, s.base_file) for s in latest if s.base_file is not None]
    slices = [s for s, _ in bases]
    current = {(s.partition, s.file_id): base.name for s, base in bases}
    live = {(s.partition, s.file_id): base.path for s, base in bases}
    snapshot, uncovered, foreign = _coverage(timeline, index, set(current), instant)
    record_size = average_record_size(timeline)
    settings = table.config
    records = max(1, write.target_file_size // record_size)
    assign = _assign_plan(table, index, write, instant, live, records, placeholder)
    _uncovered_and_small_groups(assign, slices, uncovered, write, record_size, first_keys)
    # checked at start; a schema another writer changed since then is checked again here
    schema = evolve(table.schema(timeline), incoming)
    plan = stages.BatchPlan(
        table_uri=table.uri,
        instant=instant,
        assign=assign,
        index=snapshot,
        current=current,
        uncovered=uncovered,
        table_schema=schema,
        avro_schema=avro_schema_json(with_meta_schema(schema), table.name),
        bloom=bloom_spec(write, record_size),
        compression=write.parquet_compression,
        log_compression=write.log_compression,
        partition_depth=len(settings.partition_fields),
        ordering_field=settings.ordering_field if settings.merge_mode == EVENT_TIME else None,
        target_file_size=write.target_file_size,
        log_targets=_log_targets(view, slices, instant) if settings.table_type == "MERGE_ON_READ" else None,
        write_slots=balanced_slots({s.file_id: s.size for s in slices}, write.parallelism),
        write_tasks=write.parallelism,
        table_empty=not latest,
        storage_options=table.io.options,
        virtual_keys=settings.virtual_keys,
    )
    return plan, foreign


def _assign_plan(
    table: Table,
    index: StateIndex,
    write: WriteSection,
    instant: str,
    live: dict[GroupKey, str],
    records: int,
    placeholder: str | None,
) -> AssignPlan:
    """How the instant's keys find their groups: ``live`` the groups' current base files, ``records`` a new
    group's room, ``placeholder`` a change feed's stand-in for a value it did not send."""
    settings = table.config
    return AssignPlan(
        instant,
        index.shards,
        settings.ordering_field,
        records,
        live=live,
        lookup=write.operation != "insert",
        global_keys=index.global_keys,
        event_time=settings.merge_mode == EVENT_TIME and settings.ordering_field is not None,
        placeholder=placeholder,
    )


def _coverage(
    timeline: Timeline, index: StateIndex, groups: set[GroupKey], instant: str
) -> tuple[IndexSnapshot, frozenset[GroupKey], ForeignWrites]:
    """The index's snapshot as of ``timeline``, the ``groups`` it does not cover (other writers' commits since
    uncover the groups they touched, or every group), and those commits."""
    snapshot = index.snapshot({i.timestamp for i in timeline.completed_writes()}, timeline.start)
    foreign = foreign_writes(timeline)
    if foreign.everything or foreign.touched:
        log.info(
            "instant %s: %s changed by other writers; their keys are probed again",
            instant,
            "every file group" if foreign.everything else f"{len(foreign.touched)} file groups",
        )
    still_covered = set() if foreign.everything else snapshot.covered - foreign.touched
    return snapshot, frozenset(groups - still_covered), foreign


def _uncovered_and_small_groups(
    assign: AssignPlan,
    slices: list[FileSlice],
    uncovered: frozenset,
    write: WriteSection,
    record_size: int,
    first_keys: FirstKeys,
) -> None:
    """The groups the index does not cover (probed by their blooms), and the small groups with room
    (inserts fill them, by key range, before opening new ones)."""
    small = []
    for s in slices:
        base = s.base_file
        if base is None:  # the plan's slices all have one
            continue
        if (s.partition, s.file_id) in uncovered:
            logs = tuple(lf.path for lf in s.log_files)
            assign.uncovered.setdefault(s.partition, []).append(UncoveredGroup(s.partition, s.file_id, base.path, logs))
        elif s.size < write.small_file_limit and (write.target_file_size - s.size) // record_size > 0:
            small.append(s)
    firsts = first_keys.of([s.base_file.path for s in small])
    for s in small:
        capacity = (write.target_file_size - s.size) // record_size
        assign.small_groups.setdefault(s.partition, []).append(
            SmallFileGroup(s.partition, s.file_id, capacity, firsts[s.base_file.path])
        )
    for groups in assign.small_groups.values():
        # the fullest first, for the groups whose range is not known: it leaves the small ones soonest
        groups.sort(key=lambda g: (g.capacity, g.file_id))


def _log_targets(view: FileSystemView, slices: list[FileSlice], instant: str) -> dict[tuple[str, str], LogTarget]:
    """Merge-on-read: each live file group's next log file, on its latest committed slice.

    Version 6: named by the slice's base instant, one version past its last; also while a compaction of the
    group is pending, whose commit carries such logs over to the slice it starts (``writer.compactor``), so every
    reader sees them throughout. Version 8: named by ``instant``, the deltacommit writing it, version 1; which
    slice it belongs to follows from when that deltacommit completes (``FileSystemView``), so nothing is carried.
    """
    targets = {}
    by_instant = view.timeline.config.version >= 8
    for s in slices:
        key = (s.partition, s.file_id)
        if by_instant:
            targets[key] = LogTarget(1, s, instant)
        else:
            targets[key] = LogTarget(view.next_log_version(s.partition, s.file_id, s.base_instant), s)
    return targets


def partitions_to_delete(
    plan: stages.BatchPlan, batch_partitions: list[str], patterns: list[str] | None
) -> dict[str, list[str]]:
    """delete_partition: every file group of the partitions to delete, by partition.

    Those ``patterns`` name (``write.partitions_to_delete``: glob patterns over the table's partitions), else
    those the micro-batch's records fall in (``batch_partitions``), as Hudi's datasource does when
    ``hoodie.datasource.write.partitions.to.delete`` is unset.
    """
    if patterns is None:
        partitions = batch_partitions
    else:
        table_partitions = sorted({p for p, _ in plan.current})
        partitions = [p for p in table_partitions if any(fnmatch.fnmatchcase(p, pattern) for pattern in patterns)]
    replaced = {p: sorted(f for q, f in plan.current if q == p) for p in partitions}
    replaced = {p: ids for p, ids in replaced.items() if ids}
    log.info(
        "instant %s: deleting partitions %s (%d file groups)",
        plan.instant,
        sorted(replaced) or "none",
        sum(map(len, replaced.values())),
    )
    return replaced


def every_file_group(plan: stages.BatchPlan) -> dict[str, list[str]]:
    """Every file group of the table when ``plan`` was made, by partition: what a truncate replaces."""
    groups: dict[str, list[str]] = {}
    for partition, file_id in sorted(set(plan.current) | set(plan.log_targets or {})):
        groups.setdefault(partition, []).append(file_id)
    return groups
