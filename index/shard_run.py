"""One shard of the state index in memory: sorted key hashes and the file group of each.

A run is read from the shard's run files (``index.state``) and extended by each micro-batch's entries;
it answers the bucket assigner's lookups. See ``index.state`` for the files and their life.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FileGroupId = tuple[str, str]
# as run files hold it: partitions and file ids dictionary-encoded, about 16 bytes a key rather than 56
# (runs written before hold plain strings, and read the same)
_DICTIONARY = pa.dictionary(pa.int32(), pa.string())
STORED_SCHEMA = pa.schema([("key_hash", pa.uint64()), ("partition", _DICTIONARY), ("file_id", _DICTIONARY)])
# in the schema of a run file whose entries are sorted by hash and unique (``ShardRun.to_table``'s), with
# the partition of each file id of its dictionary, so reading it back touches none of its entries
SORTED_KEY, SORTED_BY_HASH, GROUP_PARTITIONS_KEY = b"laketide.sorted.by", b"key_hash", b"laketide.group.partitions"

# newer entries stay in a layer of their own over the run below until they are this share of it, and each
# layer may have a newer one over it: a micro-batch folds its entries into the smallest layer, and a large
# one is rewritten once in a while (amortised, a few copies of the batch's entries per layer) rather than
# at every micro-batch, so at 100M keys a batch copies neither the 1.2 GB of the index nor an eighth of it
RECENT_SHARE = 8
# a run of at least this many entries is searched through a directory of where each value of its hashes'
# top bits starts, with about ``DIRECTORY_BUCKET`` entries a bucket: a lookup then searches a few entries in
# cache instead of binary-searching the whole run, a cache miss a level. At 25M entries a shard, 25k keys:
# 2.3 ms with buckets of 12 (2^21 of them, 8 MB), 4.5 ms with buckets of 380 (2^16), 13 ms without. A
# smaller run is in cache anyway, and numpy's search of sorted keys is faster there: for 25k keys, 0.8 ms
# against 1.7 at 300k entries, 1.9 against 2.2 at 3M, 3.9 against 2.8 at 10M.
DIRECTORY_FROM = 1 << 22
DIRECTORY_BUCKET = 16
# counted a slice of the hashes at a time, so a 25M-entry base needs 32 MB beside it, not 400
_DIRECTORY_CHUNK = 1 << 22


@dataclass
class ShardRun:
    """One shard's entries in memory: sorted hashes and a file-group code for each, 12 bytes a key.

    ``recent`` holds entries newer than these, sorted the same way, with codes into the same ``groups``
    (and may have a ``recent`` of its own); where both know a hash, ``recent`` wins.
    """

    hashes: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    codes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    groups: list[FileGroupId] = field(default_factory=list)
    recent: ShardRun | None = None
    # built at the first lookup of a large run (its arrays never change); threads that race build the same one
    _directory: np.ndarray | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_table(cls, table: pa.Table) -> ShardRun:
        """The run a run file holds. A file written sorted (``SORTED_KEY``: a compacted base) is taken as it is:
        its arrays stay views of the table's buffers, so a base read through a memory map lives in the page
        cache, where the kernel may drop and read back its pages, rather than in the process's own memory."""
        if table.num_rows == 0:
            return cls()
        hashes, file_ids, meta = (
            _one_array(table["key_hash"]).to_numpy(),
            _one_array(table["file_id"]),
            table.schema.metadata or {},
        )
        if meta.get(SORTED_KEY) == SORTED_BY_HASH and GROUP_PARTITIONS_KEY in meta:
            groups = list(zip(json.loads(meta[GROUP_PARTITIONS_KEY]), file_ids.dictionary.to_pylist()))
            return cls(hashes, file_ids.indices.to_numpy().astype(np.int32, copy=False), groups)
        codes, groups = _group_codes(_one_array(table["partition"]), file_ids)
        return cls(*_by_hash(hashes, codes), groups)

    @classmethod
    def merge(cls, runs: Iterable[ShardRun]) -> ShardRun:
        """Later runs win for a hash present in several (keys never move, so they agree)."""
        runs = [r.flattened() for r in runs if len(r)]
        if not runs:
            return cls()
        if len(runs) == 1 and not (runs[0].hashes[1:] == runs[0].hashes[:-1]).any():
            return runs[0]  # sorted and unique already: one micro-batch's run, the common case
        groups: dict[FileGroupId, int] = {}
        all_hashes, all_codes = [], []
        for run in runs:
            remap = np.array([groups.setdefault(g, len(groups)) for g in run.groups], np.int32)
            all_hashes.append(run.hashes)
            all_codes.append(remap[run.codes])
        hashes = np.concatenate(all_hashes)
        codes = np.concatenate(all_codes)
        # keep the last occurrence of each hash: reverse, unique-first, reverse back
        rev_hashes = hashes[::-1]
        uniq, first = np.unique(rev_hashes, return_index=True)
        return cls(uniq, codes[::-1][first], list(groups))

    def __len__(self) -> int:
        """Entries held, counting a hash in both layers twice."""
        return len(self.hashes) + (len(self.recent) if self.recent is not None else 0)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays this run and its layers hold, their directories included."""
        own = self.hashes.nbytes + self.codes.nbytes + (self._directory.nbytes if self._directory is not None else 0)
        return own + (self.recent.nbytes if self.recent is not None else 0)

    def extended(self, runs: Iterable[ShardRun]) -> ShardRun:
        """This run with newer runs folded in, as layers of growing size (``_absorb``), so the work is
        about the new entries', however large the shard."""
        new = ShardRun.merge(runs)
        if len(new.hashes) == 0:
            return self
        codes_of = {g: i for i, g in enumerate(self.groups)}
        remap = np.array([codes_of.setdefault(g, len(codes_of)) for g in new.groups], np.int32)
        groups = list(codes_of)
        return self._absorb(ShardRun(new.hashes, remap[new.codes], groups), groups)

    def _absorb(self, new: ShardRun, groups: list[FileGroupId]) -> ShardRun:
        """This run with ``new`` (newer entries, codes into ``groups``) as its newest layer: the smallest
        layer takes them, and a layer joins the one above it once it holds ``1 / RECENT_SHARE`` of it.
        Layers grow geometrically, so a micro-batch copies a layer about its own size rather than one an
        eighth of the shard (at 100M keys, 3M entries a shard copied every batch)."""
        recent = new if self.recent is None else self.recent._absorb(new, groups)
        if len(recent) * RECENT_SHARE < len(self.hashes):
            return ShardRun(self.hashes, self.codes, groups, recent, self._directory)
        return self._with(recent.flattened(), groups)

    def _with(self, newer: ShardRun, groups: list[FileGroupId]) -> ShardRun:
        """One sorted run of this run's entries and ``newer``'s (codes into the same groups), ``newer``
        winning: its entries are inserted in place, without sorting again."""
        pos = np.searchsorted(self.hashes, newer.hashes)
        known = np.zeros(len(pos), dtype=bool)
        inside = pos < len(self.hashes)
        known[inside] = self.hashes[pos[inside]] == newer.hashes[inside]
        codes = self.codes.copy()
        codes[pos[known]] = newer.codes[known]
        added = ~known
        return ShardRun(
            np.insert(self.hashes, pos[added], newer.hashes[added]),
            np.insert(codes, pos[added], newer.codes[added]),
            groups,
        )

    def flattened(self) -> ShardRun:
        """The same entries as one run, with no ``recent`` layer."""
        return self if self.recent is None else self._with(self.recent.flattened(), self.groups)

    def lookup(self, key_hashes: np.ndarray) -> np.ndarray:
        """File-group code of each hash, -1 where the shard does not know it.

        The hashes are searched in sorted order: each search then starts where the one before ended,
        and walks the run's memory forward, about twice as fast as in the order they come."""
        order = np.argsort(key_hashes)
        codes = np.empty(len(key_hashes), np.int32)
        codes[order] = self._lookup_sorted(key_hashes[order])
        return codes

    def _lookup_sorted(self, key_hashes: np.ndarray) -> np.ndarray:
        codes = self._lookup_own(key_hashes)
        if self.recent is not None:
            newer = self.recent._lookup_sorted(key_hashes)
            codes = np.where(newer >= 0, newer, codes)
        return codes

    def _lookup_own(self, key_hashes: np.ndarray) -> np.ndarray:
        if len(self.hashes) == 0:
            return np.full(len(key_hashes), -1, np.int32)
        pos = (
            np.searchsorted(self.hashes, key_hashes)
            if len(self.hashes) < DIRECTORY_FROM
            else self._positions(key_hashes)
        )
        pos = np.minimum(pos, len(self.hashes) - 1)
        found = self.hashes[pos] == key_hashes
        return np.where(found, self.codes[pos], -1).astype(np.int32)

    def _positions(self, key_hashes: np.ndarray) -> np.ndarray:
        """``np.searchsorted(self.hashes, key_hashes)``, searching each key's directory bucket only."""
        if self._directory is None:
            self._directory = _directory_of(self.hashes)
        shift = np.uint64(64 - _directory_bits(len(self.hashes)))
        bucket = (key_hashes >> shift).astype(np.int64)
        lo, hi = self._directory[bucket].astype(np.int64), self._directory[bucket + 1].astype(np.int64)
        # a binary search in every key's bucket at once: the first position whose hash is not below the key
        while (live := lo < hi).any():
            mid = (lo + hi) // 2
            below = self.hashes[np.minimum(mid, len(self.hashes) - 1)] < key_hashes
            lo = np.where(live & below, mid + 1, lo)
            hi = np.where(live & ~below, mid, hi)
        return lo

    def to_table(self) -> pa.Table:
        """The entries as a run file holds them (``STORED_SCHEMA``): a file id's dictionary entry is its group's
        code."""
        run = self.flattened()
        partitions = pa.array([p for p, _ in run.groups], pa.string()).dictionary_encode()
        partition_of = partitions.indices.to_numpy(zero_copy_only=False).astype(np.int32)
        file_ids = pa.array([f for _, f in run.groups], pa.string())
        return pa.table(
            [
                pa.array(run.hashes, pa.uint64()),
                pa.DictionaryArray.from_arrays(pa.array(partition_of[run.codes], pa.int32()), partitions.dictionary),
                pa.DictionaryArray.from_arrays(pa.array(run.codes, pa.int32()), file_ids),
            ],
            schema=STORED_SCHEMA.with_metadata(
                {SORTED_KEY: SORTED_BY_HASH, GROUP_PARTITIONS_KEY: json.dumps([p for p, _ in run.groups])}
            ),
        )


def _directory_bits(entries: int) -> int:
    """Top bits a run's directory is keyed by: buckets of ``DIRECTORY_BUCKET / 2`` to ``DIRECTORY_BUCKET`` entries."""
    return min(28, max(1, int(np.ceil(np.log2(max(entries, 1) / DIRECTORY_BUCKET)))))


def _directory_of(hashes: np.ndarray) -> np.ndarray:
    """Where each bucket of sorted ``hashes`` starts (and, last, their count): a count of each top-bits value,
    summed. Built once a run (its arrays never change), in about 0.1 s for 25M entries; in 32-bit positions
    (half the memory) where they fit."""
    bits = _directory_bits(len(hashes))
    shift = np.uint64(64 - bits)
    counts = np.zeros(1 << bits, np.int64)
    for start in range(0, len(hashes), _DIRECTORY_CHUNK):
        counts += np.bincount((hashes[start : start + _DIRECTORY_CHUNK] >> shift).astype(np.intp), minlength=1 << bits)
    directory = np.zeros((1 << bits) + 1, np.uint32 if len(hashes) < 2**32 else np.int64)
    directory[1:] = np.cumsum(counts)
    return directory


def _by_hash(hashes: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entries sorted by hash. A run holds each hash once (a micro-batch's delta has one entry a new key), so
    numpy's quicksort serves (a fifth of its stable sort's time on a 12,000-entry delta); only a run that
    holds a hash twice is sorted stably, keeping its entries' order for ``merge``, where the later wins."""
    order = np.argsort(hashes)
    ordered = hashes[order]
    if (ordered[1:] == ordered[:-1]).any():
        order = np.argsort(hashes, kind="stable")
        ordered = hashes[order]
    return ordered, codes[order]


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """A column as one array: its only chunk as it is (``combine_chunks`` copies even that)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _group_codes(partitions: pa.Array, file_ids: pa.Array) -> tuple[np.ndarray, list[FileGroupId]]:
    """A code per entry and the (partition, file id) of each code, from plain or dictionary-encoded columns."""
    if not pa.types.is_dictionary(partitions.type) or not pa.types.is_dictionary(file_ids.type):
        pairs = pc.binary_join_element_wise(
            partitions.cast(pa.string()), file_ids.cast(pa.string()), "\x00"
        ).dictionary_encode()
        return pairs.indices.to_numpy().astype(np.int32), [
            tuple(p.split("\x00", 1)) for p in pairs.dictionary.to_pylist()
        ]
    p_at, f_at = partitions.indices.to_numpy(zero_copy_only=False), file_ids.indices.to_numpy(zero_copy_only=False)
    names, ids = partitions.dictionary.to_pylist(), file_ids.dictionary.to_pylist()
    partition_of = np.full(len(ids), -1, np.int64)
    partition_of[f_at] = p_at
    if np.array_equal(partition_of[f_at], p_at):
        # each file id in one partition, as ``to_table`` writes: the file id's entry is the code
        return f_at.astype(np.int32, copy=False), [
            (names[p] if p >= 0 else "", f) for p, f in zip(partition_of.tolist(), ids)
        ]
    pairs, codes = np.unique(p_at.astype(np.int64) * len(ids) + f_at, return_inverse=True)
    return codes.astype(np.int32), [(names[int(v) // len(ids)], ids[int(v) % len(ids)]) for v in pairs]
