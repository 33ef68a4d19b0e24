"""Streaming sources: a landing directory of JSON, CSV or parquet files, or the generator.

Rows of landing files carry where they came from (Spark's ``_metadata``:
file, modification time, block), which orders them by arrival. A landing
file that cannot be read under the declared schema is found by reading the
micro-batch's files one at a time (``unreadable_files``), so that it alone
goes to quarantine.
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
import re
import urllib.parse
from dataclasses import asdict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming import DataStreamReader
from pyspark.sql.types import StringType, StructField, StructType

from laketide.config import ConfigError, SourceSection
from laketide.table.io import FileEntry, FileIO
from laketide.writer.generator import ARROW_SCHEMA as GENERATOR_SCHEMA, NAME as GENERATOR, GeneratorDataSource, GeneratorSpec
from laketide.writer.prepare import CORRUPT, SOURCE_BLOCK, SOURCE_FILE, SOURCE_MTIME

# CSV as people write it (RFC 4180): a doubled quote inside a quoted field, newlines inside quotes,
# and a header naming the columns, which Spark checks against the schema instead of ignoring it.
CSV_DEFAULTS = {"header": "true", "escape": '"', "multiLine": "true", "enforceSchema": "false"}


def declared_schema(spark: SparkSession, source: SourceSection) -> StructType:
    if source.format == "generator":
        return from_arrow_schema(GENERATOR_SCHEMA)
    try:
        parsed = spark.createDataFrame([], source.schema_ddl).schema
    except Exception as exc:  # Spark's parse error names the position in the DDL
        raise ConfigError(f"source.schema is not valid Spark DDL: {str(exc).splitlines()[0]}") from None
    return parsed


def source_schema(spark: SparkSession, source: SourceSection) -> pa.Schema:
    """The source's columns as Arrow types (timestamps in UTC), for the checks at start."""
    return to_arrow_schema(declared_schema(spark, source), timezone="UTC")


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


def read_stream(spark: SparkSession, source: SourceSection) -> DataFrame:
    if source.format == "generator":
        spark.dataSource.register(GeneratorDataSource)
        spec = GeneratorSpec(**source.generator.model_dump())
        return spark.readStream.format(GENERATOR).options(**{k: str(v) for k, v in asdict(spec).items()}).load()
    reader: DataStreamReader = _configure(spark.readStream, spark, source)
    if source.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
    return with_origin(reader.load(source.path))


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
        if header and sorted(h.strip().lower() for h in header) == sorted(by_name) and [h.strip().lower() for h in header] != list(by_name):
            schema = StructType([by_name[h.strip().lower()] for h in header])
    df = with_origin(_configure(spark.read, spark, source, schema).load(path))
    columns = [f.name for f in declared.fields] + ([CORRUPT] if source.format in ("json", "csv") else [])
    return df.select(*columns, SOURCE_FILE, SOURCE_MTIME, SOURCE_BLOCK)


def _same_type(found: pa.DataType, declared: pa.DataType) -> bool:
    """Whether a parquet column reads as the declared type, a UTC timestamp being the same instant in any zone."""
    if pa.types.is_timestamp(found) and pa.types.is_timestamp(declared):
        return found.unit == declared.unit and (found.tz is None) == (declared.tz is None)
    return found == declared


def _read_as_declared(path: str, entry: FileEntry, declared: pa.Schema) -> pa.Table | None:
    with FileIO.for_uri(path).open_input("") as f:
        parquet = pq.ParquetFile(f)
        found = parquet.schema_arrow
        if not all(found.get_field_index(field.name) >= 0 and _same_type(found.field(field.name).type, field.type) for field in declared):
            return None
        rows = parquet.read(columns=declared.names).cast(declared)
    mtime = pa.scalar(entry.mtime_ns // 1000, pa.timestamp("us", tz="UTC"))
    n = rows.num_rows
    return (
        # one value per file: dictionary-encoded, so that the rows share it
        rows.append_column(SOURCE_FILE, pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([path], pa.string())))
        .append_column(SOURCE_MTIME, pa.repeat(mtime, n))
        .append_column(SOURCE_BLOCK, pa.array(np.zeros(n, np.int64)))
    )


def decoded_bytes(path: str, entry: FileEntry, source_format: str) -> int:
    """What a landing file weighs once read into memory: a parquet file its footer's uncompressed size
    (its row groups' ``total_byte_size``), a JSON or CSV file its text (Arrow holds its values in no more).
    A parquet footer that cannot be read counts as too heavy, so Spark's tasks meet (and quarantine) the file."""
    if source_format != "parquet":
        return entry.size
    try:
        with FileIO.for_uri(path).open_input("") as f:
            meta = pq.read_metadata(f)
    except (OSError, pa.ArrowException):
        return 1 << 62
    return max(entry.size, sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)))


def read_landed_parquet(files: dict[str, FileEntry], declared: pa.Schema) -> pa.Table | None:
    """Parquet landing files (their entries, by path) read straight into Arrow, as Spark reads them
    under the declared schema, with the columns of their origin (file, modification time, block).

    Only when every file holds every declared column under exactly its type: then there is
    nothing to convert and nothing to decide. Otherwise ``None``, and Spark reads them, with
    its rules for missing columns, other types and unreadable files.
    """
    tables = []
    try:
        for path, entry in files.items():
            rows = _read_as_declared(path, entry, declared)
            if rows is None:
                return None
            tables.append(rows)
    except (OSError, pa.ArrowException):
        return None  # Spark reads it again and tells which file is unreadable
    return pa.concat_tables(tables) if tables else None


def _log_entries(fileio: FileIO, name: str) -> list[dict]:
    lines = fileio.read_text(name).splitlines()[1:]  # the first line is the log's version, "v1"
    return [json.loads(line) for line in lines if line.strip()]


def _log_offset(fileio: FileIO, batch_id: int) -> int:
    if batch_id < 0 or not fileio.exists(f"offsets/{batch_id}"):
        return -1
    return int(json.loads(fileio.read_text(f"offsets/{batch_id}").splitlines()[-1])["logOffset"])


def batch_files(checkpoint: str, batch_id: int) -> list[str]:
    """The landing files of one micro-batch, from the file source's log in the Spark checkpoint.

    ``foreachBatch`` gets an already planned batch, so reading only its file
    column still decodes every column; the log names the files without reading them.
    """
    fileio = FileIO.for_uri(checkpoint)
    first, last = _log_offset(fileio, batch_id - 1) + 1, _log_offset(fileio, batch_id)
    logged = {e.name for e in fileio.list_dir("sources/0") if not e.name.startswith(".")}
    entries: list[dict] = []
    read_compacts: set[str] = set()
    for n in range(first, last + 1):
        if str(n) in logged:
            entries += _log_entries(fileio, f"sources/0/{n}")
            continue
        compacts = sorted((int(k.split(".")[0]), k) for k in logged if k.endswith(".compact") and int(k.split(".")[0]) >= n)
        if compacts and compacts[0][1] not in read_compacts:
            read_compacts.add(compacts[0][1])
            entries += _log_entries(fileio, f"sources/0/{compacts[0][1]}")
    return sorted({e["path"] for e in entries if first <= e["batchId"] <= last})


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


def copy_aside(files: dict[str, str] | list[str], target: str) -> None:
    """Copy landing files into ``target`` (the originals stay, so a replayed batch reads them again)."""
    out = FileIO.for_uri(target)
    for path in files:
        name = posixpath.basename(urllib.parse.unquote(path))
        out.write_atomic(name, FileIO.for_uri(path).read_bytes(""), overwrite=True)


def read_files(spark: SparkSession, source: SourceSection, paths: list[str]) -> DataFrame | None:
    frames = [read_file(spark, source, p) for p in paths]
    if not frames:
        return None
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
