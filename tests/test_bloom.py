from __future__ import annotations

import glob

import numpy as np
import pyarrow.parquet as pq
import pytest

from laketide.index.bloom import FOOTER_BLOOM, FOOTER_BLOOM_TYPE, BloomFilter, KeyRange, bloom_size
from laketide.index.hashing import bit_positions

from conftest import COW_FIXTURES, MOR_FIXTURE


def _bloom_files(root) -> list[str]:
    files = []
    for name in [*COW_FIXTURES, MOR_FIXTURE]:
        for path in sorted(glob.glob(str(root / name / "**" / "*.parquet"), recursive=True)):
            if FOOTER_BLOOM.encode() in (pq.read_metadata(path).metadata or {}):
                files.append(path)
    return files


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


def _java_murmur(data: bytes, seed: int) -> int:
    """Line-by-line port of Hadoop's MurmurHash.hash with Java int overflow."""

    def i32(x):
        return ((x + 2**31) % 2**32) - 2**31

    def ushr(x, n):
        return (x % 2**32) >> n

    m, r = 0x5BD1E995, 24
    h = i32(seed ^ len(data))
    signed = [b - 256 if b > 127 else b for b in data]
    for i in range(len(data) // 4):
        k = signed[4 * i + 3]
        k = i32(k << 8) | (data[4 * i + 2])
        k = i32(k << 8) | (data[4 * i + 1])
        k = i32(k << 8) | (data[4 * i])
        k = i32(k * m)
        k ^= ushr(k, r)
        k = i32(k * m)
        h = i32(h * m)
        h = i32(h ^ k)
    tail = len(data) % 4
    base = len(data) - tail
    if tail:
        if tail >= 3:
            h = i32(h ^ i32(signed[base + 2] << 16))
        if tail >= 2:
            h = i32(h ^ i32(signed[base + 1] << 8))
        h = i32(h ^ signed[base])
        h = i32(h * m)
    h = i32(h ^ ushr(h, 13))
    h = i32(h * m)
    h = i32(h ^ ushr(h, 15))
    return h


def test_vectorised_murmur_matches_scalar_port():
    rng = np.random.default_rng(7)
    keys = ["", "1", "ab", "abc", "ÿÿÿ", "日本語キー", "key-with-many-bytes-\x80"]
    keys += ["".join(chr(c) for c in rng.integers(32, 0x3000, size=n)) for n in rng.integers(0, 40, size=200)]
    vector = 2_587_966
    got = bit_positions(keys, 5, vector)
    for key, row in zip(keys, got):
        h, expected = 0, []
        for _ in range(5):
            h = _java_murmur(key.encode(), h)
            expected.append(abs(int(np.fmod(h, vector))))
        assert list(row) == expected, key


def test_key_range():
    kr = KeyRange("b", "d")
    assert kr.contains("c") and not kr.contains("e")
    assert list(kr.contains_many(["a", "b", "c", "d", "e"])) == [False, True, True, True, False]


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="SIMPLE"):
        BloomFilter.empty("BOGUS")
