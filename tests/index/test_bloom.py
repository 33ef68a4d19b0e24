from __future__ import annotations

import base64
import glob

import numpy as np
import pyarrow.parquet as pq
import pytest
from fixture_tables import COW_FIXTURES, MOR_FIXTURE
from hadoop_bloom import hadoop_bytes, hadoop_simple_filter

from laketide.index import hashing
from laketide.index.bloom import FOOTER_BLOOM, FOOTER_BLOOM_TYPE, BloomFilter, BloomSpec, KeyRange, bloom_size
from laketide.index.hashing import hash64, key_bytes, murmur2

COMPILED = hashing.compiled


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def hashing_path(request, monkeypatch):
    """Every test here on both of hashing's paths: C (built with the package) and numpy (a laketide shipped as
    a .zip, which cannot load C)."""
    if request.param == "numpy":
        monkeypatch.setattr(hashing, "compiled", None)
    return request.param


def test_the_installed_package_hashes_in_c(hashing_path):
    """``make install`` builds the C path: without it every filter's bits would come from numpy, three times slower."""
    assert COMPILED is not None
    assert (hashing.compiled is not None) == (hashing_path == "compiled")


def test_both_paths_give_the_same_index_hashes(monkeypatch):
    keys = [f"key-{i}" for i in range(5_000)] + ["", "é", "日本語のキー", "a" * 300, "x\x00y"]
    compiled = hash64(keys)
    monkeypatch.setattr(hashing, "compiled", None)
    assert np.array_equal(compiled, hash64(keys))


def test_both_paths_set_and_find_the_same_bits(monkeypatch):
    """The C path hashes a block of 64 keys in vector registers where the CPU has AVX-512 (lanes masked past each
    key's end) and in scalar chains otherwise, or when one key is much longer than the block's others: every way,
    the bits are numpy's. Numbers as text in byte order (1 to 6 bytes side by side), UUIDs, a block with one long key,
    non-ASCII keys, and a count that leaves a partial block."""
    keys = sorted(str(i) for i in range(20_000))
    keys += [f"{i:032x}-{i}" for i in range(1_000)] + ["k" * 500] + [f"é{i}日本" for i in range(700)] + [""] * 3
    size, rounds = 70_001, 30
    row_of = (np.arange(len(keys)) % 3).astype(np.int32)

    def filled() -> tuple[list[np.ndarray], np.ndarray]:
        rows = [hashing.empty_row(size) for _ in range(3)]
        hashing.set_bits(keys, rounds, size, rows, row_of)
        probe = keys[::7] + [f"absent-{i}" for i in range(2_000)]
        return rows, hashing.contained(probe, rounds, size, rows)

    compiled_rows, compiled_found = filled()
    monkeypatch.setattr(hashing, "compiled", None)
    numpy_rows, numpy_found = filled()
    assert all(np.array_equal(c, n) for c, n in zip(compiled_rows, numpy_rows))
    assert np.array_equal(compiled_found, numpy_found)


def test_the_c_path_refuses_buffers_that_do_not_fit():
    data, offsets = key_bytes(["ab", "cd"])
    row = hashing.empty_row(64)
    with pytest.raises(ValueError, match="outside"):
        COMPILED.bloom_add(data, np.array([0, 2, 9], np.int64), 3, 64, [row], np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="decrease"):
        COMPILED.bloom_add(data, np.array([0, 3, 2], np.int64), 3, 64, [row], np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="row_of"):
        COMPILED.bloom_add(data, offsets, 3, 64, [row], np.array([0, 1], np.int32))
    with pytest.raises(ValueError, match="row 0 holds 8 bytes, not the 16"):
        COMPILED.bloom_add(data, offsets, 3, 128, [row], np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="num_hashes"):
        COMPILED.bloom_contains(data, offsets, 0, 64, [row], np.zeros(2, bool))
    with pytest.raises(ValueError, match="one byte per key"):
        COMPILED.bloom_contains(data, offsets, 3, 64, [row], np.zeros(3, bool))
    with pytest.raises(ValueError, match="uint64"):
        COMPILED.fnv1a64(data, offsets, np.zeros(3, np.uint64))


def _bloom_files(root) -> list[str]:
    return [
        path
        for name in [*COW_FIXTURES, MOR_FIXTURE]
        for path in sorted(glob.glob(str(root / name / "**" / "*.parquet"), recursive=True))
        if FOOTER_BLOOM.encode() in (pq.read_metadata(path).metadata or {})
    ]


@pytest.fixture(scope="module")
def hadoop(spark):
    """The JVM of the test Spark session: Hadoop's MurmurHash and BloomFilter ship in the pyspark wheel."""
    return spark._jvm


def test_fixtures_carry_bloom_filters(fixtures_dir):
    assert len(_bloom_files(fixtures_dir)) >= 8


def test_rebuilt_filters_are_byte_identical_to_spark_footers(fixtures_dir):
    for path in _bloom_files(fixtures_dir):
        footer = pq.read_metadata(path).metadata
        keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0).to_pylist()
        kind = footer[FOOTER_BLOOM_TYPE.encode()].decode()
        ours = BloomFilter.for_keys(keys, kind)
        assert ours.serialize() == footer[FOOTER_BLOOM.encode()].decode(), path


def test_membership_agrees_with_spark_footer(fixtures_dir):
    absent = [f"absent-{i}" for i in range(2000)] + ["", "0", "99999", "é"]
    for path in _bloom_files(fixtures_dir):
        footer = pq.read_metadata(path).metadata
        keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0).to_pylist()
        theirs = BloomFilter.from_footer(footer)
        ours = BloomFilter.for_keys(keys)
        assert theirs.might_contain_many(keys).all()
        probe = keys + absent
        assert np.array_equal(theirs.might_contain_many(probe), ours.might_contain_many(probe))
        assert [theirs.might_contain(k) for k in probe[:50]] == list(ours.might_contain_many(probe[:50]))
        # at fpp 1e-9 none of the absent keys should hit
        assert not theirs.might_contain_many(absent).any()


def test_hudi_default_sizes():
    assert bloom_size(60_000, 1e-9) == (2_587_966, 30)


def test_filters_are_sized_to_the_files_they_go_into():
    # a 2 MB file of 100-byte records holds ~21,000 keys; a 128 MB one more than Hudi's default row
    assert BloomSpec.sized("DYNAMIC_V0", None, 2 * 2**20, 100) == BloomSpec("DYNAMIC_V0", 20_971)
    assert BloomSpec.sized("DYNAMIC_V0", None, 128 * 2**20, 100).num_entries == 60_000
    assert BloomSpec.sized("SIMPLE", None, 2 * 2**20, 100).num_entries == 60_000  # it cannot grow
    assert BloomSpec.sized("DYNAMIC_V0", None, 2**20, 10**6).num_entries == 1_000
    assert BloomSpec.sized("DYNAMIC_V0", 5_000, 128 * 2**20, 100).num_entries == 5_000
    # a new file that holds a few keys: a small filter, which grows with the file; a simple one cannot
    assert BloomSpec("DYNAMIC_V0", 60_000).at_most(3) == BloomSpec("DYNAMIC_V0", 1_000)
    assert BloomSpec("DYNAMIC_V0", 20_000).at_most(50_000) == BloomSpec("DYNAMIC_V0", 20_000)
    assert BloomSpec("SIMPLE", 60_000).at_most(3) == BloomSpec("SIMPLE", 60_000)
    keys = [f"key-{i:07d}" for i in range(20_000)]
    sized, fixed = BloomSpec.sized("DYNAMIC_V0", None, 2 * 2**20, 100).empty(), BloomFilter.empty()
    sized.add_many(keys)
    fixed.add_many(keys)
    assert len(sized.serialize()) < len(fixed.serialize()) / 2.5
    again = BloomFilter.deserialize(sized.serialize())
    assert again.might_contain_many(keys).all()
    assert again.might_contain_many([f"other-{i}" for i in range(20_000)]).sum() < 3


def test_dynamic_filter_grows_rows_and_round_trips():
    keys = [f"key-{i:07d}" for i in range(130_000)]
    bloom = BloomFilter.for_keys(keys)
    assert len(bloom.rows) == 2  # 60k per row up to the 100k bound
    again = BloomFilter.deserialize(bloom.serialize())
    assert again.serialize() == bloom.serialize()
    assert again.might_contain_many(keys).all()
    misses = again.might_contain_many([f"other-{i}" for i in range(20_000)])
    assert misses.sum() < 5


def test_incremental_adds_equal_one_build():
    keys = [f"k{i}" for i in range(70_000)]
    whole = BloomFilter.for_keys(keys)
    parts = BloomFilter.empty()
    for start in range(0, len(keys), 9_999):
        parts.add_many(keys[start : start + 9_999])
    assert parts.serialize() == whole.serialize()


@pytest.mark.parametrize("kind", ["SIMPLE", "DYNAMIC_V0"])
def test_round_trip_by_kind(kind):
    bloom = BloomFilter.for_keys(["a", "b", "ünïcode", ""], kind)
    again = BloomFilter.deserialize(bloom.serialize(), kind)
    assert again.kind == kind
    assert again.might_contain_many(["a", "b", "ünïcode", ""]).all()
    assert not again.might_contain("c")


def _keys_of_every_length() -> list[str]:
    """Ten ASCII and ten multi-byte keys for every UTF-8 length from 1 to 64 bytes."""
    rng = np.random.default_rng(7)
    wide = ["é", "日", "😀", "ß", "€", "a"]
    keys = []
    for length in range(1, 65):
        for _ in range(10):
            keys.append("".join(chr(c) for c in rng.integers(32, 127, size=length)))
            chars, size = [], 0
            while size < length:
                fits = [c for c in wide if size + len(c.encode()) <= length]
                c = fits[rng.integers(len(fits))]
                chars.append(c)
                size += len(c.encode())
            keys.append("".join(chars))
    return keys


def test_murmur_matches_hadoop_for_every_key_length(hadoop):
    keys = _keys_of_every_length()
    assert {len(k.encode()) for k in keys} == set(range(1, 65))
    murmur = hadoop.org.apache.hadoop.util.hash.MurmurHash.getInstance()
    seeds = np.arange(len(keys), dtype=np.int64) * 2_654_435_761 % 2**32
    ours_zero = murmur2(keys).view(np.int32)
    ours_seeded = murmur2(keys, seeds.astype(np.uint32)).view(np.int32)
    for key, zero, seed, seeded in zip(keys, ours_zero, seeds, ours_seeded):
        data = bytearray(key.encode())
        assert murmur.hash(data, len(data), 0) == zero, key
        assert murmur.hash(data, len(data), int(np.int64(seed).astype(np.uint32).view(np.int32))) == seeded, key


def test_simple_filters_equal_hadoops_for_every_key_length(hadoop):
    keys = _keys_of_every_length()
    for length in range(1, 65):
        group = [k for k in keys if len(k.encode()) == length]
        ours = BloomFilter.for_keys(group, "SIMPLE", num_entries=100, fpp=1e-6)
        assert ours.to_bytes() == hadoop_simple_filter(hadoop, group, ours.vector_size, ours.num_hashes), length
    whole = BloomFilter.for_keys(keys, "SIMPLE")
    assert (whole.vector_size, whole.num_hashes) == (2_587_966, 30)
    theirs = hadoop_simple_filter(hadoop, keys, whole.vector_size, whole.num_hashes)
    assert whole.to_bytes() == theirs
    probe = BloomFilter.deserialize(base64.b64encode(theirs), "SIMPLE")
    assert probe.might_contain_many(keys).all()


def test_key_range():
    kr = KeyRange("b", "d")
    assert kr.contains("c") and not kr.contains("e")
    assert list(kr.contains_many(["a", "b", "c", "d", "e"])) == [False, True, True, True, False]


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="SIMPLE"):
        BloomFilter.empty("BOGUS")


def test_small_dynamic_filters_equal_hadoops(hadoop):
    """A filter sized below its file's keys grows rows as Hudi's ``InternalDynamicBloomFilter`` does, which is
    Hadoop's ``DynamicBloomFilter`` bounded at ``max_entries``: below the bound the bytes are the same."""
    keys = [f"key-{i:07d}" for i in range(5_500)]
    ours = BloomSpec("DYNAMIC_V0", 1_000).empty()
    ours.add_many(keys)
    assert len(ours.rows) == 6
    theirs = hadoop.org.apache.hadoop.util.bloom.DynamicBloomFilter(ours.vector_size, ours.num_hashes, 1, 1_000)
    assert ours.to_bytes() == hadoop_bytes(hadoop, theirs, keys)
