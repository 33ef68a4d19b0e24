"""The streaming query's ``foreachBatch`` (``MicroBatches``): read each micro-batch, then hand it to the Spark-free
core's ``BatchWriter``, which begins, writes and commits it.

``MicroBatchReader`` runs on the driver. It reads a micro-batch that fits the driver (``write.driver_batch_bytes``)
into a ``DriverBatch``, and any other into a ``SparkBatch``, whose stages run in Spark's tasks (``spark_batch``).
"""

from __future__ import annotations

import json
import logging
import posixpath
from collections.abc import Callable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

from laketide.index.columns import LANDED_COLUMNS
from laketide.spark.generator import FIRST_ROW, GeneratorSpec, generated
from laketide.spark.handoff import Layout
from laketide.spark.kafka.offsets import KafkaOffsets
from laketide.spark.session import driver_heap_bytes, on_one_machine
from laketide.spark.sources import (
    KafkaValues,
    change_decoder,
    decodes_changes,
    generated_fits_driver,
    read_files,
    unreadable_files,
)
from laketide.spark.spark_batch import SparkBatch, prepare_pieces, prepare_records
from laketide.table.storage.io import FileEntry, FileIO
from laketide.writer.batch_writer import BatchWriter
from laketide.writer.changes.decoder import ChangeDecoder
from laketide.writer.changes.kafka_values import plain_rows
from laketide.writer.changes.schema_registry import schema_ids
from laketide.writer.changes.tally import Tally
from laketide.writer.driver_batch import DriverBatch
from laketide.writer.exchange import Exchange
from laketide.writer.landing import (
    Piece,
    batch_files,
    decoded_bytes,
    parquet_pieces,
    read_landed_lines,
    read_landed_parquet,
    source_offsets,
)
from laketide.writer.micro_batch import LoadedBatch

log = logging.getLogger("laketide.job")
# the sources that read landing files
LANDING_FORMATS = ("parquet", "json", "csv")
# where Spark's tasks hand a micro-batch's rows on, under the table, unless ``write.exchange_dir`` says
EXCHANGE_DIR = ".hoodie/.laketide/exchange"
# landing text that Spark reads and the driver collects (``df.toArrow()``) may weigh this share of the driver's JVM
# heap at most: the JVM holds several times the text (235 MB of JSON lines ran a 1 GB heap out, 120 MB did not)
JVM_TEXT_SHARE = 10


def _data_fields(schema: StructType) -> list[StructField]:
    """The micro-batch's record columns, without the columns a source adds to every row."""
    return [f for f in schema.fields if f.name not in LANDED_COLUMNS]


class MicroBatches:
    """The ``foreachBatch`` function of the streaming query: each micro-batch read by ``MicroBatchReader`` and handed
    to the job's writer, under its batch lock."""

    def __init__(self, spark: SparkSession, writer: BatchWriter):
        self.writer = writer
        self.reader = MicroBatchReader(spark, writer)
        # the error that failed a micro-batch, as raised here: Spark hands the query's waiter only its text
        self.failure: BaseException | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        writer = self.writer
        try:
            report = writer.write(batch_id, lambda: self.reader.read(df, batch_id))
        except BaseException as failure:
            self.failure = failure
            raise
        if writer.config.source.format == "kafka" and not report.skipped:
            report.lag = self._lag(batch_id)
        writer.announce(report)

    def _lag(self, batch_id: int) -> dict[str, int]:
        """Per topic-partition, the brokers' newest offset minus the micro-batch's end: 0 once it caught up.
        Only for reporting: a failure to ask is logged, and the lag left out."""
        lag = self.reader.offsets.lag(batch_id)
        for place, n in lag.items():
            self.writer.metrics.source_lag.labels(*place.rsplit("/", 1)).set(n)
        return lag

    def close(self) -> None:
        self.reader.close()


class MicroBatchReader:
    """Reads each micro-batch for ``writer`` (its table, its prepare settings, its driver's threads, its clock): on
    the driver when it fits (``write.driver_batch_bytes``), else in Spark's tasks."""

    def __init__(self, spark: SparkSession, writer: BatchWriter):
        config = writer.config
        self.spark, self.config, self.writer = spark, config, writer
        self.timezone = spark.conf.get("spark.sql.session.timeZone")
        # what a micro-batch may weigh for the driver to write it (``write.driver_batch_bytes``, by Spark's master)
        self.driver_limit = config.write.driver_limit(local=on_one_machine(spark))
        # what landing text collected through the driver's JVM may weigh
        self.jvm_text_limit = min(self.driver_limit, driver_heap_bytes(spark) // JVM_TEXT_SHARE)
        self.offsets = KafkaOffsets(config)  # a Kafka source's lag, and its first micro-batch's size
        self.exchange_dir = config.write.exchange_dir or posixpath.join(config.table.path.rstrip("/"), EXCHANGE_DIR)
        # what a crash left in the exchange: no other writer holds the table's lease meanwhile
        exchange = Exchange(self.exchange_dir, config.storage.io_options)
        exchange.delete()
        self.exchange_on_disk = exchange.on_disk
        self._had_slices = False  # once the table had a file slice, micro-batches are not laid out for a bulk insert
        # a change feed the core decodes (Debezium's JSON from Kafka); its columns are source.schema's, or the events'
        self.changes = change_decoder(spark, config, writer.table) if decodes_changes(config.source) else None
        self._values: KafkaValues | None = None  # Kafka values that are rows: decoded by Spark where it reads them

    def close(self) -> None:
        self.offsets.close()

    def _fits_driver(self, weight: int | None) -> bool:
        """Whether a micro-batch of ``weight`` bytes once decoded (``None``: unknown) is for the driver
        (``write.driver_batch_bytes``)."""
        return bool(self.driver_limit) and weight is not None and weight <= self.driver_limit

    def _kafka_fits_driver(self, batch_id: int) -> bool:
        """Whether a Kafka micro-batch is small enough for the driver (``write.driver_batch_bytes``), by its offsets."""
        if not self.driver_limit:
            return False
        records = self.offsets.records(batch_id)
        return self._fits_driver(records * self.offsets.record_weight() if records is not None else None)

    def _prepared(
        self,
        df: DataFrame,
        batch_id: int,
        pieces: list[Piece] | None = None,
        declared: pa.Schema | None = None,
        decode: Callable[[pa.Table], tuple[pa.Table, Tally]] | None = None,
    ) -> SparkBatch:
        """The micro-batch prepared in Spark's tasks and handed on through its exchange: from Spark's rows of ``df``
        (``decode``: what turns them into the micro-batch's rows), or from ``pieces`` of parquet landing files."""
        writer, options = self.writer, self.config.storage.io_options
        exchange = Exchange.for_batch(self.exchange_dir, batch_id, options)
        layout = Layout.WHOLE if self._bulk_inserted() else Layout.ROUTING if self.exchange_on_disk else Layout.SHARDS
        clock = writer.clock
        try:
            if pieces is None:
                prepared = prepare_records(df, writer.spec, exchange, layout, clock, decode)
            else:
                prepared = prepare_pieces(self.spark, pieces, writer.spec, declared, exchange, layout, clock, options)
        except BaseException:
            exchange.delete()
            raise
        return SparkBatch(
            self.spark, prepared, exchange, layout, writer.index.shards, self.config.write.parallelism, clock
        )

    def _bulk_inserted(self) -> bool:
        """Whether the micro-batch will likely be bulk inserted: under ``bulk_insert``, or an upsert into a table
        with no file slice (``plan.table_empty``), the first micro-batch of a new table. Its rows are then
        handed on whole, with no routing columns and not by shard; should another writer fill the table
        before the plan, they are cut by shard then."""
        operation = self.writer.operation
        if operation == "bulk_insert":
            return True
        if operation != "upsert" or self._had_slices:
            return False
        self._had_slices = bool(self.writer.views.view().latest_slices())
        return not self._had_slices

    def read(self, df: DataFrame, batch_id: int) -> LoadedBatch:
        """The prepared rows of the micro-batch, the columns of its records, and the landing files set aside.

        A micro-batch that fits the driver is collected and prepared there; any other is
        prepared by Spark's tasks, which hand it on through files (``writer.exchange``). When Spark cannot read the
        micro-batch, its files are read one by one and the unreadable ones set aside.
        """
        if self.changes is not None:
            return self._read_changes(df, batch_id, self.changes)
        values = self._kafka_values(df)
        records = StructType(_data_fields(values.schema if values is not None else df.schema))
        incoming, data_schema = (
            to_arrow_schema(records, timezone="UTC"),
            to_arrow_schema(records, timezone=self.timezone),
        )
        files = self._landing_files(batch_id) if self.config.source.format in LANDING_FORMATS else None
        batch = self._collect(df, batch_id, data_schema, files)
        if batch is not None:
            return LoadedBatch(batch, incoming, data_schema)
        try:
            pieces = (
                parquet_pieces(
                    files[0], data_schema, self.spark.sparkContext.defaultParallelism, self.config.storage.io_options
                )
                if files and self.config.source.format == "parquet"
                else None
            )
            rows = values.rows(df) if values is not None else df
            return LoadedBatch(self._prepared(rows, batch_id, pieces, data_schema), incoming, data_schema)
        except Exception as failure:
            if self.config.source.format not in LANDING_FORMATS:  # no landing files to set aside
                raise
            # a failure because the job is being stopped is not about the files
            self.writer.coordinator.lease.check()
            readable, bad = self._without_unreadable_files(df, batch_id, failure)
        return LoadedBatch(self._prepared(readable, batch_id), incoming, data_schema, bad)

    def _kafka_values(self, records: DataFrame) -> KafkaValues | None:
        """How a Kafka source's values become rows (the query streams its records as they came), found at the
        first micro-batch; ``None`` for any other source."""
        if self.config.source.format != "kafka":
            return None
        if self._values is None:
            self._values = KafkaValues(self.spark, self.config.source, records.schema)
        return self._values

    def _read_changes(self, df: DataFrame, batch_id: int, changes: ChangeDecoder) -> LoadedBatch:
        """A change feed's micro-batch (Kafka records, ``change_feed.change_records``, or landing lines,
        ``sources.landed_lines``), decoded by the core into the columns found for the whole micro-batch: on the
        driver when it fits, else in Spark's prepare tasks."""
        if self.config.source.format != "kafka":
            lines = self._landed_lines(df, batch_id)
            if lines is not None:
                return self.writer.decoded_batch(changes, lines)
        elif self._kafka_fits_driver(batch_id):
            records = self.offsets.read(batch_id)
            records = records.select(df.columns) if records is not None else df.toArrow()
            return self.writer.decoded_batch(changes, records)
        return self.changes_on_tasks(df, batch_id, changes)

    def _landed_lines(self, df: DataFrame, batch_id: int) -> pa.Table | None:
        """A micro-batch of landing lines for the driver: read from its files (``landing.read_landed_lines``), else
        collected from Spark's text source when that fits the driver's JVM; ``None`` for Spark's tasks."""
        files = self._landing_files(batch_id)
        if files is None or not self._fits_driver(files[1]):
            return None
        lines = read_landed_lines(files[0], self.config.source.options, self.config.storage.io_options)
        if lines is not None:
            return lines
        return df.toArrow() if self._text_fits_jvm(files[1]) else None

    def _text_fits_jvm(self, weight: int) -> bool:
        """Whether landing text of ``weight`` bytes that Spark reads may be collected through the driver's JVM."""
        return weight <= self.jvm_text_limit

    def changes_on_tasks(self, df: DataFrame, batch_id: int, changes: ChangeDecoder) -> LoadedBatch:
        """A change feed's micro-batch (Spark's rows of Kafka records or landing lines) decoded and prepared by Spark's
        tasks, into the columns its events' schemas and the table's give."""
        columns = changes.columns_for(lambda: self._row_schemas(df, changes), self.writer.table)
        log = self.writer.source_table.feed_log()  # handed to the tasks with the decoder
        batch = self._prepared(df, batch_id, decode=lambda records: changes.rows(records, columns, log=log))
        incoming = changes.incoming(columns)
        return LoadedBatch(batch, incoming, incoming)

    def _row_schemas(self, df: DataFrame, changes: ChangeDecoder) -> list[list[dict]]:
        """The distinct row schemas of a micro-batch's change events, found by Spark's tasks."""
        avro = changes.avro
        if avro is not None:
            # the tasks find the values' schema ids; the driver looks them up, before the tasks get the decoder
            def ids(batches):
                found = set().union(*(schema_ids(batch.column("value")) for batch in batches))
                yield pa.RecordBatch.from_pylist([{"id": i} for i in found], schema=pa.schema([("id", pa.int64())]))

            return avro.row_schemas({row["id"] for row in df.mapInArrow(ids, "id long").distinct().collect()})

        def found(batches):
            seen = {
                json.dumps(columns, sort_keys=True)
                for batch in batches
                for columns in changes.schemas(pa.Table.from_batches([batch]))
            }
            yield pa.RecordBatch.from_pylist(
                [{"schema": text} for text in sorted(seen)], schema=pa.schema([("schema", pa.string())])
            )

        return [json.loads(row["schema"]) for row in df.mapInArrow(found, "schema string").distinct().collect()]

    def _landing_files(self, batch_id: int) -> tuple[dict[str, FileEntry], int] | None:
        """The micro-batch's landing files (size and modification time, by path) and what they weigh decoded
        (``decoded_bytes``: parquet by its footers' uncompressed sizes); ``None`` when that is unknown."""
        source_format = self.config.source.format
        try:
            options = self.config.storage.io_options
            files = {
                path: FileIO.for_uri(path, options).entry("")
                for path in batch_files(self.config.stream.checkpoint, batch_id, options)
            }
            return files, sum(decoded_bytes(path, entry, source_format, options) for path, entry in files.items())
        except Exception:
            log.warning(
                "micro-batch %s: the size of its landing files is unknown, so Spark's tasks write it",
                batch_id,
                exc_info=True,
            )
            return None

    def _collect(
        self, df: DataFrame, batch_id: int, data_schema: pa.Schema, files: tuple[dict[str, FileEntry], int] | None
    ) -> DriverBatch | None:
        """The micro-batch as one Arrow table in the driver, prepared; ``None`` when it is too large for
        the driver (``write.driver_batch_bytes``) or Spark cannot read it.

        Parquet landing files (``files``, with their decoded weight) of exactly the declared types are
        read straight from storage; any other input is collected from Spark, which reads it under its own rules.
        """
        source = self.config.source
        if not self.driver_limit:
            return None
        if source.format == "generator":
            if not generated_fits_driver(self.config, self.driver_limit):
                return None
            landed = self._generated(df, batch_id)
        elif source.format == "kafka":
            if not self._kafka_fits_driver(batch_id):
                return None
            values = self._kafka_values(df)
            assert values is not None, "a Kafka source's values are decoded here"
            landed = self._kafka_rows(df, batch_id, values)
        else:
            if files is None or not self._fits_driver(files[1]):
                return None
            options = self.config.storage.io_options
            read = read_landed_parquet(files[0], data_schema, options) if source.format == "parquet" else None
            if read is not None:
                rows, arrival = read
                return self.writer.driver_batch(rows, arrival)
            if source.format != "parquet" and not self._text_fits_jvm(files[1]):
                return None  # Spark's JSON or CSV reader collected through the driver's JVM would run it out
            try:
                landed = df.toArrow()
            except Exception:
                self.writer.coordinator.lease.check()
                log.warning("micro-batch %s could not be collected; Spark's tasks read it file by file", batch_id)
                return None
        return self.writer.driver_batch(landed)

    def _generated(self, df: DataFrame, batch_id: int) -> pa.Table:
        """A generator micro-batch's rows, made on the driver from its offsets in the offset log (the query's first
        starts at ``FIRST_ROW``), so no Spark job and no Python worker reads them; collected from the query's scan
        when the log does not hold them."""
        checkpoint, options = self.config.stream.checkpoint, self.config.storage.io_options
        end = source_offsets(checkpoint, batch_id, options)
        start = {"row": FIRST_ROW} if batch_id == 0 else source_offsets(checkpoint, batch_id - 1, options)
        if end is None or start is None:
            return df.toArrow()
        return generated(GeneratorSpec(**self.config.source.generator.model_dump()), start["row"], end["row"])

    def _kafka_rows(self, df: DataFrame, batch_id: int, values: KafkaValues) -> pa.Table:
        """A Kafka micro-batch's rows for the driver: read there when the offset log gives its range and its values are
        JSON (``kafka.offsets``), and decoded there where the driver decodes them as Spark would
        (``writer.kafka_values``), else by Spark from the records read; without a range or JSON, collected from the
        query's scan of ``df``'s records, decoded by Spark."""
        records = self.offsets.read(batch_id) if self.config.source.value_format == "json" else None
        if records is None:
            return values.rows(df).toArrow()
        rows = plain_rows(records, schema=to_arrow_schema(values.schema, timezone=self.timezone))
        if rows is not None:
            return rows
        # Spark decodes the records the driver read, not the query's scan, whose tasks would fetch them again
        return values.rows(self.spark.createDataFrame(records.select(df.columns))).toArrow()

    def _without_unreadable_files(
        self, df: DataFrame, batch_id: int, failure: Exception
    ) -> tuple[DataFrame, dict[str, str]]:
        """The micro-batch read again file by file, leaving out the files Spark cannot read.

        Files that read fine on their own (a CSV header in another order) are
        kept; a failure that has nothing to do with the files fails again.
        """
        try:
            files = batch_files(self.config.stream.checkpoint, batch_id, self.config.storage.io_options)
            good, bad = unreadable_files(self.spark, self.config.source, files)
        except Exception:
            log.exception("could not tell which landing files of micro-batch %s are unreadable", batch_id)
            raise failure from None
        if bad:
            log.warning("landing files Spark cannot read under source.schema: %s", bad)
        readable = read_files(self.spark, self.config.source, good)
        return (readable if readable is not None else self.spark.createDataFrame([], df.schema)), bad
