"""``index.key_order``: record keys in byte order, equal keys in row order, exactly as Arrow's ``sort_indices``
orders them, on the keys tables have (UUIDs, numbers as text, shared prefixes, repeated keys, non-ASCII, NUL
bytes, keys that are each other's start) and without the compiled module."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from laketide.index import key_order as module
from laketide.index.key_order import DIRECT_BELOW, key_order

RNG = np.random.default_rng(20261201)
N = 3 * DIRECT_BELOW


def _text(values) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


KEYS = {
    "uuids": lambda: pa.array([str(uuid.UUID(bytes=RNG.bytes(16))) for _ in range(N)]),
    "numbers in order": lambda: _text(np.arange(N)),
    "numbers shuffled": lambda: _text(RNG.permutation(N)),
    "repeated": lambda: _text(RNG.integers(0, N // 3, N)),
    "shared prefix": lambda: pa.array([f"order-{x:012d}" for x in RNG.permutation(N)]),
    # a tenth of the keys tie past the 8 bytes after the shared prefix: Arrow orders those among themselves
    "some long ties": lambda: pa.array([f"n{x}" if x % 10 else f"zzzzzzzzzz-{x}" for x in RNG.permutation(N)]),
    # most keys tie so: Arrow orders them all
    "mostly long ties": lambda: pa.array([f"tenant-{x % 7}/customer-{x:06d}" for x in RNG.permutation(N)]),
    "each other's start": lambda: pa.array(["ab" * int(x) for x in RNG.integers(0, 9, N)]),
    "nul bytes": lambda: pa.array(["k" + "\x00" * int(x % 4) + str(x % 5) for x in RNG.integers(0, 100, N)]),
    "non-ascii": lambda: pa.array([f"clé-{x}-ß€𝄞" if x % 3 else f"key-{x}" for x in RNG.integers(0, N, N)]),
    "empty and one": lambda: pa.array([["", "a", "\x00"][x] for x in RNG.integers(0, 3, N)]),
}


@pytest.mark.parametrize("name", KEYS)
def test_keys_come_in_arrow_order(name):
    keys = KEYS[name]()
    np.testing.assert_array_equal(key_order(keys), pc.sort_indices(keys).to_numpy())


def test_chunked_and_sliced_keys():
    keys = pa.array([f"id-{x}" for x in RNG.integers(0, N, N)])
    chunked = pa.chunked_array([keys.slice(0, N // 3), keys.slice(N // 3)])
    np.testing.assert_array_equal(key_order(chunked), pc.sort_indices(keys).to_numpy())
    part = keys.slice(N // 4, N // 2)
    np.testing.assert_array_equal(key_order(part), pc.sort_indices(part).to_numpy())


def test_few_keys_and_no_compiled_module(monkeypatch):
    few = pa.array(["b", "a", "c", "a"])
    assert key_order(few).tolist() == [1, 3, 0, 2]
    keys = KEYS["numbers shuffled"]()
    monkeypatch.setattr(module, "compiled", None)
    np.testing.assert_array_equal(key_order(keys), pc.sort_indices(keys).to_numpy())


def test_rows_by_key_equal_arrows_sort_by():
    """``by_key``: a table's rows in ``sort_by(RECORD_KEY)`` order, repeated keys in their row order, as a base file
    is written."""
    from laketide.index.key_order import by_key
    from laketide.table.format.schema import RECORD_KEY

    rng = np.random.default_rng(7)
    keys = [f"k-{i}" for i in rng.integers(0, 3_000, 20_000)]
    rows = pa.table({RECORD_KEY: keys, "row": np.arange(len(keys))})
    assert by_key(rows).equals(rows.sort_by(RECORD_KEY))
    assert by_key(rows.slice(0, 1)).equals(rows.slice(0, 1))
