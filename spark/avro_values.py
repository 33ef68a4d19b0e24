"""Avro-encoded Kafka values, decoded in Spark's tasks with fastavro (Spark's own ``from_avro`` needs the
spark-avro package, which pyspark does not ship). The writer's schema is the ``.avsc`` file that
``source.avro_schema`` names; the framing of Confluent's wire format is already removed
(``change_feed._unframed``), so a value is one Avro datum of that schema."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pyarrow as pa
from laketide.index.columns import DECODE_REASON
from laketide.table.io import FileIO
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import StringType, StructField, StructType

from laketide.config import ConfigError

VALUE, PAYLOAD = "_lt_value", "_lt_payload"


def read_schema(path: str) -> dict:
    """The ``.avsc`` file, parsed and checked, on the driver: a bad file stops the job at start."""
    import fastavro

    try:
        schema = json.loads(FileIO.for_uri(path).read_text(""))
        fastavro.parse_schema(schema)
    except FileNotFoundError:
        raise ConfigError(f"source.avro_schema = {path!r}: no such file") from None
    except (ValueError, fastavro.schema.SchemaParseException) as error:
        raise ConfigError(f"source.avro_schema = {path!r} is not an Avro schema: {error}") from None
    return schema


def decode_avro(records: DataFrame, schema_path: str, value_schema: StructType) -> DataFrame:
    """``records`` with ``VALUE`` (the datum, as ``value_schema``) and ``DECODE_REASON`` beside them."""
    writer_schema = read_schema(schema_path)
    value_type = to_arrow_type(value_schema)
    out = StructType([*records.schema.fields, StructField(VALUE, value_schema), StructField(DECODE_REASON, StringType())])

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import fastavro

        parsed = fastavro.parse_schema(writer_schema)
        for batch in batches:
            values, reasons = [], []
            for payload in batch.column(PAYLOAD).to_pylist():
                value, reason = _datum(payload, parsed, value_type)
                values.append(value)
                reasons.append(reason)
            columns = [*batch.columns, pa.array(values, value_type), pa.array(reasons, pa.string())]
            yield pa.RecordBatch.from_arrays(columns, names=[*batch.schema.names, VALUE, DECODE_REASON])

    return records.mapInArrow(decode, out)


def _datum(payload: bytes, parsed, value_type: pa.DataType) -> tuple[dict | None, str | None]:
    import fastavro

    try:
        value = fastavro.schemaless_reader(io.BytesIO(payload), parsed)
    except Exception as error:  # fastavro raises what the bytes make it raise
        return None, f"the value is not Avro of source.avro_schema ({type(error).__name__}: {error})"
    try:
        pa.array([value], value_type)  # a datum whose fields do not fit source.schema
    except (pa.ArrowException, TypeError, ValueError) as error:
        return None, f"the value does not match source.schema ({error})"
    return value, None
