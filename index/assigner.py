"""The bucket assigner: decide the file group of every record of one index shard.

Per shard, for one micro-batch:

1. dedupe by (partition, key): the highest ordering value wins, then the later arrival;
2. tag known keys with the state index;
3. look unknown keys up in the bloom filters (and key ranges) of the file
   groups the index does not cover yet, confirming hits against the file's keys;
4. bin-pack the remaining inserts into the small file groups this shard owns,
   then into new file groups.

The result is the records with their file group, and the index entries the
micro-batch adds (keys found through blooms, and new inserts).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.bloom import BloomFilter, KeyRange
from laketide.index.state import ShardRun, index_entries, index_keys
from laketide.table.schema import IS_DELETED, RECORD_KEY

PARTITION = "_lt_partition"
FILE_ID = "_lt_file_id"
# Arrival order of a row within its micro-batch: its landing file (and block), then its line.
ARRIVAL_FILE = "_lt_arrival_file"
ARRIVAL = "_lt_arrival"
_FILE_ID_NAMESPACE = uuid.UUID("6f0c3a4e-7c1d-4b8e-9a5f-2d1e0b7c9a11")


@dataclass(frozen=True)
class SmallFileGroup:
    partition: str
    file_id: str
    capacity: int  # records it can still take before reaching the target size


@dataclass(frozen=True)
class UncoveredGroup:
    """A file group whose keys the state index does not hold (written by another writer)."""

    partition: str
    file_id: str
    base_path: str


@dataclass
class AssignPlan:
    """What the driver decides for every shard of one micro-batch (small and picklable)."""

    instant: str
    shards: int
    ordering_field: str | None
    new_group_records: int
    small_groups: dict[int, list[SmallFileGroup]] = field(default_factory=dict)
    uncovered: dict[str, list[UncoveredGroup]] = field(default_factory=dict)
    # the table's live file groups; an index entry naming another (replaced by clustering, cleaned, restored away) is stale
    live: frozenset[tuple[str, str]] | None = None

    def owner_of(self, file_id: str) -> int:
        return int(uuid.uuid5(_FILE_ID_NAMESPACE, file_id).int % self.shards)


def new_file_id(plan: AssignPlan, shard: int, partition: str, n: int) -> str:
    """The ``n``-th new file group this shard opens in ``partition`` for this instant.

    Deterministic, so a retried task routes records to the same groups; and
    chosen so that the shard owns it, so the same shard keeps filling it in
    later micro-batches until it is no longer small.
    """
    attempt = 0
    while True:
        candidate = f"{uuid.uuid5(_FILE_ID_NAMESPACE, f'{plan.instant}/{shard}/{partition}/{n}/{attempt}')}-0"
        if plan.owner_of(candidate) == shard:
            return candidate
        attempt += 1


def dedupe(rows: pa.Table, ordering_field: str | None) -> pa.Table:
    """One row per (partition, key): highest ordering value, then latest arrival (later file, later line)."""
    if rows.num_rows <= 1:
        return rows
    sort = [(PARTITION, "ascending"), (RECORD_KEY, "ascending")]
    if ordering_field:
        sort.append((ordering_field, "descending"))
    if ARRIVAL_FILE in rows.column_names:
        sort.append((ARRIVAL_FILE, "descending"))
    sort.append((ARRIVAL, "descending"))
    ordered = rows.take(pc.sort_indices(rows, sort_keys=sort))
    parts = ordered[PARTITION].to_numpy(zero_copy_only=False)
    keys = ordered[RECORD_KEY].to_numpy(zero_copy_only=False)
    first = np.ones(len(keys), dtype=bool)
    first[1:] = (keys[1:] != keys[:-1]) | (parts[1:] != parts[:-1])
    return ordered.filter(pa.array(first))


class BucketAssigner:
    def __init__(
        self,
        shard: int,
        plan: AssignPlan,
        run: ShardRun,
        read_keys: Callable[[str], pa.Array],
        read_footer: Callable[[str], dict],
    ):
        self.shard = shard
        self.plan = plan
        self.run = run
        self._read_keys = read_keys
        self._read_footer = read_footer
        self._blooms: dict[str, tuple[BloomFilter | None, KeyRange | None]] = {}
        self._keys: dict[str, pa.Array] = {}

    def _bloom(self, path: str) -> tuple[BloomFilter | None, KeyRange | None]:
        if path not in self._blooms:
            footer = self._read_footer(path)
            self._blooms[path] = (BloomFilter.from_footer(footer), KeyRange.from_footer(footer))
        return self._blooms[path]

    def _file_keys(self, path: str) -> pa.Array:
        if path not in self._keys:
            self._keys[path] = self._read_keys(path)
        return self._keys[path]

    def _probe_uncovered(self, partition: str, keys: pa.Array) -> list[str | None]:
        """File id of each key among the partition's uncovered groups, confirmed against their keys."""
        found: list[str | None] = [None] * len(keys)
        for group in self.plan.uncovered.get(partition, []):
            pending = np.array([f is None for f in found])
            if not pending.any():
                break
            candidates = pending.copy()
            bloom, key_range = self._bloom(group.base_path)
            if key_range is not None:
                candidates &= key_range.contains_many(keys)
            if bloom is not None and candidates.any():
                idx = np.nonzero(candidates)[0]
                candidates[idx] = bloom.might_contain_many(keys.take(pa.array(idx)))
            if candidates.any():
                idx = np.nonzero(candidates)[0]
                present = pc.is_in(keys.take(pa.array(idx)), value_set=self._file_keys(group.base_path))
                for i, hit in zip(idx, present.to_pylist()):
                    if hit:
                        found[i] = group.file_id
        return found

    def assign(self, rows: pa.Table) -> tuple[pa.Table, pa.Table]:
        """(records with ``_lt_file_id``, index entries to add) for this shard's rows."""
        rows = dedupe(rows, self.plan.ordering_field)
        n = rows.num_rows
        hashes = index_keys(rows[PARTITION], rows[RECORD_KEY])
        codes = self.run.lookup(hashes)
        if self.plan.live is not None and len(self.run.groups):
            stale = np.array([g not in self.plan.live for g in self.run.groups], dtype=bool)
            codes = np.where((codes >= 0) & stale[np.maximum(codes, 0)], -1, codes)
        file_ids: list[str | None] = [self.run.groups[c][1] if c >= 0 else None for c in codes]
        partitions = rows[PARTITION].to_pylist()
        deleted = pc.fill_null(rows[IS_DELETED], False).to_pylist() if IS_DELETED in rows.column_names else [False] * n
        new_entry = np.zeros(n, dtype=bool)

        unknown = [i for i in range(n) if file_ids[i] is None]
        by_partition: dict[str, list[int]] = {}
        for i in unknown:
            by_partition.setdefault(partitions[i], []).append(i)
        for partition, idx in by_partition.items():
            if partition in self.plan.uncovered:
                keys = rows[RECORD_KEY].take(pa.array(idx)).combine_chunks()
                for i, fid in zip(idx, self._probe_uncovered(partition, keys)):
                    if fid is not None:
                        file_ids[i], new_entry[i] = fid, True
            inserts = [i for i in idx if file_ids[i] is None and not deleted[i]]
            for i, fid in zip(inserts, self._pack(partition, len(inserts))):
                file_ids[i], new_entry[i] = fid, True

        # deletes of keys the table never had have nowhere to go and nothing to do
        keep = np.array([fid is not None for fid in file_ids], dtype=bool)
        assigned = rows.append_column(FILE_ID, pa.array(file_ids, pa.string())).filter(pa.array(keep))
        chosen = np.nonzero(new_entry)[0]
        entries = index_entries(hashes[chosen], [partitions[i] for i in chosen], [file_ids[i] for i in chosen])
        return assigned.drop_columns([c for c in (ARRIVAL_FILE, ARRIVAL) if c in assigned.column_names]), entries

    def _pack(self, partition: str, count: int) -> Iterable[str]:
        """File ids for ``count`` inserts: small groups this shard owns first, then new groups."""
        for group in self.plan.small_groups.get(self.shard, []):
            if group.partition != partition:
                continue
            take = min(count, group.capacity)
            yield from [group.file_id] * take
            count -= take
            if count == 0:
                return
        n = 0
        while count > 0:
            take = min(count, self.plan.new_group_records)
            yield from [new_file_id(self.plan, self.shard, partition, n)] * take
            count -= take
            n += 1
