"""The streaming job: open the table, take the lease, recover, and run the query.

Threads of the job's process, and what each may touch (each shared object's docstring names its guard):
- the stream thread (Spark's ``foreachBatch``) runs ``MicroBatches`` under the writer's ``batch_lock``:
  the coordinator, the index, the synced view, the driver's pool;
- the driver's worker pool (``DriverPool``, one per writer) runs the stage functions of a micro-batch the
  driver writes, on rows it is handed; the stage clock and the shard cache (``index.shard_cache``) are
  guarded by locks;
- the table-services thread (``TableServices``) runs one service at a time: clean, compaction, archival
  and the mirror, through the coordinator (``Coordinator._lock``), ``ServiceFailures._lock``, the view
  sync's lock and the mirror's; a compaction's last step takes ``batch_lock``;
- the API's threads (uvicorn) read the table afresh for every request, and make changes through
  ``RunningJob.operations``, under ``batch_lock``;
- kazoo's listener (ZooKeeper lease) only flips the lease's state and sets the ``lost`` event;
- the warm-up thread runs one Spark job at the start (``workers.warm_workers``; not in a job whose micro-batches
  are all the driver's), touching nothing of the job's but the SparkContext, which takes jobs from any thread;
- the main thread (here) waits for the query, and stops it when the lease is lost, a service failed too
  often, or a stop was asked for.
"""

from __future__ import annotations

import faulthandler
import logging
import re
import threading
from collections.abc import Callable

from laketide.config import JobConfig
from laketide.config.routes import is_database_job
from laketide.coordinator import LeaseLost
from laketide.spark.kafka.source import KafkaDataLoss
from laketide.spark.pipeline import MicroBatches
from laketide.spark.query import await_query, start_query, writer_id_for
from laketide.spark.session import builds_local_session, spark_session
from laketide.spark.sources import generated_fits_driver, read_stream, source_schema
from laketide.spark.stage_clock import StageClock
from laketide.spark.workers import warm_workers
from laketide.table.errors import LaketideError
from laketide.writer.batch_writer import BatchWriter, WriterParts
from laketide.writer.job.database import Database
from laketide.writer.job.running import RunningJob
from laketide.writer.job.session import JobParts, WriterSession, check_table, open_table, quarantine_path
from laketide.writer.preflight import check_exchange_dir, check_quarantine_path

DATA_LOSS = re.compile(r"KafkaDataLoss: ([^\n]+)")
log = logging.getLogger("laketide.job")


def run(
    config: JobConfig,
    on_step: Callable[[str, int], None] | None = None,
    on_ready: Callable[[RunningJob | Database], None] | None = None,
) -> BatchWriter | Database:
    """Run the job until its trigger ends it (available-now) or it is stopped; a job of a whole database
    (``table.path`` holding ``{table}``) runs as ``spark.database_job`` says.

    ``on_ready`` gets the running job once the lease is held and the table
    recovered, before the first micro-batch (the service starts its API there).
    """
    if is_database_job(config):
        from laketide.spark.database_job import run_database

        return run_database(config, on_step, on_ready)
    # a crash in native code (librdkafka, Arrow, the JVM's bridge) leaves every thread's Python stack on stderr
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)
    opened = check_table(config)  # the table first: a store or bucket that is wrong is named by the table's path
    check_quarantine_path(quarantine_path(config), config.storage.io_options)
    check_exchange_dir(config.write.exchange_dir, config.storage.io_options)
    local = builds_local_session(config.spark)
    driver_limit = config.write.driver_limit(local)
    tasks = not generated_fits_driver(config, driver_limit)
    spark = spark_session(config.spark, tasks, config.stream.checkpoint)
    spark.sparkContext.setLogLevel("WARN")
    # on one machine most micro-batches fit the driver and never use the workers: the first that does not starts
    # them, rather than two warmed ones being held from the start (165 MB each)
    if tasks and not (local and driver_limit):
        threading.Thread(target=warm_workers, args=(spark,), name="laketide-warm-up", daemon=True).start()
    # the table is opened (or created) once every check passed, before the checkpoint gets its writer id: a refused
    # job leaves neither behind
    table = open_table(config, source_schema(spark, config.source), opened)
    writer_id = writer_id_for(config.stream.checkpoint, config.storage.io_options)
    lost = threading.Event()
    session = WriterSession(
        config,
        writer_id,
        job_id=f"{config.stream.query_name}-{writer_id[:8]}",
        table=table,
        parts=JobParts(on_lost=lost.set, writer=WriterParts(clock=StageClock(spark.sparkContext), on_step=on_step)),
    )
    with session as job:
        if on_ready is not None:
            on_ready(job)
        batches = MicroBatches(spark, job.writer)
        try:
            query = start_query(config, read_stream(spark, config), batches)
            stopped = _await(query, job, lost, batches)
        finally:
            batches.close()
        job.finish(ended_by_itself=config.stream.trigger == "available-now" and not stopped)
        return job.writer


def _await(query, job: RunningJob, lost: threading.Event, batches: MicroBatches) -> bool:
    failures = job.services.failures

    def watch() -> None:
        if lost.is_set():
            query.stop()
            raise job.coordinator.lease.loss()
        if failures.fatal is not None:
            query.stop()
            failures.raise_if_fatal()

    def failed(failure: Exception) -> BaseException | None:
        if "LeaseLost" in str(failure) or _lease_gone(job, lost):
            return job.coordinator.lease.loss()
        # a service that failed too often stops the query from inside a micro-batch, after its commit
        failures.raise_if_fatal()
        if isinstance(batches.failure, LaketideError):
            return batches.failure  # as raised, so its kind gives the exit code
        loss = DATA_LOSS.search(str(failure))
        if loss:  # raised by the Kafka source's planning, which runs in a Python worker of Spark's
            return KafkaDataLoss(loss.group(1).strip())
        return None

    return await_query(query, watch, job.stop_requested, failed)


def _lease_gone(job: RunningJob, lost: threading.Event) -> bool:
    """Whether this writer has lost its lease: told so, or finding it now. A process paused past its
    lease fails as soon as it wakes, when the new holder has moved Spark's checkpoint on ("Concurrent
    update to the log"), before the lease's own heartbeat has noticed; that failure is the lease's."""
    if lost.is_set():
        return True
    try:
        job.coordinator.lease.check()
    except LeaseLost:
        return True
    except Exception:  # the lease cannot tell now: the query's own failure stands
        log.debug("the lease could not be checked after the query failed", exc_info=True)
    return False
