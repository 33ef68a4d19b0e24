"""Key hashing in C (``_keyhash.c``), and a write task's sequence numbers; ``hashing.py`` calls the hashing and holds
the numpy twin of each hashing function.

Keys come as one UTF-8 byte buffer and ``n + 1`` int64 offsets (``hashing.key_bytes``); a filter's rows are
numpy uint8 arrays of ``vector_size`` bits, 8 a byte, bit ``i`` at byte ``i // 8``, bit ``i % 8`` (Hadoop's serialized
bit vector). Each raises ``ValueError`` where a buffer does not fit."""

from collections.abc import Sequence

from typing_extensions import Buffer

def bloom_add(
    data: Buffer, offsets: Buffer, num_hashes: int, vector_size: int, rows: Sequence[Buffer], row_of: Buffer
) -> None: ...
def bloom_contains(
    data: Buffer, offsets: Buffer, num_hashes: int, vector_size: int, rows: Sequence[Buffer], out: Buffer
) -> None: ...
def fnv1a64(data: Buffer, offsets: Buffer, out: Buffer, seeds: Buffer | None = None) -> None: ...
def key_prefixes(data: Buffer, offsets: Buffer, skip: int, out: Buffer) -> None: ...
def numbered(prefix: bytes, start: int, n: int) -> tuple[bytes, bytes]:
    """``prefix + str(start + i)`` for ``i < n``: a string array's int32 offsets and data (sequence numbers)."""
