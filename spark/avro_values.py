"""Avro-encoded Kafka values, decoded in Spark's tasks with fastavro (Spark's own ``from_avro`` needs the
spark-avro package, which pyspark does not ship). The writer's schema is the ``.avsc`` file that
``source.avro_schema`` names; the framing of Confluent's wire format is already removed
(``change_feed._unframed``), so a value is one Avro datum of that schema."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import StringType, StructField, StructType

from laketide.index.columns import DECODE_REASON
from laketide.writer.changes.connect.avro import read_schema

VALUE, PAYLOAD = "_lt_value", "_lt_payload"


def decode_avro(records: DataFrame, schema_path: str, value_schema: StructType) -> DataFrame:
    """``records`` with ``VALUE`` (the datum, as ``value_schema``) and ``DECODE_REASON`` beside them."""
    writer_schema = read_schema(schema_path)  # on the driver: a bad file stops the job at start
    value_type = to_arrow_type(value_schema)
    out = StructType(
        [*records.schema.fields, StructField(VALUE, value_schema), StructField(DECODE_REASON, StringType())]
    )

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import fastavro

        parsed = fastavro.parse_schema(writer_schema)
        for batch in batches:
            decoded = [_datum(payload, parsed) for payload in batch.column(PAYLOAD).to_pylist()]
            values, reasons = _as_arrow([value for value, _ in decoded], [reason for _, reason in decoded], value_type)
            columns = [*batch.columns, values, pa.array(reasons, pa.string())]
            yield pa.RecordBatch.from_arrays(columns, names=[*batch.schema.names, VALUE, DECODE_REASON])

    return records.mapInArrow(decode, out)


def _datum(payload: bytes, parsed) -> tuple[Any, str | None]:
    import fastavro

    try:
        return fastavro.schemaless_reader(io.BytesIO(payload), parsed), None
    except Exception as error:  # fastavro raises what the bytes make it raise
        return None, f"the value is not Avro of source.avro_schema ({type(error).__name__}: {error})"


def _as_arrow(
    values: list[dict | None], reasons: list[str | None], value_type: pa.DataType
) -> tuple[pa.Array, list[str | None]]:
    """The data as one Arrow array; when some datum does not fit source.schema, each is tried alone and
    those that do not fit become null, with their reason."""
    try:
        return pa.array(values, value_type), reasons
    except (pa.ArrowException, TypeError, ValueError):
        pass
    fitting = []
    for i, value in enumerate(values):
        try:
            pa.array([value], value_type)
            fitting.append(value)
        except (pa.ArrowException, TypeError, ValueError) as error:
            fitting.append(None)
            reasons[i] = f"the value does not match source.schema ({error})"
    return pa.array(fitting, value_type), reasons
