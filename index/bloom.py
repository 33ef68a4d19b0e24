"""Hudi-compatible bloom filters for parquet footers.

Two kinds, as Hudi writes them under ``org.apache.hudi.bloomfilter``:

* ``SIMPLE``: one Hadoop ``BloomFilter``.
* ``DYNAMIC_V0``: Hudi's bounded dynamic filter, a matrix of rows of ``nr``
  keys each that grows until ``max_entries`` and then reuses its rows in turn.

The serialised form is Hadoop's ``Writable`` layout, base64 encoded, so that a
filter built here from a file's keys is byte-identical to the one Hudi wrote.
"""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.hashing import contained, empty_row, set_bits

FOOTER_BLOOM = "org.apache.hudi.bloomfilter"
FOOTER_BLOOM_LEGACY = "com.uber.hoodie.bloomfilter"
FOOTER_BLOOM_TYPE = "hoodie_bloom_filter_type_code"
FOOTER_MIN_KEY = "hoodie_min_record_key"
FOOTER_MAX_KEY = "hoodie_max_record_key"

DEFAULT_NUM_ENTRIES = 60_000
LEAST_NUM_ENTRIES = 1_000
DEFAULT_FPP = 1e-9
DEFAULT_MAX_ENTRIES = 100_000
MURMUR_HASH = 1
_VERSION = -1
_HEADER = struct.Struct(">iibi")
_DYNAMIC = struct.Struct(">iii")

KINDS = ("SIMPLE", "DYNAMIC_V0")


def bloom_size(num_entries: int, fpp: float) -> tuple[int, int]:
    """Hudi's ``BloomFilterUtils``: (bits, number of hashes)."""
    bits = math.ceil(num_entries * -math.log(fpp) / (math.log(2) ** 2))
    return bits, math.ceil(math.log(2) * bits / num_entries)


@dataclass
class BloomFilter:
    kind: str
    num_hashes: int
    vector_size: int
    rows: list[np.ndarray] = field(default_factory=list)  # each its bits as Hadoop serializes them (``empty_row``)
    row_capacity: int = DEFAULT_NUM_ENTRIES
    max_entries: int = DEFAULT_MAX_ENTRIES
    count: int = 0

    @classmethod
    def empty(
        cls,
        kind: str = "DYNAMIC_V0",
        num_entries: int = DEFAULT_NUM_ENTRIES,
        fpp: float = DEFAULT_FPP,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> BloomFilter:
        if kind not in KINDS:
            raise ValueError(f"bloom filter kind must be one of {KINDS}, got {kind!r}")
        bits, hashes = bloom_size(num_entries, fpp)
        return cls(kind, hashes, bits, [empty_row(bits)], num_entries, max_entries)

    @classmethod
    def for_keys(cls, keys, kind: str = "DYNAMIC_V0", **sizes) -> BloomFilter:
        bloom = cls.empty(kind, **sizes)
        bloom.add_many(keys)
        return bloom

    @property
    def _max_rows(self) -> int:
        return max(1, math.ceil(self.max_entries / self.row_capacity))

    def _row_slices(self, first: int, n: int) -> list[tuple[int, slice]]:
        """The row of each of ``n`` keys added from the ``first``-th on, following Hudi's dynamic
        filter, as (row, slice of those keys) pairs.

        Rows fill ``row_capacity`` keys each until ``max_rows`` exist. The key
        that finds them all full goes to row 0, and the keys after it cycle
        through the rows from row 0: every ``max_rows``-th key to the same row.
        """
        rows, capacity = self._max_rows, self.row_capacity
        full = rows * capacity
        end = first + n
        slices = []
        for row in range(rows):
            lo, hi = max(first, row * capacity), min(end, (row + 1) * capacity)
            if lo < hi:
                slices.append((row, slice(lo - first, hi - first)))
        if first <= full < end:
            slices.append((0, slice(full - first, full - first + 1)))
        cycle_start = max(first, full + 1)
        for offset in range(rows):
            # the key ``full + 1 + offset`` goes to row ``offset % rows``, and every ``rows``-th after it too
            start = full + 1 + offset
            if start < cycle_start:
                start += -(-(cycle_start - start) // rows) * rows
            if start < end:
                slices.append((offset % rows, slice(start - first, end - first, rows)))
        return slices

    def add_many(self, keys) -> None:
        n = len(keys)
        slices = [(0, slice(0, n))] if self.kind == "SIMPLE" else self._row_slices(self.count, n)
        row_of = np.empty(n, np.int32)  # the row each key goes into
        for row, keys_in_row in slices:
            row_of[keys_in_row] = row
        if n:
            rows = [self._row(row) for row in range(int(row_of.max()) + 1)]
            set_bits(keys, self.num_hashes, self.vector_size, rows, row_of)
        self.count += n

    def _row(self, row: int) -> np.ndarray:
        """Row ``row`` of the filter's bits, the rows before it made if missing."""
        while len(self.rows) <= row:
            self.rows.append(empty_row(self.vector_size))
        return self.rows[row]

    def add(self, key: str) -> None:
        self.add_many([key])

    def might_contain_many(self, keys) -> np.ndarray:
        return contained(keys, self.num_hashes, self.vector_size, self.rows)

    def might_contain(self, key: str) -> bool:
        return bool(self.might_contain_many([key])[0])

    def _current_row_count(self) -> int:
        """Hudi's ``currentNbRecord``: keys in the active row (it keeps counting once rows cycle)."""
        full = self._max_rows * self.row_capacity
        if self.count > full:
            return self.row_capacity + self.count - full
        return self.count - (max(1, math.ceil(self.count / self.row_capacity)) - 1) * self.row_capacity

    def _simple_bytes(self, bits: np.ndarray) -> bytes:
        header = _HEADER.pack(_VERSION, self.num_hashes, MURMUR_HASH, self.vector_size)
        return header + bits.tobytes()

    def to_bytes(self) -> bytes:
        if self.kind == "SIMPLE":
            return self._simple_bytes(self.rows[0])
        header = _HEADER.pack(_VERSION, self.num_hashes, MURMUR_HASH, self.vector_size)
        dynamic = _DYNAMIC.pack(self.row_capacity, self._current_row_count(), len(self.rows))
        return header + dynamic + b"".join(self._simple_bytes(row) for row in self.rows)

    def serialize(self) -> str:
        """The footer value Hudi writes: base64 of the Hadoop ``Writable`` bytes."""
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def deserialize(cls, value: str | bytes, kind: str = "DYNAMIC_V0") -> BloomFilter:
        raw = base64.b64decode(value)
        version, hashes, hash_type, size = _HEADER.unpack_from(raw, 0)
        if version != _VERSION or hash_type != MURMUR_HASH:
            raise ValueError(f"unsupported bloom filter (version {version}, hash type {hash_type})")
        nbytes = (size + 7) // 8
        offset = _HEADER.size

        def read_row(at: int) -> np.ndarray:
            return np.frombuffer(raw, np.uint8, nbytes, at).copy()  # a row a later merge adds keys to

        if kind == "SIMPLE":
            return cls("SIMPLE", hashes, size, [read_row(offset)], count=0)
        if kind != "DYNAMIC_V0":
            raise ValueError(f"bloom filter kind must be one of {KINDS}, got {kind!r}")
        capacity, current, num_rows = _DYNAMIC.unpack_from(raw, offset)
        offset += _DYNAMIC.size
        rows = []
        for _ in range(num_rows):
            offset += _HEADER.size
            rows.append(read_row(offset))
            offset += nbytes
        count = (num_rows - 1) * capacity + current
        return cls("DYNAMIC_V0", hashes, size, rows, capacity, count=count)

    @classmethod
    def from_footer(cls, metadata: dict[bytes, bytes] | None) -> BloomFilter | None:
        """The filter of a Hudi base file, from its parquet key-value metadata."""
        if not metadata:
            return None
        value = metadata.get(FOOTER_BLOOM.encode()) or metadata.get(FOOTER_BLOOM_LEGACY.encode())
        if value is None:
            return None
        kind = metadata.get(FOOTER_BLOOM_TYPE.encode(), b"SIMPLE").decode()
        return cls.deserialize(value, kind)


@dataclass(frozen=True)
class BloomSpec:
    """How a new base file's bloom filter is made: Hudi's ``hoodie.bloom.index.filter.type`` and
    ``hoodie.index.bloom.num_entries`` (the keys one row of the filter holds at its false-positive rate)."""

    kind: str = "DYNAMIC_V0"
    num_entries: int = DEFAULT_NUM_ENTRIES

    @classmethod
    def sized(cls, kind: str, num_entries: int | None, target_file_size: int, record_size: int) -> BloomSpec:
        """``num_entries`` unset: for a dynamic filter, the keys a file of ``target_file_size`` holds at
        ``record_size`` bytes a record, at most Hudi's default; a simple one, which cannot grow past a wrong
        estimate (a new table's record size is a guess), keeps Hudi's default.

        A footer's filter takes about 7 bytes (base64 of 43 bits at the default rate) for each key it is
        sized for, whatever it holds: Hudi's fixed 60,000 put 430 KB into every file, a fifth of a 2 MB
        one, rewritten with it by every copy-on-write merge. Sized to the file, a full file's filter holds
        its keys at the configured rate, and a dynamic one grows a row at a time past them."""
        if num_entries is None and kind == "SIMPLE":
            num_entries = DEFAULT_NUM_ENTRIES
        elif num_entries is None:
            num_entries = min(DEFAULT_NUM_ENTRIES, max(LEAST_NUM_ENTRIES, target_file_size // max(1, record_size)))
        return cls(kind, num_entries)

    def at_most(self, keys: int) -> BloomSpec:
        """For a new file that will hold ``keys`` keys: a dynamic filter need not be sized past them (a file
        a later merge grows gets more rows), so a small file group carries a small filter."""
        if self.kind == "SIMPLE":
            return self
        return BloomSpec(self.kind, min(self.num_entries, max(LEAST_NUM_ENTRIES, keys)))

    def empty(self) -> BloomFilter:
        return BloomFilter.empty(self.kind, self.num_entries)


@dataclass(frozen=True)
class KeyRange:
    """The ``hoodie_min_record_key`` / ``hoodie_max_record_key`` pair of a base file."""

    min_key: str
    max_key: str

    @classmethod
    def from_footer(cls, metadata: dict[bytes, bytes] | None) -> KeyRange | None:
        if not metadata or FOOTER_MIN_KEY.encode() not in metadata:
            return None
        return cls(metadata[FOOTER_MIN_KEY.encode()].decode(), metadata[FOOTER_MAX_KEY.encode()].decode())

    def contains(self, key: str) -> bool:
        return self.min_key <= key <= self.max_key

    def contains_many(self, keys) -> np.ndarray:
        keys = pa.array(keys, type=pa.string()) if not isinstance(keys, (pa.Array, pa.ChunkedArray)) else keys
        inside = pc.and_(pc.greater_equal(keys, self.min_key), pc.less_equal(keys, self.max_key))
        return inside.to_numpy(zero_copy_only=False).astype(bool)
