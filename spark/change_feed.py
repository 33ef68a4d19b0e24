"""Kafka records and Debezium change events into the rows of a micro-batch.

``kafka_stream`` reads the topics with Spark's Kafka source where its connector is on the classpath,
else with laketide's (``kafka.source.py``); both give Spark's Kafka columns. ``decode_records`` turns
each record's value into the declared columns: JSON through Spark's ``from_json`` (as landing JSON files
are read), Avro through fastavro (``avro_values.py``); Confluent's wire format (a zero byte and a
4-byte schema id before the payload) is recognised and its framing removed. Debezium change events are
handed on as they came (``change_records``), and decoded by the core (``changes.decoder``).

A record that cannot become a row goes to quarantine with its reason (``DECODE_REASON``) and, as its raw
form, a JSON object naming its topic, partition and offset with its value (text when it is UTF-8, else
base64). A tombstone (a null value, which Debezium sends after a delete for log compaction) is skipped.
Within a micro-batch, records arrive in (topic-partition, offset) order: ties between two events of one
key go to the later offset.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StringType, StructField, StructType

from laketide.config import ConfigError, JobConfig, KafkaSection, SourceSection
from laketide.index.columns import CORRUPT, DECODE_REASON, EVENT_POSITION, SOURCE_FILE, SOURCE_OFFSET
from laketide.spark.kafka.source import NAME as PYTHON_KAFKA
from laketide.spark.kafka.source import KafkaDataSource
from laketide.table.format.schema import IS_DELETED

log = logging.getLogger(__name__)
SPARK_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
VALUE = "_lt_value"  # a record's decoded value, a struct
VALUE_TEXT = "_lt_value_text"
PAYLOAD = "_lt_payload"  # a record's value without Confluent's framing
# Spark's Kafka columns, and those decoding adds: kept beside the rows until ``with_record_origin``
KAFKA_COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
    PAYLOAD,
    VALUE_TEXT,
)


# -- reading ------------------------------------------------------------------


def spark_has_kafka(spark: SparkSession) -> bool:
    """Spark's Kafka connector (spark-sql-kafka-0-10) is on the classpath."""
    try:
        jvm: Any = spark.sparkContext._jvm  # py4j's view of the JVM: its attributes are Java's packages
        jvm.java.lang.Class.forName(SPARK_KAFKA_PROVIDER)
        return True
    except Exception:
        return False


def kafka_client(kafka: KafkaSection) -> dict[str, str]:
    """The Kafka client's settings (librdkafka's names) for laketide's own clients."""
    assert kafka.bootstrap_servers is not None, "the config's validation requires it of a Kafka source"
    return {"bootstrap.servers": kafka.bootstrap_servers, **kafka.options}


def kafka_stream(spark: SparkSession, config: JobConfig) -> DataFrame:
    """The topics' records, with Spark's Kafka columns, from the reader ``source.kafka.reader`` picks, at most
    ``JobConfig.kafka_offsets_per_trigger`` a micro-batch."""
    kafka, cap = config.source.kafka, config.kafka_offsets_per_trigger()
    has_connector = spark_has_kafka(spark)
    if kafka.reader == "spark" and not has_connector:
        raise ConfigError(
            "source.kafka.reader = 'spark' needs Spark's Kafka connector on the classpath: add --packages "
            "org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version> to spark-submit, or set reader = 'auto'"
        )
    if kafka.reader == "spark" or (kafka.reader == "auto" and has_connector):
        log.info("reading Kafka with Spark's Kafka source")
        options = {
            "kafka.bootstrap.servers": kafka.bootstrap_servers,
            "startingOffsets": kafka.starting_offsets,
            "failOnDataLoss": str(kafka.fail_on_data_loss).lower(),
            "includeHeaders": "true",
        }
        options.update(
            {"subscribePattern": kafka.topic_pattern} if kafka.topic_pattern else {"subscribe": ",".join(kafka.topics)}
        )
        if cap:
            options["maxOffsetsPerTrigger"] = str(cap)
        options.update({f"kafka.{k}": v for k, v in kafka.options.items()})
        return spark.readStream.format("kafka").options(**options).load()
    log.info("reading Kafka with laketide's Kafka source (Spark's Kafka connector is not on the classpath)")
    spark.dataSource.register(KafkaDataSource)
    options = {
        "bootstrap_servers": kafka.bootstrap_servers,
        "starting_offsets": kafka.starting_offsets,
        "fail_on_data_loss": str(kafka.fail_on_data_loss).lower(),
        # a task per core or two: a task per topic-partition made a client and a fetch for each
        "max_splits": str(2 * spark.sparkContext.defaultParallelism),
    }
    options.update(
        {"topic_pattern": kafka.topic_pattern} if kafka.topic_pattern else {"topics": ",".join(kafka.topics)}
    )
    if cap:
        options["max_offsets_per_trigger"] = str(cap)
    options.update({f"kafka.{k}": v for k, v in kafka.options.items()})
    return spark.readStream.format(PYTHON_KAFKA).options(**options).load()


# -- values ---------------------------------------------------------------------


def _unframed(value: Column) -> Column:
    """The payload of a value in Confluent's wire format (magic byte 0, a 4-byte schema id), else the value."""
    framed = (F.length(value) >= 5) & (F.substring(value, 1, 1) == F.lit(bytes([0])))
    return F.when(framed, F.substring(value, 6, 2**31 - 1)).otherwise(value)


def _raw_record() -> Column:
    """A bad record's raw form for quarantine: where it was, and its value as text, or as base64 when it is not
    UTF-8."""
    return F.to_json(
        F.struct(
            F.col("topic"),
            F.col("partition"),
            F.col("offset"),
            F.col(VALUE_TEXT).alias("value"),
            F.when(F.col(VALUE_TEXT).isNull(), F.base64(F.col("value"))).alias("value_base64"),
        )
    )


def decode_records(records: DataFrame, source: SourceSection, value_schema: StructType) -> DataFrame:
    """Each record's value as the struct ``VALUE`` of ``value_schema``, with ``DECODE_REASON`` where it
    does not decode; tombstones left out. The record's own columns stay until ``with_record_origin``."""
    records = records.filter(F.col("value").isNotNull()).withColumn(PAYLOAD, _unframed(F.col("value")))
    # a value that is not UTF-8 has no text: it is kept as base64, and is not JSON
    records = records.withColumn(VALUE_TEXT, F.try_validate_utf8(F.col(PAYLOAD).cast("string")))
    if source.value_format == "avro":
        from laketide.spark.avro_values import decode_avro

        assert source.avro_schema is not None, "the config's validation requires it of Avro values"
        return decode_avro(records, source.avro_schema, value_schema)
    parsing = StructType([*value_schema.fields, StructField(CORRUPT, StringType())])
    decoded = records.withColumn(
        VALUE, F.from_json(F.col(VALUE_TEXT), parsing, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    )
    bad = F.col(VALUE_TEXT).isNull() | F.col(VALUE).isNull() | F.col(f"{VALUE}.{CORRUPT}").isNotNull()
    return decoded.withColumn(
        DECODE_REASON, F.when(bad, F.lit("the value is not valid JSON, or does not match source.schema"))
    )


def with_record_origin(rows: DataFrame) -> DataFrame:
    """Rows made from records: where each came from (``SOURCE_FILE`` its topic-partition, ``SOURCE_OFFSET``),
    and, for one that goes to quarantine, its raw record (``CORRUPT``); the records' columns dropped."""
    return rows.select(
        *[c for c in rows.columns if c not in KAFKA_COLUMNS],
        F.when(F.col(DECODE_REASON).isNotNull(), _raw_record()).alias(CORRUPT),
        F.concat(F.col("topic"), F.lit("/"), F.lpad(F.col("partition").cast("string"), 10, "0")).alias(SOURCE_FILE),
        F.col("offset").alias(SOURCE_OFFSET),
    )


def plain_columns(decoded: DataFrame, row_schema: StructType) -> DataFrame:
    """Values that are the rows themselves (no envelope)."""
    return decoded.select(
        *[F.col(f"{VALUE}.{f.name}").alias(f.name) for f in row_schema.fields], *_beside(decoded, VALUE)
    )


def _beside(df: DataFrame, *taken: str) -> list[str]:
    return [c for c in df.columns if c not in taken]


# -- Debezium -------------------------------------------------------------------


def change_schema(row_schema: StructType) -> StructType:
    """The rows change events become: the row, whether it is a delete, and the event's position."""
    fields = [f for f in row_schema.fields if f.name not in (IS_DELETED, EVENT_POSITION)]
    return StructType([*fields, StructField(IS_DELETED, BooleanType()), StructField(EVENT_POSITION, StringType())])


def change_records(records: DataFrame) -> DataFrame:
    """Kafka records of Debezium change events as the core decodes them (``changes.decoder``): each
    value as it came (its framing says an Avro value's schema id), and where it was. Decoding happens in
    ``foreachBatch``, where the columns of the micro-batch are known (they may come from the events)."""
    return records.select("value", "topic", "partition", "offset")
