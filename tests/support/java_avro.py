"""Avro read by Apache Avro's Java library, the one Hudi uses, shipped in the pyspark wheel: our bytes as Java
decodes them."""

from __future__ import annotations


def java_avro_read(spark, schema_json: str, data: bytes) -> str:
    """A record decoded by Apache Avro's Java library (the one Hudi uses), shipped in the pyspark wheel."""
    jvm = spark._jvm
    schema = jvm.org.apache.avro.Schema.Parser().parse(schema_json)
    decoder = jvm.org.apache.avro.io.DecoderFactory.get().binaryDecoder(bytearray(data), None)
    return str(jvm.org.apache.avro.generic.GenericDatumReader(schema).read(None, decoder).toString())


def java_container_read(spark, data: bytes) -> str:
    """The first record of an Avro container file, as Java's ``DataFileReader`` reads it."""
    jvm = spark._jvm
    stream = jvm.org.apache.avro.file.SeekableByteArrayInput(bytearray(data))
    reader = jvm.org.apache.avro.file.DataFileReader(stream, jvm.org.apache.avro.generic.GenericDatumReader())
    return str(reader.next().toString())
