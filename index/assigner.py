"""The bucket assigner: decide the file group of every record of one index shard.

Per shard, for one micro-batch:

1. dedupe by (partition, key), or by key in a global index: the highest
   ordering value wins, then the later arrival;
2. tag known keys with the state index;
3. look unknown keys up in the bloom filters (and key ranges) of the file
   groups the index does not cover yet, confirming hits against the file's keys;
4. in a global index, a record whose partition changed moves: a delete goes to
   its old file group, and the record becomes an insert in its new partition
   (unless event-time ordering keeps the stored row, which is newer);
5. route the remaining inserts by key: each goes to the partition's small file
   group whose key range it falls in or extends (the one with the highest
   first key at or below it), while that group has room, and the rest to new
   file groups, in key order, so file groups keep holding key ranges. Every
   shard fills the same groups, each taking its share of their room, so a
   micro-batch's inserts touch a few groups per partition rather than one per
   shard: copy-on-write rewrites fewer groups, and merge-on-read appends fewer
   logs. When new keys are the newest (order ids, timestamps), they land in the
   groups last filled, and the older ones are left alone.

The result is the records with their file group, and the index entries the
micro-batch adds (keys found through blooms, and new inserts). An insert
operation skips steps 2 to 4: it does not look keys up.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.bloom import BloomFilter, KeyRange
from laketide.index.columns import ARRIVAL, ARRIVAL_FILE, EXISTED, FILE_ID, PARTITION, flag_mask
from laketide.index.dedupe import dedupe
from laketide.index.hashing import index_keys
from laketide.index.key_order import key_order, stable_order
from laketide.index.shard_run import ShardRun
from laketide.index.state import index_entries
from laketide.table.format.schema import IS_DELETED, RECORD_KEY

_FILE_ID_NAMESPACE = uuid.UUID("6f0c3a4e-7c1d-4b8e-9a5f-2d1e0b7c9a11")
_as_py = operator.methodcaller("as_py")  # an Arrow scalar's Python value, what bisection compares


@dataclass(frozen=True)
class SmallFileGroup:
    partition: str
    file_id: str
    capacity: int  # records it can still take before reaching the target size
    first_key: str | None = None  # the lowest record key of its base file (footer), when known


@dataclass(frozen=True)
class UncoveredGroup:
    """A file group whose keys the state index does not hold (written by another writer).

    ``log_paths`` are the log files of its slice (merge-on-read): they carry no
    bloom filter, so a group with logs is confirmed against every file's keys.
    """

    partition: str
    file_id: str
    base_path: str | None
    log_paths: tuple[str, ...] = ()

    @property
    def paths(self) -> list[str]:
        return ([self.base_path] if self.base_path else []) + list(self.log_paths)


@dataclass
class AssignPlan:
    """What the driver decides for every shard of one micro-batch (small and picklable)."""

    instant: str
    shards: int
    ordering_field: str | None
    new_group_records: int
    # by partition, fullest first: the groups inserts fill before new ones, shared by every shard (those
    # with a known first key take the keys of their range first, ``BucketAssigner._route``)
    small_groups: dict[str, list[SmallFileGroup]] = field(default_factory=dict)
    uncovered: dict[str, list[UncoveredGroup]] = field(default_factory=dict)
    # the table's live file groups and their base files; an index entry naming another
    # (replaced by clustering, cleaned, restored away) is stale
    live: dict[tuple[str, str], str] | None = None
    lookup: bool = True  # False for the insert operation: every record is an insert
    global_keys: bool = False  # keys are unique across partitions; records move
    event_time: bool = False  # a stored row with a higher ordering value wins over an incoming one
    # a change feed's stand-in for a value it did not send, which the write stage replaces by the stored
    # value (``table.unchanged``); None: every value is real
    placeholder: str | None = None

    def share(self, room: int, shard: int) -> int:
        """This shard's part of ``room`` records: keys hash evenly over the shards, so each takes as many."""
        return room // self.shards + (1 if shard < room % self.shards else 0)


def new_file_id(plan: AssignPlan, partition: str, n: int) -> str:
    """The ``n``-th new file group of ``partition`` in this instant, the same for every shard that
    inserts there. Deterministic, so a retried task routes records to the same groups."""
    return f"{uuid.uuid5(_FILE_ID_NAMESPACE, f'{plan.instant}/{partition}/{n}')}-0"


class _GroupTable:
    """File groups by code: the shard run's own codes first, then the groups one micro-batch adds."""

    def __init__(self, known: list[tuple[str, str]]):
        self.pairs = list(known)
        self._codes = {g: i for i, g in enumerate(self.pairs)}

    def code(self, group: tuple[str, str]) -> int:
        if group not in self._codes:
            self._codes[group] = len(self.pairs)
            self.pairs.append(group)
        return self._codes[group]

    def columns(self, codes: np.ndarray) -> tuple[pa.Array, pa.Array]:
        """(partition, file id) columns of the groups with these codes."""
        partitions = pa.array([p for p, _ in self.pairs], pa.string())
        file_ids = pa.array([f for _, f in self.pairs], pa.string())
        at = pa.array(codes, pa.int32())
        return partitions.take(at), file_ids.take(at)


class BucketAssigner:
    def __init__(
        self,
        shard: int,
        plan: AssignPlan,
        run: ShardRun,
        read_keys: Callable[[str], pa.Array],
        read_footer: Callable[[str], dict],
        read_columns: Callable[[str, list[str]], pa.Table] | None = None,
    ):
        """``read_columns(path, names)`` reads columns of a base file: the ordering values of
        stored rows that a moving record is compared with (global index, event-time ordering)."""
        self.shard = shard
        self.plan = plan
        self.run = run
        self._read_keys = read_keys
        self._read_footer = read_footer
        self._read_columns = read_columns
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

    def _group_keys(self, group: UncoveredGroup) -> pa.Array:
        arrays = [self._file_keys(p) for p in group.paths]
        return pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())

    def _probe_uncovered(self, groups: list[UncoveredGroup], keys: pa.Array) -> list[UncoveredGroup | None]:
        """The uncovered group holding each key, among ``groups``, confirmed against their keys."""
        found: list[UncoveredGroup | None] = [None] * len(keys)
        for group in groups:
            pending = np.array([f is None for f in found])
            if not pending.any():
                break
            candidates = pending.copy()
            if group.base_path and not group.log_paths:
                bloom, key_range = self._bloom(group.base_path)
                if key_range is not None:
                    candidates &= key_range.contains_many(keys)
                if bloom is not None and candidates.any():
                    idx = np.nonzero(candidates)[0]
                    candidates[idx] = bloom.might_contain_many(keys.take(pa.array(idx)))
            if candidates.any():
                idx = np.nonzero(candidates)[0]
                present = pc.is_in(keys.take(pa.array(idx)), value_set=self._group_keys(group))
                for i, hit in zip(idx, present.to_pylist()):
                    if hit:
                        found[i] = group
        return found

    def assign(self, rows: pa.Table, hashes: np.ndarray | None = None) -> tuple[pa.Table, pa.Table]:
        """(records with ``_lt_file_id``, index entries to add) for this shard's rows; ``hashes``: their
        index hashes, when prepare made them."""
        plan = self.plan
        if hashes is None:
            hashes = index_keys(rows[PARTITION], rows[RECORD_KEY], plan.global_keys)
        rows, hashes = dedupe(rows, hashes, plan.ordering_field, plan.global_keys)
        n = rows.num_rows
        partitions = rows[PARTITION].combine_chunks().dictionary_encode()
        # each row's partition as a code into ``names``
        partition_codes, names = partitions.indices.to_numpy(zero_copy_only=False), partitions.dictionary.to_pylist()
        deleted = flag_mask(rows, IS_DELETED)
        groups = _GroupTable(self.run.groups)
        # the code (in ``groups``) of the file group each key is stored in now, -1 for a key the table does not have
        located = np.full(n, -1, np.int32)
        # keys found in the blooms of uncovered groups, and inserts, get index entries
        new_entry = np.zeros(n, bool)
        if plan.lookup:
            located, new_entry = self._locate(rows, hashes, partition_codes, names, groups)
        moves: dict[int, tuple[str, str]] = {}
        if plan.global_keys:
            pairs = [groups.pairs[c] if c >= 0 else None for c in located]
            # a moving row was located, so its pair is known
            moves = {
                i: pair
                for i in self._moves(rows, partitions.to_pylist(), deleted.tolist(), pairs)
                if (pair := pairs[i]) is not None
            }
            located[list(moves)] = -1
            new_entry[list(moves)] = True
        existed = located >= 0

        codes = located.copy()
        inserting = ~existed & ~deleted
        self._route_inserts(rows[RECORD_KEY], np.nonzero(inserting)[0], partition_codes, names, groups, codes)
        new_entry |= inserting

        # deletes of keys the table never had have nowhere to go and nothing to do
        keep = codes >= 0
        out_partitions, file_ids = groups.columns(codes[keep])
        assigned = rows if keep.all() else rows.filter(pa.array(keep))
        assigned = assigned.set_column(assigned.schema.get_field_index(PARTITION), PARTITION, out_partitions)
        assigned = assigned.append_column(FILE_ID, file_ids).append_column(EXISTED, pa.array(existed[keep]))
        if moves:
            assigned = pa.concat_tables([assigned, self._old_copies(rows, moves)], promote_options="default")
        chosen = np.nonzero(new_entry)[0]
        entries = index_entries(hashes[chosen], *groups.columns(codes[chosen]))
        return assigned.drop_columns([c for c in (ARRIVAL_FILE, ARRIVAL) if c in assigned.column_names]), entries

    def _locate(
        self, rows: pa.Table, hashes: np.ndarray, partition_codes: np.ndarray, names: list[str], groups: _GroupTable
    ) -> tuple[np.ndarray, np.ndarray]:
        """The code of each key's file group, from the state index, then from the uncovered groups'
        blooms; and which keys were found the second way."""
        codes = self.run.lookup(hashes)
        probed = np.zeros(len(codes), bool)
        if self.plan.live is not None and len(self.run.groups):
            stale = np.array([g not in self.plan.live for g in self.run.groups], dtype=bool)
            codes = np.where((codes >= 0) & stale[np.maximum(codes, 0)], -1, codes)
        unknown = np.nonzero(codes < 0)[0]
        if not len(unknown) or not self.plan.uncovered:
            return codes, probed
        if self.plan.global_keys:
            every_group = [g for found in self.plan.uncovered.values() for g in found]
            searches = [(every_group, unknown)]
        else:
            unknown_codes = partition_codes[unknown]
            searches = [
                (self.plan.uncovered[names[k]], unknown[unknown_codes == k])
                for k in np.unique(unknown_codes)
                if names[k] in self.plan.uncovered
            ]
        for candidates, idx in searches:
            keys = rows[RECORD_KEY].take(pa.array(idx)).combine_chunks()
            for i, group in zip(idx, self._probe_uncovered(candidates, keys)):
                if group is not None:
                    codes[i], probed[i] = groups.code((group.partition, group.file_id)), True
        return codes, probed

    def _moves(self, rows: pa.Table, partitions: list[str], deleted: list[bool], located: list) -> list[int]:
        """Rows (not deletes) stored under another partition that move to their new one.

        Under event-time ordering a stored row with a higher ordering value
        stays where it is: the incoming record goes to its file group, where
        the bucket writer counts it as late.
        """
        moving = [i for i, loc in enumerate(located) if loc is not None and loc[0] != partitions[i] and not deleted[i]]
        field = self.plan.ordering_field
        if not moving or not self.plan.event_time or self._read_columns is None or self.plan.live is None or not field:
            return moving
        incoming = rows[field].combine_chunks()
        late = set()
        for group in {located[i] for i in moving}:
            members = [i for i in moving if located[i] == group]
            stored = self._read_columns(self.plan.live[group], [RECORD_KEY, field])
            at = pc.index_in(rows[RECORD_KEY].take(pa.array(members)), value_set=stored[RECORD_KEY])
            stored_values = stored[field].cast(incoming.type).take(at)
            newer = pc.fill_null(pc.greater(stored_values, incoming.take(pa.array(members))), False).to_pylist()
            late |= {i for i, is_late in zip(members, newer) if is_late}
        return [i for i in moving if i not in late]

    @staticmethod
    def _old_copies(rows: pa.Table, moves: dict[int, tuple[str, str]]) -> pa.Table:
        """Deletes of the moved records' old copies, routed to the file groups that hold them."""
        old = rows.take(pa.array(list(moves)))
        n = old.num_rows
        old = old.set_column(
            old.schema.get_field_index(PARTITION), PARTITION, pa.array([p for p, _ in moves.values()], pa.string())
        )
        flag = pa.repeat(pa.scalar(True), n)
        if IS_DELETED in old.column_names:
            old = old.set_column(
                old.schema.get_field_index(IS_DELETED),
                old.schema.field(IS_DELETED),
                flag.cast(old.schema.field(IS_DELETED).type),
            )
        else:
            old = old.append_column(IS_DELETED, flag)
        old = old.append_column(FILE_ID, pa.array([f for _, f in moves.values()], pa.string()))
        return old.append_column(EXISTED, pa.repeat(pa.scalar(True), n))

    def _route_inserts(
        self,
        keys: pa.ChunkedArray,
        at: np.ndarray,
        partition_codes: np.ndarray,
        names: list[str],
        groups: _GroupTable,
        codes: np.ndarray,
    ) -> None:
        """Set ``codes`` (file groups, in ``groups``) of the inserts at ``at``: by partition (in code order) and
        in key order, the small groups first, then new groups (``_route``). One sort by (partition, key) for
        all of them: a sort per partition was a sixth of a merge-on-read batch's routing."""
        if not len(at):
            return
        inserted = keys.take(pa.array(at))
        by_key = key_order(inserted)
        order = by_key[stable_order(partition_codes[at][by_key])]  # 3 ms for 50,000 against 11 in one Arrow sort
        at, inserted = at[order], inserted.take(pa.array(order)).combine_chunks()
        in_order = partition_codes[at]
        bounds = [0, *(np.flatnonzero(np.diff(in_order)) + 1), len(at)]
        for start, end in itertools.pairwise(bounds):
            partition = names[in_order[start]]
            for file_id, positions in self._route(partition, inserted.slice(start, end - start)):
                codes[at[start:end][positions]] = groups.code((partition, file_id))

    def _route(self, partition: str, keys: pa.Array) -> Iterable[tuple[str, np.ndarray]]:
        """(file id, positions in ``keys``) for one partition's inserts, ``keys`` sorted: each key to the
        small group whose range it falls in or extends, up to this shard's share of the group's room;
        what is left, in key order, to the small groups without a known range, then to new groups."""
        small = self.plan.small_groups.get(partition, [])
        ranged = sorted((g for g in small if g.first_key is not None), key=lambda g: g.first_key or "")
        left = np.arange(len(keys))
        if ranged:
            # each key's group has the highest first key at or below it (keys below every group go to the first):
            # the keys are sorted, so each group's run of them starts where bisection finds its first key (a
            # search of every key among the first keys as Python strings was a fifth of the inserts' routing)
            cuts = [0, *(bisect.bisect_left(keys, g.first_key, key=_as_py) for g in ranged[1:]), len(keys)]
            taken = np.zeros(len(keys), bool)
            for group, start, end in zip(ranged, cuts[:-1], cuts[1:]):
                mine = np.arange(start, min(end, start + self.plan.share(group.capacity, self.shard)))
                if len(mine):
                    taken[mine] = True
                    yield group.file_id, mine
            left = np.nonzero(~taken)[0]
        start = 0
        for file_id, take in self._pack([g for g in small if g.first_key is None], partition, len(left)):
            yield file_id, left[start : start + take]
            start += take

    def _pack(self, small: list[SmallFileGroup], partition: str, count: int) -> Iterable[tuple[str, int]]:
        """(file id, how many) for ``count`` inserts: this shard's share of ``small`` groups first, then
        of new groups."""
        for group in small:
            take = min(count, self.plan.share(group.capacity, self.shard))
            if take:
                yield group.file_id, take
            count -= take
            if count == 0:
                return
        n = 0
        while count > 0:
            take = min(count, max(1, self.plan.share(self.plan.new_group_records, self.shard)))
            yield new_file_id(self.plan, partition, n), take
            count -= take
            n += 1
