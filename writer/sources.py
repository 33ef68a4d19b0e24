"""Streaming sources: a landing directory of JSON, CSV or parquet files, or the generator."""

from __future__ import annotations

from dataclasses import asdict

from pyspark.sql import DataFrame, SparkSession

from laketide.config import SourceSection
from laketide.writer.generator import NAME as GENERATOR, GeneratorDataSource, GeneratorSpec
from laketide.writer.prepare import CORRUPT


def read_stream(spark: SparkSession, source: SourceSection) -> DataFrame:
    if source.format == "generator":
        spark.dataSource.register(GeneratorDataSource)
        spec = GeneratorSpec(**source.generator.model_dump())
        return spark.readStream.format(GENERATOR).options(**{k: str(v) for k, v in asdict(spec).items()}).load()
    reader = spark.readStream.format(source.format)
    if source.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
    schema = source.schema_ddl
    if source.format in ("json", "csv"):
        # Malformed records are kept whole in this column and sent to quarantine.
        schema = f"{schema}, {CORRUPT} STRING"
        reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
    if source.format == "csv":
        reader = reader.option("header", "true")
    return reader.schema(schema).load(source.path)
