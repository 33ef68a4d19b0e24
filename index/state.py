"""The state index: record key -> file group, kept with the table.

Keys are hashed (FNV-1a 64 of ``partition \\0 key``; of the key alone for a
global index, where a key is unique across partitions) and sharded by hash. Each
shard is a sorted run (``base``), at most one sorted run of the entries added
since (``level``), and one small delta run per instant after those. A delta is
written before its instant commits and is read only once that instant is
completed, so the index is exactly as current as the timeline and survives a
lost Spark checkpoint. Rollback deletes the instant's deltas. Compaction folds
committed deltas into a new level while the entries newer than the base stay
under an eighth of it, and into a new base after that: a fold rewrites about as
many entries as it adds, rather than the whole shard every few micro-batches
(25M entries, 3.4 s a shard at 100M keys in 4 shards).

Layout under ``.hoodie/.laketide/index/``::

    meta.json                                 shard count and hash
    shard-00003/base_<instant>.arrow          sorted (key_hash, group) run
    shard-00003/level_<instant>.arrow         sorted run of the entries after the base, up to <instant>
    shard-00003/delta_<instant>_<part>.arrow  entries added by one instant
    coverage_<instant>.json                   file groups whose keys became fully indexed by an
                                              instant, and groups other writers changed (uncovered)

A hash collision can only send a new key to the file group of the key it
collides with, where the bucket writer inserts it; no key is ever in two groups.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from laketide.index.shard_cache import SHARDS, WRITTEN_RUN_ENTRIES, WRITTEN_RUNS
from laketide.index.shard_run import RECENT_SHARE, STORED_SCHEMA, FileGroupId, ShardRun
from laketide.table.storage.io import FileIO

log = logging.getLogger(__name__)
INDEX_DIR = ".hoodie/.laketide/index"
HASH_NAME = "fnv1a64(partition\\0key)"
GLOBAL_HASH_NAME = "fnv1a64(key)"
_RUN = re.compile(r"^(base|level|delta)_(\d{17})(?:_(\d+))?\.arrow$")
_COVERAGE = re.compile(r"^coverage_(\d{17})\.json$")
# a shard's deltas this large (about a million entries) are folded into its base once they are also an eighth of it
FOLD_DELTA_BYTES = 16 * 2**20
RUN_SCHEMA = pa.schema([("key_hash", pa.uint64()), ("partition", pa.string()), ("file_id", pa.string())])


def index_entries(key_hashes: np.ndarray, partitions, file_ids) -> pa.Table:
    """A run of index entries: one (key hash, partition, file id) per key; partitions and file ids as strings, or as
    Arrow arrays (dictionary-encoded, as a run stores them, or not)."""
    text = [
        v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v, pa.string()) for v in (partitions, file_ids)
    ]
    return pa.Table.from_arrays([pa.array(key_hashes, pa.uint64()), *text], names=RUN_SCHEMA.names)


def shard_of(key_hashes: np.ndarray, shards: int) -> np.ndarray:
    return (key_hashes % np.uint64(shards)).astype(np.int32)


def _apply_coverage(covered: set[FileGroupId], entry: dict | list) -> set[FileGroupId]:
    """Coverage after one instant's file (a bare list is the older form: groups covered)."""
    if isinstance(entry, list):
        return covered | {tuple(g) for g in entry}
    if entry.get("uncover_all"):
        covered = set()
    covered = covered - {tuple(g) for g in entry.get("uncovered", [])}
    return covered | {tuple(g) for g in entry.get("covered", [])}


@dataclass(frozen=True)
class IndexSnapshot:
    """Which run files make up each shard as of one timeline: computed on the driver, read on executors."""

    shards: int
    runs: dict[int, tuple[str, ...]]
    covered: frozenset[FileGroupId]
    as_of: str | None
    coverage_files: tuple[str, ...] = ()
    global_keys: bool = False
    run_bytes: dict[str, int] = field(default_factory=dict)  # each run file's size, as listed

    def delta_heavy(self, shard: int) -> bool:
        """Whether a shard's runs after its base (level and deltas) hold at least ``FOLD_DELTA_BYTES`` and an
        eighth of its base (``RECENT_SHARE``): then the next fold writes a new base. A bulk load's micro-batches
        leave deltas of millions of entries, which every process that loads the shard would otherwise sort
        into one run (12 s for the first micro-batch after a 100M-key load in three), however few runs they are."""
        runs = self.runs.get(shard, ())
        if not has_base(runs):
            return False
        deltas = sum(self.run_bytes.get(path, 0) for path in runs[1:])
        return deltas >= max(FOLD_DELTA_BYTES, self.run_bytes.get(runs[0], 0) // RECENT_SHARE)


@dataclass(frozen=True)
class Fold:
    """A shard's new base or level, written, and the runs it replaces, not yet deleted."""

    shard: int
    path: str
    replaced: tuple[str, ...]
    merged: ShardRun  # the whole shard's entries
    runs: tuple[
        str, ...
    ]  # the shard's runs once the replaced ones are gone: the new base, or the base and the new level


def _hash_name(global_keys: bool) -> str:
    return GLOBAL_HASH_NAME if global_keys else HASH_NAME


def has_base(runs: tuple[str, ...]) -> bool:
    """Whether a shard's runs (``IndexSnapshot.runs``) start with a folded base."""
    return bool(runs) and posixpath.basename(runs[0]).startswith("base_")


class StateIndex:
    def __init__(self, io: FileIO, shards: int, global_keys: bool = False):
        self.io = io
        self.shards = shards
        self.global_keys = global_keys
        # each coverage file read once, not at every snapshot, by (path, (size, mtime)): folding rewrites the
        # newest one under its name. Threads that share the index (the micro-batch, the services, the API)
        # may race on it; the loser reads a file again.
        self._coverage: dict[tuple[str, tuple[int, int]], dict | list] = {}

    @classmethod
    def open(cls, io: FileIO, shards: int, global_keys: bool = False) -> StateIndex:
        """Open (or create) the index; the shard count of an existing index wins over a different request.

        Whether keys are unique per partition or across partitions is fixed
        when the index is created: the hashes depend on it.
        """
        meta_path = posixpath.join(INDEX_DIR, "meta.json")
        wanted = _hash_name(global_keys)
        if io.is_file(meta_path):
            meta = json.loads(io.read_text(meta_path))
            if meta.get("hash") != wanted:
                raise ValueError(
                    f"the state index at {io.full_path(INDEX_DIR)} hashes {meta.get('hash')!r}, but index.global = "
                    f"{str(global_keys).lower()} needs {wanted!r}. Set index.global back to "
                    f"{str(not global_keys).lower()}, or, "
                    "with no job running, delete that directory: the next job rebuilds it from the table's files"
                )
            if int(meta["shards"]) != shards:
                log.warning(
                    "state index at %s has %s shards; keeping them (write.index_shards = %s is ignored)",
                    io.full_path(INDEX_DIR),
                    meta["shards"],
                    shards,
                )
            return cls(io, int(meta["shards"]), global_keys)
        io.write_atomic(meta_path, json.dumps({"shards": shards, "hash": wanted}).encode(), overwrite=True)
        return cls(io, shards, global_keys)

    @staticmethod
    def shard_dir(shard: int) -> str:
        return posixpath.join(INDEX_DIR, f"shard-{shard:05d}")

    def _listing(
        self,
    ) -> tuple[dict[int, list[tuple[str, str, str]]], list[tuple[str, str, tuple[int, int]]], dict[str, int]]:
        """Every run file by shard (kind, instant, path), every coverage file (instant, path, (size, modified)),
        and the run files' sizes."""
        runs: dict[int, list[tuple[str, str, str]]] = {}
        coverage: list[tuple[str, str, tuple[int, int]]] = []
        sizes: dict[str, int] = {}
        for entry in self.io.list_dir(INDEX_DIR):
            if entry.is_dir and entry.name.startswith("shard-"):
                shard = int(entry.name.split("-")[1])
                for f in self.io.list_dir(entry.path):
                    m = _RUN.match(f.name)
                    if m:
                        runs.setdefault(shard, []).append((m[1], m[2], f.path))
                        sizes[f.path] = f.size
            elif (m := _COVERAGE.match(entry.name)) is not None:
                coverage.append((m[1], entry.path, (entry.size, entry.mtime_ns)))
        return runs, coverage, sizes

    def snapshot(self, committed: set[str], earliest: str | None = None) -> IndexSnapshot:
        """The runs to read per shard: the newest committed base and the committed deltas after it.

        ``committed`` holds the completed instant times; files of other instants
        are in flight or failed and are skipped, like the data files they index.
        """

        def valid(ts: str) -> bool:
            return ts in committed or (earliest is not None and ts < earliest)

        listing, coverage, sizes = self._listing()
        runs = {}
        for shard, files in listing.items():
            # A base or level is folded only from committed runs, so it is valid whatever happens to its instant later.
            bases = sorted((ts, p) for kind, ts, p in files if kind == "base")
            base_ts = bases[-1][0] if bases else ""
            levels = sorted((ts, p) for kind, ts, p in files if kind == "level" and ts > base_ts)
            folded_ts = levels[-1][0] if levels else base_ts
            deltas = sorted((ts, p) for kind, ts, p in files if kind == "delta" and valid(ts) and ts > folded_ts)
            runs[shard] = tuple(
                ([bases[-1][1]] if bases else []) + ([levels[-1][1]] if levels else []) + [p for _, p in deltas]
            )
        covered: set[FileGroupId] = set()
        coverage_files = []
        known, self._coverage = self._coverage, {}
        for ts, path, version in sorted(coverage):
            if valid(ts):
                entry = known[(path, version)] if (path, version) in known else json.loads(self.io.read_text(path))
                self._coverage[(path, version)] = entry
                covered = _apply_coverage(covered, entry)
                coverage_files.append(path)
        as_of = max(committed) if committed else None
        run_bytes = {path: sizes[path] for paths in runs.values() for path in paths}
        return IndexSnapshot(
            self.shards, runs, frozenset(covered), as_of, tuple(coverage_files), self.global_keys, run_bytes
        )

    def load_shard(self, snapshot: IndexSnapshot, shard: int) -> ShardRun:
        """The merged runs of one shard, cached in this process (``shard_cache.SHARDS``): run files never change once
        written.

        When the cached runs are the start of the snapshot's (the common case:
        the same base, and the deltas of the instants committed since), only
        the new deltas are read and folded in.
        """
        paths = snapshot.runs.get(shard, ())
        key = (self.io.base_path, shard)
        cached_paths, cached = SHARDS.get(key) or ((), None)
        if cached is not None and cached_paths == paths:
            return cached
        if cached is not None and cached_paths and paths[: len(cached_paths)] == cached_paths:
            run = cached.extended(self._read_run(p) for p in paths[len(cached_paths) :])
        elif has_base(paths):
            # the base as it lies (mapped, on a local disk), the deltas since as layers over it: sorting
            # them all into one run took a job's first micro-batch a second a shard at 5M keys
            run = self._read_run(paths[0]).extended(self._read_run(p) for p in paths[1:])
        else:
            run = ShardRun.merge(self._read_run(p) for p in paths)
        SHARDS.put(key, paths, run)
        return run

    def _read_run(self, path: str) -> ShardRun:
        written = WRITTEN_RUNS.pop((self.io.base_path, path))
        if written is not None:
            return ShardRun.from_table(written)
        if self.io.is_local:
            with pa.memory_map(self.io.full_path(path)) as source:
                return ShardRun.from_table(ipc.open_file(source).read_all())
        with self.io.open_input(path) as f:
            return ShardRun.from_table(ipc.open_file(f).read_all())

    def _write_run(self, path: str, table: pa.Table) -> pa.Table:
        """Write ``table`` as the run at ``path``; returns it as stored."""
        schema = STORED_SCHEMA.with_metadata(table.schema.metadata)  # a sorted run says so (``ShardRun.from_table``)
        stored = table.cast(schema)
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, schema) as writer:
            writer.write_table(stored)
        self.io.write_atomic(path, sink.getvalue().to_pybytes(), overwrite=True)
        return stored

    def write_delta(self, shard: int, instant: str, entries: pa.Table, part: int = 0) -> str | None:
        """Entries (key_hash, partition, file_id) one instant adds to one shard."""
        if entries.num_rows == 0:
            return None
        path = posixpath.join(self.shard_dir(shard), f"delta_{instant}_{part}.arrow")
        stored = self._write_run(path, entries)
        if stored.num_rows <= WRITTEN_RUN_ENTRIES:
            WRITTEN_RUNS.put((self.io.base_path, path), stored)
        return path

    def write_coverage(
        self,
        instant: str,
        groups: Iterable[FileGroupId],
        uncovered: Iterable[FileGroupId] = (),
        uncover_all: bool = False,
    ) -> None:
        """What one instant changes in coverage: first ``uncovered`` (or every group) is dropped, then ``groups``
        added."""
        groups, uncovered = sorted(set(groups)), sorted(set(uncovered))
        if groups or uncovered or uncover_all:
            body = {
                "uncover_all": uncover_all,
                "uncovered": [list(g) for g in uncovered],
                "covered": [list(g) for g in groups],
            }
            self.io.write_atomic(
                posixpath.join(INDEX_DIR, f"coverage_{instant}.json"), json.dumps(body).encode(), overwrite=True
            )

    def instant_files(self, instant: str) -> list[str]:
        """The deltas and coverage an instant wrote: what its rollback deletes.

        Bases are kept: one named after a rolled-back instant may still hold
        that instant's entries, which can only send a key back to the one file
        group it was routed to before, where the bucket writer inserts it.
        """
        listing, coverage, _ = self._listing()
        files = [p for runs in listing.values() for kind, ts, p in runs if kind == "delta" and ts == instant]
        return sorted(files + [p for ts, p, _ in coverage if ts == instant])

    def instants(self) -> set[str]:
        """Instant times of every delta run and coverage file: archival checks none of a failed write is left."""
        listing, coverage, _ = self._listing()
        return {ts for runs in listing.values() for kind, ts, _ in runs if kind == "delta"} | {
            ts for ts, _, _ in coverage
        }

    def obsolete_runs(self) -> list[str]:
        """Runs a newer base or level already folded in: what a compaction interrupted before its deletes left
        behind."""
        listing, _, _ = self._listing()
        found = []
        for files in listing.values():
            bases = [ts for kind, ts, _ in files if kind == "base"]
            if not bases:
                continue
            base_ts = max(bases)
            level_ts = max((ts for kind, ts, _ in files if kind == "level" and ts > base_ts), default=None)
            folded_ts = level_ts or base_ts
            for kind, ts, path in files:
                if (
                    (kind == "base" and ts < base_ts)
                    or (kind == "level" and ts != level_ts)
                    or (kind == "delta" and ts <= folded_ts)
                ):
                    found.append(path)
        return sorted(found)

    def compact_coverage(self, snapshot: IndexSnapshot) -> str | None:
        """Fold the committed coverage files into one named after the newest committed instant.

        Each instant writes one, so without folding a snapshot would read one
        file per commit ever made. A crash before the deletes leaves copies
        whose union is the same.
        """
        if len(snapshot.coverage_files) <= 1 or snapshot.as_of is None:
            return None
        path = posixpath.join(INDEX_DIR, f"coverage_{snapshot.as_of}.json")
        self.io.write_atomic(
            path, json.dumps({"covered": sorted(list(g) for g in snapshot.covered)}).encode(), overwrite=True
        )
        for old in snapshot.coverage_files:
            if old != path:
                self.io.delete(old)
        return path

    def fold(self, snapshot: IndexSnapshot, shard: int) -> Fold | None:
        """Write a base of a shard's committed runs, named after the newest committed instant; the runs stay.

        A snapshot that lists the base takes it, and only the deltas committed after it, so a writer
        may go on meanwhile; the folded runs are deleted by ``retire``, once nothing reads them.
        """
        files = snapshot.runs.get(shard, ())
        if len(files) <= 1 or snapshot.as_of is None:
            return None
        merged = self.load_shard(snapshot, shard)
        path = posixpath.join(self.shard_dir(shard), f"base_{snapshot.as_of}.arrow")
        self._write_run(path, merged.to_table())
        return Fold(shard, path, tuple(f for f in files if f != path), merged, (path,))

    def fold_level(self, snapshot: IndexSnapshot, shard: int) -> Fold | None:
        """Write a level of the runs after a shard's base (its level and deltas), named after the newest
        committed instant; the base and those runs stay until ``retire``, as for ``fold``."""
        files = snapshot.runs.get(shard, ())
        if not has_base(files) or len(files) <= 2 or snapshot.as_of is None:
            return None
        merged = self.load_shard(snapshot, shard)
        path = posixpath.join(self.shard_dir(shard), f"level_{snapshot.as_of}.arrow")
        self._write_run(path, ShardRun.merge(self._read_run(p) for p in files[1:]).to_table())
        return Fold(shard, path, tuple(f for f in files[1:] if f != path), merged, (files[0], path))

    def retire(self, fold: Fold) -> None:
        """Delete the runs a fold replaced; a crash before leaves them to the cleaner (``obsolete_runs``)."""
        for old in fold.replaced:
            self.io.delete(old)
        # the new runs hold exactly the merged run: the next load extends it with newer deltas. On a local disk
        # a new base is mapped, its pages the kernel's to keep or drop, and the merged copy is let go
        run = self._read_run(fold.path) if self.io.is_local and fold.runs == (fold.path,) else fold.merged
        SHARDS.put((self.io.base_path, fold.shard), fold.runs, run)
