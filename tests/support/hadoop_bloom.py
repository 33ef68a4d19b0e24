"""Bloom filters made by Hadoop's own classes (``org.apache.hadoop.util.bloom``, in the pyspark wheel), through a
Spark session's JVM: the bytes Hudi's writers put in a base file's footer."""

from __future__ import annotations


def hadoop_bytes(jvm, bloom, keys: list[str]) -> bytes:
    """A Hadoop filter (``org.apache.hadoop.util.bloom``, MurmurHash) given ``keys``, serialized as Hudi writes it."""
    for key in keys:
        bloom.add(jvm.org.apache.hadoop.util.bloom.Key(bytearray(key.encode())))
    sink = jvm.java.io.ByteArrayOutputStream()
    out = jvm.java.io.DataOutputStream(sink)
    bloom.write(out)
    out.flush()
    return bytes(sink.toByteArray())


def hadoop_simple_filter(jvm, keys: list[str], vector_size: int, num_hashes: int) -> bytes:
    """``org.apache.hadoop.util.bloom.BloomFilter``, as Hudi's SIMPLE filter is."""
    return hadoop_bytes(jvm, jvm.org.apache.hadoop.util.bloom.BloomFilter(vector_size, num_hashes, 1), keys)
