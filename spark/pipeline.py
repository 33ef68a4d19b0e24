"""The streaming query's ``foreachBatch``: read each micro-batch, then write it through the Spark-free core.

``MicroBatchWriter`` runs on the driver. It reads a micro-batch that fits the driver
(``write.driver_batch_bytes``) into a ``DriverBatch``, and any other into a ``SparkBatch``, whose
stages run in Spark's tasks; ``writer.batch_writer.BatchWriter`` then begins, writes and commits
it the same way for both.
"""

from __future__ import annotations

import logging

import pyarrow as pa
from laketide.coordinator import Coordinator
from laketide.index.columns import LANDED_COLUMNS, PREPARED_FIELDS
from laketide.index.state import StateIndex
from laketide.spark.sources import read_files, unreadable_files
from laketide.spark.spark_batch import Shuffles, SparkBatch
from laketide.spark.stage_clock import StageClock
from laketide.table import Table
from laketide.table.io import FileEntry, FileIO
from laketide.writer.batch_writer import BatchWriter, LoadedBatch
from laketide.writer.driver_batch import DriverBatch
from laketide.writer.landing import batch_files, decoded_bytes, kafka_records, read_landed_parquet, source_offsets
from laketide.writer.prepare import ArrivalCounter, prepare
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructField, StructType

from laketide.config import JobConfig
from laketide.spark.change_feed import kafka_client

log = logging.getLogger("laketide.job")
# what a generated row weighs in a landing file, for ``write.driver_batch_bytes``
GENERATED_ROW_BYTES = 64
# what a Kafka record is taken to weigh once decoded, for the driver-or-tasks choice: a change event's row
KAFKA_RECORD_BYTES = 1024


def _data_fields(df: DataFrame) -> list[StructField]:
    """The micro-batch's record columns, without the columns a source adds to every row."""
    return [f for f in df.schema.fields if f.name not in LANDED_COLUMNS]


class MicroBatchWriter(BatchWriter):
    """The ``foreachBatch`` function of the streaming query."""

    def __init__(self, spark: SparkSession, config: JobConfig, table: Table, coordinator: Coordinator, index: StateIndex, quarantine_path: str, **hooks):
        """``hooks``: ``on_step``, ``after_commit``, ``views`` and ``failures``, as ``BatchWriter`` takes them."""
        super().__init__(config, table, coordinator, index, quarantine_path, StageClock(spark.sparkContext), **hooks)
        self.spark = spark
        self.timezone = spark.conf.get("spark.sql.session.timeZone")
        # the error that failed a micro-batch, as raised here: Spark hands the query's waiter only its text
        self.failure: BaseException | None = None
        self._brokers = None  # a Kafka source's client for the lag, made at the first micro-batch
        self.shuffles = Shuffles(index.shards, config.write.parallelism, self.operation == "bulk_insert", index.global_keys, table.config.ordering_field)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        # a service that failed too often in the background stops the job before it writes more
        self.failures.raise_if_fatal()
        try:
            with self.batch_lock:
                report = self.run(batch_id, lambda: self._read(df, batch_id))
        except BaseException as failure:
            self.failure = failure
            raise
        if self.config.source.format == "kafka" and not report.skipped:
            report.lag = self._lag(batch_id)
        self.announce(report)

    def _lag(self, batch_id: int) -> dict[str, int]:
        """Per topic-partition, the brokers' newest offset minus the micro-batch's end: 0 once it caught up.
        Only for reporting: a failure to ask is logged, and the lag left out."""
        from laketide.spark.kafka_source import Brokers

        try:
            end = source_offsets(self.config.stream.checkpoint, batch_id, self.config.storage.io_options) or {}
            if self._brokers is None:
                self._brokers = Brokers(kafka_client(self.config.source.kafka))
            marks = self._brokers.watermarks([(t, int(p)) for t, parts in end.items() for p in parts])
            lag = {f"{t}/{p}": max(0, marks[(t, int(p))][1] - int(o)) for t, parts in end.items() for p, o in parts.items()}
        except Exception:
            log.warning("micro-batch %s: the Kafka lag could not be read", batch_id, exc_info=True)
            return {}
        for place, n in lag.items():
            self.metrics.source_lag.labels(*place.rsplit("/", 1)).set(n)
        return lag

    def close(self) -> None:
        if self._brokers is not None:
            self._brokers.close()
        super().close()

    def _prepared(self, df: DataFrame) -> SparkBatch:
        spec = self.spec
        data_fields = _data_fields(df)
        prepared_struct = StructType(data_fields + list(from_arrow_schema(pa.schema(PREPARED_FIELDS)).fields))

        def prepare_task(batches):
            from pyspark import TaskContext

            arrival = ArrivalCounter(TaskContext.get().partitionId() << 40)
            for b in batches:
                yield from prepare(pa.Table.from_batches([b]), spec, arrival).to_batches()

        prepared = df.mapInArrow(self.clock.timed("prepare", prepare_task), prepared_struct)
        return SparkBatch(self.shuffles.distributed(prepared), self.shuffles, self.clock)

    def _read(self, df: DataFrame, batch_id: int) -> LoadedBatch:
        """The prepared rows of the micro-batch, the columns of its records, and the landing files set aside.

        A micro-batch that fits the driver is collected and prepared there; any other is
        shuffled and materialized once on the executors. When Spark cannot read the
        micro-batch, its files are read one by one and the unreadable ones set aside.
        """
        data_fields = _data_fields(df)
        records = StructType(data_fields)
        incoming, data_schema = to_arrow_schema(records, timezone="UTC"), to_arrow_schema(records, timezone=self.timezone)
        batch = self._collect(df, batch_id, data_schema)
        if batch is not None:
            return LoadedBatch(batch, incoming, data_schema)
        try:
            return LoadedBatch(self._prepared(df), incoming, data_schema)
        except Exception as failure:
            if self.config.source.format in ("generator", "kafka"):  # no landing files to set aside
                raise
            # a failure because the job is being stopped is not about the files
            self.coordinator.lease.check()
            readable, bad = self._without_unreadable_files(df, batch_id, failure)
        return LoadedBatch(self._prepared(readable), incoming, data_schema, bad)

    def _landing_files(self, batch_id: int) -> dict[str, FileEntry] | None:
        """The micro-batch's landing files (size and modification time, by path) if, decoded, they total
        at most ``write.driver_batch_bytes`` (``decoded_bytes``: parquet by its footers' uncompressed sizes)."""
        source_format = self.config.source.format
        try:
            options = self.config.storage.io_options
            files = {path: FileIO.for_uri(path, options).entry("") for path in batch_files(self.config.stream.checkpoint, batch_id, options)}
            decoded = sum(decoded_bytes(path, entry, source_format) for path, entry in files.items())
        except Exception:
            log.warning("micro-batch %s: the size of its landing files is unknown, so Spark's tasks write it", batch_id, exc_info=True)
            return None
        return files if decoded <= self.config.write.driver_batch_bytes else None

    def _collect(self, df: DataFrame, batch_id: int, data_schema: pa.Schema) -> DriverBatch | None:
        """The micro-batch as one Arrow table in the driver, prepared; ``None`` when it is too large for
        the driver (``write.driver_batch_bytes``) or Spark cannot read it.

        Parquet landing files of exactly the declared types are read straight from storage; any
        other input is collected from Spark, which reads it under its own rules.
        """
        source = self.config.source
        if not self.config.write.driver_batch_bytes:
            return None
        if source.format == "generator":
            if source.generator.rows_per_batch * GENERATED_ROW_BYTES > self.config.write.driver_batch_bytes:
                return None
            landed = df.toArrow()
        elif source.format == "kafka":
            records = kafka_records(self.config.stream.checkpoint, batch_id, self.config.storage.io_options)
            if records is None or records * KAFKA_RECORD_BYTES > self.config.write.driver_batch_bytes:
                return None
            landed = df.toArrow()
        else:
            files = self._landing_files(batch_id)
            if files is None:
                return None
            landed = None
            if source.format == "parquet":
                landed = read_landed_parquet(files, data_schema)
            if landed is None:
                try:
                    landed = df.toArrow()
                except Exception:
                    self.coordinator.lease.check()
                    log.warning("micro-batch %s could not be collected; Spark's tasks read it file by file", batch_id)
                    return None
        return DriverBatch.prepare(landed, self.spec, self.driver_pool, self.clock.timed)

    def _without_unreadable_files(self, df: DataFrame, batch_id: int, failure: Exception) -> tuple[DataFrame, dict[str, str]]:
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
        readable = read_files(self.spark, self.config.source, good, self.config.table.record_key)
        return (readable if readable is not None else self.spark.createDataFrame([], df.schema)), bad

