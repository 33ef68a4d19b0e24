"""The streaming job of a whole database: one query over every matched topic, each micro-batch split by
source table into the tables' own instants (``writer.database``).

Threads: as a single-table job's (``spark/job.py``), with one writer per table: the stream thread runs
``Database.write``, which writes the tables one after another; each table's services run in the background,
at most ``database.services_at_once`` tables' at a time; the main thread waits for the query and stops it
when a table's lease is lost, a table's service failed too often, or a stop was asked for.
"""

from __future__ import annotations

import faulthandler
import logging
import threading
import time
from collections.abc import Callable

from laketide.config import JobConfig
from laketide.config.routes import TableRoutes
from laketide.coordinator import LeaseLost
from laketide.spark.change_feed import kafka_stream
from laketide.spark.database_tasks import RECORD_COLUMNS, DatabaseTasks
from laketide.spark.kafka.offsets import KafkaOffsets
from laketide.spark.query import await_query, start_query, writer_id_for
from laketide.spark.session import on_one_machine, spark_session
from laketide.spark.sources import change_decoder, source_schema
from laketide.spark.stage_clock import StageClock
from laketide.spark.workers import warm_workers
from laketide.table.errors import LaketideError
from laketide.writer.job.database import Database, DatabaseReport, TableParts

log = logging.getLogger("laketide.job")


def run_database(
    config: JobConfig,
    on_step: Callable[[str, int], None] | None = None,
    on_ready: Callable[[Database], None] | None = None,
) -> Database:
    """Run the job of a whole database until its trigger ends it (available-now) or it is stopped."""
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)
    TableRoutes(config)  # a template or source the job cannot run is refused before Spark starts
    spark = spark_session(config.spark, checkpoint=config.stream.checkpoint)
    spark.sparkContext.setLogLevel("WARN")
    threading.Thread(target=warm_workers, args=(spark,), name="laketide-warm-up", daemon=True).start()
    writer_id = writer_id_for(config.stream.checkpoint, config.storage.io_options)
    parts = TableParts(
        declared=lambda settings: source_schema(spark, settings.source),
        decoder=lambda settings, table: change_decoder(spark, settings, table),
        clock=lambda: StageClock(spark.sparkContext),
    )
    database = Database(config, writer_id, parts, job_id=f"{config.stream.query_name}-{writer_id[:8]}", on_step=on_step)
    offsets = KafkaOffsets(config)
    tasks = DatabaseTasks(spark, database)
    driver_limit = config.write.driver_limit(local=on_one_machine(spark))
    database.observers.append(lambda report: _report_lag(database, offsets, report))
    try:
        if on_ready is not None:
            on_ready(database)
        query = start_query(
            config,
            kafka_stream(spark, config).select(*RECORD_COLUMNS),
            lambda df, batch_id: _write(database, offsets, tasks, driver_limit, df, batch_id),
        )
        stopped = _await(query, database)
        database.finish(ended_by_itself=config.stream.trigger == "available-now" and not stopped)
    except BaseException as failure:
        database.close(failure)
        raise
    finally:
        offsets.close()
        tasks.close()
    database.close()
    return database


def _write(
    database: Database, offsets: KafkaOffsets, tasks: DatabaseTasks, driver_limit: int, df, batch_id: int
) -> None:
    """One micro-batch: its records read on the driver (Arrow; the query's first collected from its scan, whose
    start the offset log does not hold), then written into their tables; one too big for the driver
    (``write.driver_batch_bytes``, by its offsets) is split and written by Spark's tasks."""
    started = time.monotonic()
    if _on_tasks(database.config, offsets, driver_limit, batch_id):
        spanned = offsets.records(batch_id)
        log.info("micro-batch %s: %s offsets, written by Spark's tasks", batch_id, spanned or "unknown")
        split = tasks.split(df, batch_id)
        try:
            database.write_split(batch_id, lambda: split)
        finally:
            split.close()
        return
    records = offsets.read(batch_id)
    records = records.select(RECORD_COLUMNS) if records is not None else df.toArrow()
    database.write(batch_id, records, time.monotonic() - started)


def _on_tasks(config: JobConfig, offsets: KafkaOffsets, driver_limit: int, batch_id: int) -> bool:
    """Whether Spark's tasks write micro-batch ``batch_id``: always under ``write.driver_batch_bytes = 0``; else one
    that spans more offsets than the job's default cap (``JobConfig.kafka_offsets_per_trigger`` unset, what bounds
    the driver's memory) and weighs more than the driver takes. A micro-batch within that cap stays the driver's
    whatever its records weigh: there a 65,520-event micro-batch of 2 KB events took 4 s, and 60-88 s on the
    tasks, where each of 20 tables runs Spark jobs of its own."""
    if not driver_limit:
        return True
    spanned = offsets.records(batch_id)
    if spanned is None:  # the query's first under ``latest``: collected from its scan, as always
        return False
    return spanned > config.driver_kafka_offsets() and spanned * offsets.record_weight() > driver_limit


def _report_lag(database: Database, offsets: KafkaOffsets, report: DatabaseReport) -> None:
    """Each table's lag: the lag of the topics its events came from."""
    written = [r for r in report.tables if not r.skipped]
    if not written:
        return
    lag = offsets.lag(report.batch_id)
    for table_report in written:
        if table_report.table is None:  # every table's report names its table
            continue
        topics = database.topics_of(table_report.table)
        table_report.lag = {place: n for place, n in lag.items() if place.rsplit("/", 1)[0] in topics}
        metrics = database.tables[table_report.table].job.coordinator.metrics
        for place, n in table_report.lag.items():
            metrics.source_lag.labels(*place.rsplit("/", 1)).set(n)


def _await(query, database: Database) -> bool:
    def watch() -> None:
        if database.lost.is_set():
            query.stop()
            raise _lost(database)
        for table in database.tables.values():
            if table.job.services.failures.fatal is not None:
                query.stop()
                table.job.services.failures.raise_if_fatal()

    def failed(failure: Exception) -> BaseException | None:
        if "LeaseLost" in str(failure) or database.lost.is_set():
            return _lost(database)
        if isinstance(database.failure, LaketideError):
            return database.failure  # as raised, so its kind gives the exit code
        return None

    return await_query(query, watch, database.stop_requested, failed)


def _lost(database: Database) -> LeaseLost:
    for table in database.tables.values():
        try:
            table.job.coordinator.lease.check()
        except LeaseLost:
            return LeaseLost(f"table {table.label}: {table.job.coordinator.lease.loss()}")
        except Exception:
            continue
    return LeaseLost("a table's lease was lost; the job stopped writing, and nothing uncommitted stays visible")
