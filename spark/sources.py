"""Streaming sources: a landing directory of JSON, CSV or parquet files, Kafka topics, or the generator.

Rows of landing files carry where they came from (Spark's ``_metadata``:
file, modification time, block), which orders them by arrival. A landing
file that cannot be read under the declared schema is found by reading the
micro-batch's files one at a time (``unreadable_files``), so that it alone
goes to quarantine.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import asdict

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.readwriter import DataStreamReader
from pyspark.sql.types import StringType, StructField, StructType

from laketide.config import ConfigError, JobConfig, SourceSection
from laketide.index.columns import CORRUPT, EVENT_POSITION, SOURCE_BLOCK, SOURCE_FILE, SOURCE_MTIME
from laketide.spark.change_feed import (
    change_records,
    change_schema,
    decode_records,
    kafka_stream,
    plain_columns,
    with_record_origin,
)
from laketide.spark.generator import ARROW_SCHEMA as GENERATOR_SCHEMA
from laketide.spark.generator import NAME as GENERATOR
from laketide.spark.generator import GeneratorDataSource, GeneratorSpec
from laketide.table import Table
from laketide.table.format.schema import IS_DELETED
from laketide.table.storage.io import FileIO
from laketide.writer.changes.connect.avro import AvroValues, read_schema
from laketide.writer.changes.connect.column import Decoding
from laketide.writer.changes.decoder import ChangeDecoder
from laketide.writer.changes.schema_registry import SchemaRegistry

# CSV as people write it (RFC 4180): a doubled quote inside a quoted field, newlines inside quotes,
# and a header naming the columns, which Spark checks against the schema instead of ignoring it.
CSV_DEFAULTS = {"header": "true", "escape": '"', "multiLine": "true", "enforceSchema": "false"}
# what a generated row weighs in a landing file, for ``write.driver_batch_bytes``
GENERATED_ROW_BYTES = 64


def declared_schema(spark: SparkSession, source: SourceSection) -> StructType:
    """The rows' declared columns as Spark types. ``spark`` is not read, but asked for: ``StructType.fromDDL``
    parses in the JVM of the active session, which must be up."""
    if source.format == "generator":
        return from_arrow_schema(GENERATOR_SCHEMA)
    try:
        # Spark's parser, without building a DataFrame (which imports pandas, a second of every start)
        parsed = StructType.fromDDL(source.schema_ddl or "")
    except Exception as exc:  # Spark's parse error names the position in the DDL
        raise ConfigError(f"source.schema is not valid Spark DDL: {str(exc).splitlines()[0]}") from None
    if not isinstance(parsed, StructType):
        raise ConfigError(f"source.schema {source.schema_ddl!r} is one type, not columns: write it as 'name type, ...'")
    return parsed


def generated_fits_driver(config: JobConfig, limit: int) -> bool:
    """Whether a generator's micro-batches are written by the driver (at most ``limit`` bytes, the job's
    ``write.driver_limit``), which then makes their rows itself: such a job runs no Spark task, so it keeps no
    Python worker (``spark.session``)."""
    return (
        config.source.format == "generator"
        and bool(limit)
        and config.source.generator.rows_per_batch * GENERATED_ROW_BYTES <= limit
    )


def decodes_changes(source: SourceSection) -> bool:
    """Whether the core decodes the micro-batches' records (``changes.decoder``): Debezium's events, from
    Kafka (JSON or Avro) or from landing files of JSON lines."""
    return source.envelope == "debezium"


def change_decoder(spark: SparkSession, config: JobConfig, table: Table) -> ChangeDecoder:
    """The decoder of a change feed into ``table``: into ``source.schema``'s columns, or the events'."""
    source, settings = config.source, table.config
    declared = None
    if source.schema_ddl is not None:
        declared = to_arrow_schema(change_schema(declared_schema(spark, source)), timezone="UTC")
        declared = pa.schema([f for f in declared if f.name != IS_DELETED])
    required = (
        *settings.record_key_fields,
        *settings.partition_fields,
        *([settings.ordering_field] if settings.ordering_field else []),
    )
    avro = None
    if source.format == "kafka" and source.value_format == "avro":
        fixed = read_schema(source.avro_schema, config.storage.io_options) if source.avro_schema else None
        registry = source.schema_registry
        avro = AvroValues(fixed, SchemaRegistry(registry.url, registry.options) if registry.url else None)
    return ChangeDecoder(
        declared,
        tuple(settings.record_key_fields),
        tuple(r for r in required if r != EVENT_POSITION),
        Decoding.of(source.debezium),
        avro,
    )


def source_schema(spark: SparkSession, source: SourceSection) -> pa.Schema | None:
    """The columns of the stream's rows as Arrow types (timestamps in UTC), for the checks at start:
    the declared ones, and for change events whether each is a delete and its position; ``None`` when
    change events bring their own."""
    if source.schema_ddl is None and decodes_changes(source):
        return None
    declared = declared_schema(spark, source)
    return to_arrow_schema(change_schema(declared) if source.envelope == "debezium" else declared, timezone="UTC")


def _configure(reader, spark: SparkSession, source: SourceSection, schema: StructType | None = None):
    options: dict[str, str] = {}
    if source.format == "csv":
        options.update(CSV_DEFAULTS)
    if source.format in ("json", "csv"):
        # Malformed records are kept whole in this column and sent to quarantine.
        options.update({"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    options.update(source.options)
    full = schema or declared_schema(spark, source)
    if source.format in ("json", "csv"):
        # a new struct: StructType.add changes the one it is called on, which may be the caller's
        full = StructType([*full.fields, StructField(CORRUPT, StringType())])
    return reader.format(source.format).options(**options).schema(full)


def with_origin(df: DataFrame) -> DataFrame:
    return df.select(
        "*",
        F.col("_metadata.file_path").alias(SOURCE_FILE),
        F.col("_metadata.file_modification_time").alias(SOURCE_MTIME),
        F.col("_metadata.file_block_start").alias(SOURCE_BLOCK),
    )


def read_stream(spark: SparkSession, config: JobConfig) -> DataFrame:
    source = config.source
    if source.format == "generator":
        spark.dataSource.register(GeneratorDataSource)
        spec = GeneratorSpec(**source.generator.model_dump())
        return spark.readStream.format(GENERATOR).options(**{k: str(v) for k, v in asdict(spec).items()}).load()
    if source.format == "kafka":
        records = kafka_stream(spark, config)
        return change_records(records) if decodes_changes(source) else records
    if decodes_changes(source):
        return landed_lines(spark, source)
    reader: DataStreamReader = _configure(spark.readStream, spark, source)
    if source.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
    return with_origin(reader.load(source.path))


class KafkaValues:
    """Kafka values that are the rows themselves (JSON or Avro, no envelope), decoded by Spark a micro-batch at a
    time. The query streams the records as they came, and a micro-batch is decoded only where Spark reads it (its
    tasks, or values the driver leaves to Spark): Spark plans a query again for every micro-batch, and the decoding
    in the query's plan cost 20-30 ms a micro-batch to plan, for micro-batches the driver reads itself."""

    def __init__(self, spark: SparkSession, source: SourceSection, records: StructType):
        """``records``: the query's columns (Spark's Kafka columns)."""
        self.source = source
        self.row_schema = declared_schema(spark, source)
        self.schema = self.rows(spark.createDataFrame([], records)).schema  # the rows' columns, found once

    def rows(self, records: DataFrame) -> DataFrame:
        """``records`` decoded into the rows: their declared columns, then why a value did not decode, the raw
        record of one that did not, and where each came from."""
        decoded = decode_records(records, self.source, self.row_schema)
        return with_record_origin(plain_columns(decoded, self.row_schema))


def landed_lines(spark: SparkSession, source: SourceSection) -> DataFrame:
    """Landing files of change events, one JSON event a line (as Kafka Connect's file and S3 sinks write them),
    each line with where it was; the core decodes them (``changes.decoder.LINE_SCHEMA``). Blank lines are
    not events."""
    reader = spark.readStream.format("text").options(**source.options)
    if source.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
    lines = with_origin(reader.load(source.path))
    return lines.filter(F.trim(F.col("value")) != "").select("value", SOURCE_FILE, SOURCE_MTIME, SOURCE_BLOCK)


def _csv_header(path: str, source: SourceSection) -> list[str] | None:
    fileio = FileIO.for_uri(path)
    with fileio.open_input("") as f:
        head = f.read(1 << 16).decode("utf-8", errors="replace")
    sep = source.options.get("sep", source.options.get("delimiter", ","))
    rows = csv.reader(io.StringIO(head), delimiter=sep, quotechar=source.options.get("quote", '"'))
    return next(rows, None)


def read_file(spark: SparkSession, source: SourceSection, path: str) -> DataFrame:
    """One landing file as a batch DataFrame with the stream's columns.

    A CSV file whose header names the declared columns in another order is
    read in its own order, then put back in the declared one.
    """
    declared = declared_schema(spark, source)
    schema = declared
    if source.format == "csv" and source.options.get("header", "true") == "true":
        header = _csv_header(path, source)
        by_name = {f.name.lower(): f for f in declared.fields}
        if (
            header
            and sorted(h.strip().lower() for h in header) == sorted(by_name)
            and [h.strip().lower() for h in header] != list(by_name)
        ):
            schema = StructType([by_name[h.strip().lower()] for h in header])
    df = with_origin(_configure(spark.read, spark, source, schema).load(path))
    columns = [f.name for f in declared.fields] + ([CORRUPT] if source.format in ("json", "csv") else [])
    return df.select(*columns, SOURCE_FILE, SOURCE_MTIME, SOURCE_BLOCK)


def unreadable_files(spark: SparkSession, source: SourceSection, files: list[str]) -> tuple[list[str], dict[str, str]]:
    """(readable files, {unreadable file: why}) of one micro-batch, each file read on its own."""
    good, bad = [], {}
    for path in files:
        try:
            df = read_file(spark, source, path)
            # counting every column makes Spark decode every value of the file
            df.agg(*[F.count(F.col(c)) for c in df.columns]).collect()
            good.append(path)
        except Exception as exc:  # what Spark raises for an unreadable file varies by format
            bad[path] = _first_line(exc)
    return good, bad


_ERROR_CLASS = re.compile(r"(\[[A-Z][A-Z_]*(?:\.[A-Z_]+)*\][^\n]*)")


def _first_line(exc: Exception) -> str:
    """Spark's own error message (``[ERROR_CLASS] ...``), or the root cause, or the first line."""
    text = str(exc)
    found = _ERROR_CLASS.search(text)
    if found:
        return found.group(1).strip()[:500]
    causes = [line.split("Caused by:", 1)[1].strip() for line in text.splitlines() if "Caused by:" in line]
    return (causes[-1] if causes else text.strip().splitlines()[0] if text.strip() else type(exc).__name__)[:500]


def read_files(spark: SparkSession, source: SourceSection, paths: list[str]) -> DataFrame | None:
    frames = [read_file(spark, source, p) for p in paths]
    if not frames:
        return None
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
