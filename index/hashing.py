"""Key hashing over many keys at once: Hadoop's 32-bit MurmurHash2, and FNV-1a 64.

Hudi's bloom filters hash every key with `org.apache.hadoop.util.hash.MurmurHash`,
chaining the seed through `nbHash` rounds. This module reproduces that hash
bit for bit, including its two quirks: the tail bytes are sign-extended (Java's
`byte` is signed) and folded from the end of the key.

Two paths compute the same bits: C (``_keyhash*.c``, built with the package), which hashes a key's 30 rounds
in registers (with AVX-512, 64 keys side by side in vector registers) and sets its bits without the GIL, and
numpy, for a laketide without the compiled module (one shipped as a .zip in spark-submit's ``--py-files``: a .zip
cannot load it). The C path is about three times the numpy one on a bloom filter, a tenth of a 1M-row load.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import logging
import os
import tempfile
import zipfile
import zipimport
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)

_COMPILED = "laketide.index._keyhash"


def _from_archive() -> ModuleType | None:
    """The compiled module out of the .zip laketide was imported from (spark-submit's ``--py-files``), which
    Python cannot load a shared library from: copied once to the temporary directory, named by its digest so
    that another build never meets it, and loaded from there."""
    loader = globals().get("__loader__")
    if not isinstance(loader, zipimport.zipimporter) or loader.archive is None:
        return None
    with zipfile.ZipFile(loader.archive) as archive:
        names = [n for n in archive.namelist() if n.startswith(f"{loader.prefix}_keyhash.") and n.endswith(".so")]
        if not names:
            return None
        data = archive.read(names[0])
    target = Path(tempfile.gettempdir()) / f"laketide-{hashlib.sha256(data).hexdigest()[:16]}" / Path(names[0]).name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.part")
        partial.write_bytes(data)
        os.replace(partial, target)  # whole or absent, for the other workers of this machine
    spec = importlib.util.spec_from_file_location(_COMPILED, target)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compiled() -> ModuleType | None:
    try:
        from laketide.index import _keyhash

        return _keyhash
    except ImportError:
        pass
    numpy = "bloom filters and index hashes computed with numpy:"
    try:
        module = _from_archive()
    except (ImportError, OSError) as error:  # built for another machine or Python, or no room to copy it
        log.info("%s the compiled module in laketide's archive does not load here (%s)", numpy, error)
        return None
    if module is None:
        log.info("%s the compiled module was not built", numpy)
    return module


compiled = _compiled()

_M = np.uint32(0x5BD1E995)


def key_bytes(keys: Iterable[str] | pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes of ``keys`` as one flat uint8 buffer plus int64 offsets."""
    array = _large_strings(keys)
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets


def _large_strings(keys: Any) -> pa.Array:
    """``keys`` (strings, an Arrow array or a chunked one) as one ``large_string`` array; a null key is refused."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    elif not isinstance(keys, pa.Array):
        keys = pa.array(list(keys), type=pa.large_string())
    if keys.null_count:
        raise ValueError("record keys must not be null")
    return keys.cast(pa.large_string())


class _FixedLengthKeys:
    """Keys of one length, with the parts of MurmurHash2 that do not depend on the seed worked out once.

    The mixed body words and the folded tail are the same in every round of a
    bloom filter's ``nbHash`` chain; only ``h`` changes with the seed.
    """

    def __init__(self, block: np.ndarray):
        n, self.length = block.shape
        words = self.length // 4
        self.body = []  # the mixed body words, each xored into ``h`` after a multiply
        if words:
            body = np.ascontiguousarray(block[:, : words * 4]).view("<u4")
            for i in range(words):
                k = body[:, i] * _M
                k ^= k >> np.uint32(24)
                k *= _M
                self.body.append(k)
        tail = self.length - words * 4
        self.has_tail = tail > 0
        self.lone_tail = None  # a tail with no word before it
        if tail:
            # Hadoop folds the tail from the end of the key: data[len-1] unshifted,
            # data[len-2] << 8, data[len-3] << 16 (not the reference MurmurHash2 order).
            signed = block[:, words * 4 :].view(np.int8).astype(np.int32).view(np.uint32)
            folded = np.zeros(n, dtype=np.uint32)
            for j in range(tail):
                folded ^= signed[:, j] << np.uint32(8 * (tail - 1 - j))
            if self.body:
                # xored right after the last word: the two are xored once, as one (a numpy pass fewer in each of
                # a bloom filter's 30 rounds)
                self.body[-1] ^= folded
            else:
                self.lone_tail = folded

    def hash(self, seeds: np.ndarray) -> np.ndarray:
        """MurmurHash2 of every key, one seed per key."""
        h = seeds.astype(np.uint32, copy=True)
        self.hash_into(h, np.empty_like(h))
        return h

    def hash_into(self, h: np.ndarray, scratch: np.ndarray) -> None:
        """Turn ``h``, one seed per key, into the keys' MurmurHash2, in place (``scratch`` is as large)."""
        h ^= np.uint32(self.length)
        for k in self.body:
            h *= _M
            h ^= k
        if self.lone_tail is not None:
            h ^= self.lone_tail
        if self.has_tail:
            h *= _M
        np.right_shift(h, np.uint32(13), out=scratch)
        h ^= scratch
        h *= _M
        np.right_shift(h, np.uint32(15), out=scratch)
        h ^= scratch


def _by_length(keys):
    """Yield (row indexes, (rows, length) uint8 block) for each distinct key length."""
    data, offsets = key_bytes(keys)
    lengths = np.diff(offsets)
    starts = offsets[:-1]
    # the rows in order of length, each length's a slice: one radix sort of the lengths (numpy's stable sort of
    # 16-bit values), where finding each length's rows and the lengths present took a sixth of a filter's hashing
    small = len(lengths) == 0 or int(lengths.max()) < 2**16
    order = np.argsort(lengths.astype(np.uint16) if small else lengths, kind="stable")
    ordered = lengths[order]
    bounds = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(order)]
    for begin, end in itertools.pairwise(bounds):
        if begin == end:
            continue
        rows, length = order[begin:end], int(ordered[begin])
        at = starts[rows]
        # byte by byte: gathering through one (rows, length) index matrix costs eight times the block
        block = np.empty((len(rows), length), dtype=np.uint8)
        for j in range(length):
            block[:, j] = data[at + j]
        yield rows, block


def murmur2(keys, seeds: int | np.ndarray = 0) -> np.ndarray:
    """Hadoop MurmurHash2 of every key, with one seed for all or one seed per key, as uint32."""
    seeds = np.broadcast_to(np.asarray(seeds, dtype=np.uint32), (len(keys),))
    out = np.empty(len(keys), dtype=np.uint32)
    with np.errstate(over="ignore"):
        for rows, block in _by_length(keys):
            out[rows] = _FixedLengthKeys(block).hash(seeds[rows])
    return out


_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def hash64(keys, seeds: np.ndarray | None = None) -> np.ndarray:
    """FNV-1a 64-bit hash of every key: the state index's key hash. ``seeds`` (uint64, one per key): each key's
    hash goes on from its seed, in place of FNV's offset basis, as if the bytes whose hash the seed is came first.

    MurmurHash2 is kept for the bloom filters, where Hudi's format needs it;
    its 32-bit collisions are too frequent to name a key, and a second seeded
    round collides on the same pairs.
    """
    data, offsets = key_bytes(keys)
    if seeds is not None:
        seeds = np.ascontiguousarray(seeds, dtype=np.uint64)
    if compiled is not None:
        out = np.empty(len(offsets) - 1, dtype=np.uint64)
        compiled.fnv1a64(data, offsets, out, seeds)
        return out
    lengths = np.diff(offsets)
    # longest first, so that the keys still going at each byte position are a prefix
    order = np.argsort(-lengths, kind="stable")
    starts, remaining = offsets[:-1][order], lengths[order]
    still = np.searchsorted(-remaining, -np.arange(1, int(remaining[0]) + 1 if len(remaining) else 1), side="right")
    h = np.full(len(order), _FNV_OFFSET, dtype=np.uint64) if seeds is None else seeds[order]
    with np.errstate(over="ignore"):
        for position, count in enumerate(still.tolist()):
            live = h[:count]
            live ^= data[starts[:count] + position]
            live *= _FNV_PRIME
    out = np.empty(len(order), dtype=np.uint64)
    out[order] = h
    return out


def index_keys(
    partitions: pa.Array | pa.ChunkedArray, keys: pa.Array | pa.ChunkedArray, global_keys: bool = False
) -> np.ndarray:
    """The 64-bit index hash of each (partition path, record key), or of each key alone in a global index: the hash of
    the partition, a NUL and the key, which goes on over the key from the hash of its partition and the NUL, worked
    out once per partition (joining the strings first copied every key)."""
    if global_keys:
        return hash64(keys)
    chunks = partitions.chunks if isinstance(partitions, pa.ChunkedArray) else [partitions]
    seeds = [_partition_seeds(chunk) for chunk in chunks]
    return hash64(keys, np.concatenate(seeds) if seeds else np.zeros(0, np.uint64))


def _partition_seeds(partitions: pa.Array) -> np.ndarray:
    """The FNV-1a 64 hash of each row's partition path followed by a NUL."""
    encoded = partitions if pa.types.is_dictionary(partitions.type) else partitions.dictionary_encode()
    if encoded.null_count:
        raise ValueError("partition paths must not be null")
    by_code = hash64(pc.binary_join_element_wise(encoded.dictionary, "\x00", ""))
    return by_code[encoded.indices.to_numpy()]


# keys hashed at a time: the arrays of one round stay in the CPU's cache
_CHUNK = 65536


def bit_positions(keys, num_hashes: int, vector_size: int) -> np.ndarray:
    """The ``(num_hashes, len(keys))`` bit indexes Hadoop's ``HashFunction`` yields: row ``i`` is round ``i``.

    Round ``i`` hashes the key with the previous round's hash as seed (0 first);
    the bit is ``abs(h % vector_size)`` with Java's signed remainder, which is
    the key's magnitude as a signed int modulo the size.
    """
    out = np.empty((num_hashes, len(keys)), dtype=np.uint32)
    for rows, rounds in bit_positions_by_length(keys, num_hashes, vector_size):
        out[:, rows] = rounds
    return out


def bit_positions_by_length(keys, num_hashes: int, vector_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``bit_positions`` a group of keys at a time: (their rows among ``keys``, their ``(num_hashes, rows)`` bit
    indexes). A bloom filter that sets every key's bits alike needs no more, and not the copy into key order."""
    size = np.uint32(vector_size)
    with np.errstate(over="ignore"):
        for rows, block in _by_length(keys):
            for start in range(0, len(rows), _CHUNK):
                fixed = _FixedLengthKeys(block[start : start + _CHUNK])
                m = min(_CHUNK, len(rows) - start)
                h, scratch = np.zeros(m, np.uint32), np.empty(m, np.uint32)
                rounds = np.empty((num_hashes, m), dtype=np.uint32)
                for i in range(num_hashes):
                    fixed.hash_into(h, scratch)
                    # |h| as a signed int; abs(MIN_VALUE) wraps to itself, which read unsigned is 2^31
                    magnitude = rounds[i]
                    np.abs(h.view(np.int32), out=magnitude.view(np.int32))
                    # the remainder by way of a division by the constant size, which numpy does without dividing
                    np.floor_divide(magnitude, size, out=scratch)
                    scratch *= size
                    magnitude -= scratch
                yield rows[start : start + m], rounds


def empty_row(vector_size: int) -> np.ndarray:
    """A bloom filter row of ``vector_size`` bits, none set: 8 a byte, bit ``i`` at byte ``i // 8``, bit ``i % 8``, as
    Hadoop serializes its bit vector. Packed, a filter sized for Hudi's 60,000 keys is 323 KB, which stays in the
    CPU's cache while keys set their bits: a byte a bit took 2.6 MB, setting the bits then cost more than hashing."""
    return np.zeros((vector_size + 7) // 8, np.uint8)


def set_bits(keys, num_hashes: int, vector_size: int, rows: list[np.ndarray], row_of: np.ndarray) -> None:
    """Set every key's ``bit_positions`` in its row of a bloom filter: key ``i`` in ``rows[row_of[i]]`` (``empty_row``s
    of ``vector_size`` bits; ``row_of``: int32, one per key)."""
    if compiled is not None:
        data, offsets = key_bytes(keys)
        compiled.bloom_add(data, offsets, num_hashes, vector_size, rows, np.ascontiguousarray(row_of, np.int32))
        return
    # Which key sets which bit within a row does not matter, so the bits are set a group of keys (one length)
    # at a time: putting every key's bit indexes back in key order first was a fifth of the hashing. Each row is
    # unpacked to a byte a bit while they are set.
    unpacked: dict[int, np.ndarray] = {}

    def bits_of(row: int) -> np.ndarray:
        if row not in unpacked:
            unpacked[row] = np.unpackbits(rows[row], bitorder="little").view(bool)
        return unpacked[row]

    for at, rounds in bit_positions_by_length(keys, num_hashes, vector_size):
        in_rows = row_of[at]  # a group's keys keep their order, so rows filled one after another come in runs
        if (in_rows[1:] >= in_rows[:-1]).all():
            for begin, end in itertools.pairwise([0, *(np.flatnonzero(np.diff(in_rows)) + 1).tolist(), len(in_rows)]):
                bits_of(int(in_rows[begin]))[rounds[:, begin:end]] = True
        else:  # a full filter's rows take its keys in turn
            for row in np.unique(in_rows).tolist():
                bits_of(row)[rounds[:, in_rows == row]] = True
    for row, bits in unpacked.items():
        rows[row][:] = np.packbits(bits, bitorder="little")


def contained(keys, num_hashes: int, vector_size: int, rows: list[np.ndarray]) -> np.ndarray:
    """Whether some row of a bloom filter (``empty_row``s) has every bit of each key (bool, one per key)."""
    if compiled is not None:
        data, offsets = key_bytes(keys)
        found = np.empty(len(offsets) - 1, dtype=bool)
        compiled.bloom_contains(data, offsets, num_hashes, vector_size, rows, found)
        return found
    positions = bit_positions(keys, num_hashes, vector_size)
    found = np.zeros(positions.shape[1], dtype=bool)
    for row in rows:
        found |= ((row[positions >> 3] >> (positions & 7).astype(np.uint8)) & 1).astype(bool).all(axis=0)
    return found
