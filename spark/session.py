"""The Spark session of a job: the one ``spark-submit`` made, or a local one built from ``[spark]``.

Under ``spark-submit`` what the user passed there (master, driver host and bind address, shuffle
partitions, UI, ...) is the session's: laketide's own settings fill only what is missing. The
loopback driver address and the disabled UI are defaults for a job on one machine only; on a
cluster, executors must reach the driver at the host it advertises.
"""

from __future__ import annotations

import logging
import os
import sys
import urllib.parse
from typing import Any

import pyarrow as pa
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from laketide.config import SparkSection

log = logging.getLogger(__name__)

# spark-submit starts the JVM first and hands its gateway to the Python driver through these.
SUBMITTED_ENV = "PYSPARK_GATEWAY_PORT"

# What every laketide session wants, wherever it runs (Arrow for the Python stages; Spark's own
# temporary checkpoints deleted on exit). The job's stages hand rows on through files
# (``writer.exchange``), not Spark's shuffle. The driver's JVM only plans and schedules, so its JIT stops at
# the quick compiler: the optimizing one took the cores from the first micro-batch's Python tasks (a 1M-row
# load on local[2], 1.84 to 1.91 s against 2.06 to 2.39, its prepare stage 1.0 to 1.1 task-s against 1.2
# to 1.5). The Python workers allocate Arrow memory with the C library's malloc rather than pyarrow's
# default mimalloc: a fresh worker's first large micro-batch ran much slower on mimalloc, warm-up or not
# (a 1M-row load on local[2], 1.45 s against 1.82 to 1.92, its prepare stage 0.77 to 0.80 task-s against
# 0.95 to 1.36; later micro-batches and the peak RSS the same). The query's offset and commit logs, written
# twice a micro-batch through Hadoop's FileContext, go to a local checkpoint without the checksum file Hadoop's
# default local file system writes and renames beside each entry: it doubled their cost (an idle query's
# ``walCommit`` and ``commitOffsets`` 52 ms each against 28); the logs are checked by Spark's own JSON reading.
# A Python worker that crashes (a fault in a C extension) has its threads' tracebacks in the task's error, which
# otherwise says only that the worker exited.
WANTED = {
    "spark.python.worker.faulthandler.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "system",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
}
# A checkpoint on the local disk gets its logs (offsets, commits, a file source's) written through Hadoop's FileSystem
# API on the raw local file system rather than through FileContext: without Hadoop's native library FileContext's
# rename asks `readlink`, a process the JVM starts, about both paths, about eight such processes a micro-batch, and
# a generator job of 2,000-row micro-batches spent 0.064 to 0.070 s a micro-batch outside its own work against 0.044
# to 0.046 (40 micro-batches, two runs each). Spark's FileSystem-based manager looks for a log entry before renaming
# its own into place, where FileContext's rename refuses atomically; the job's lease keeps a second writer off it.
LOCAL_CHECKPOINT = {"spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem"}
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
# its name since Spark 4.1, then before
FILE_SYSTEM_CHECKPOINT_MANAGERS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)
# A job whose micro-batches are all written by the driver runs no Spark task: no Python daemon is kept for workers
# it never starts. The Python data source's planners then run once each as a plain process that exits, where
# under daemons four daemons (about 45 MB each) and their idle workers stayed (a 2,000-row generator job's
# processes peaked at 1.75 GB against 0.74 GB, `make bench-job-memory`).
DRIVER_ONLY = {"spark.python.use.daemon": "false"}
# A job on a local master: no UI port to collide with, few shuffle partitions, everything on loopback.
LOCAL = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def on_one_machine(spark: SparkSession) -> bool:
    """Whether the session's master is local: Spark's tasks run on the driver's machine."""
    return (spark.sparkContext.master or "").startswith("local")


def driver_heap_bytes(spark: SparkSession) -> int:
    """The most the driver's JVM heap may grow to (``spark.driver.memory``, as the JVM counts it)."""
    jvm: Any = spark.sparkContext._jvm  # py4j's view of the JVM: its attributes are Java's packages
    return int(jvm.java.lang.Runtime.getRuntime().maxMemory())


def builds_local_session(config: SparkSection) -> bool:
    """Whether the job will build a session on a local master (``_built``), known before it starts; under
    spark-submit the master is not known until then, so not."""
    return SUBMITTED_ENV not in os.environ and config.master.startswith("local")


def spark_session(config: SparkSection, tasks: bool = True, checkpoint: str | None = None) -> SparkSession:
    """The job's session; ``tasks``: whether any micro-batch may run in Spark's tasks (``DRIVER_ONLY`` if not);
    ``checkpoint``: the query's, whose logs go through the file system API when it is local (``LOCAL_CHECKPOINT``)."""
    _use_driver_pool()
    local_checkpoint = checkpoint is not None and urllib.parse.urlparse(checkpoint).scheme in ("", "file")
    wanted = {**WANTED, **({} if tasks else DRIVER_ONLY), **(LOCAL_CHECKPOINT if local_checkpoint else {})}
    active = SparkSession.getActiveSession()
    if active is not None:
        session = active
    elif SUBMITTED_ENV in os.environ:
        session = _submitted(config, wanted)
    else:
        session = _built(config, wanted)
    if local_checkpoint and not config.conf.get(CHECKPOINT_MANAGER) and _raw_local_files(session):
        _use_file_system_checkpoint_manager(session)
    conf = session.sparkContext.getConf()
    log.info(
        "Spark %s: master %s, driver %s:%s, %s shuffle partitions, UI %s",
        session.version,
        conf.get("spark.master"),
        conf.get("spark.driver.host"),
        conf.get("spark.driver.port"),
        session.conf.get("spark.sql.shuffle.partitions"),
        session.sparkContext.uiWebUrl or "off",
    )
    return session


def _raw_local_files(session: SparkSession) -> bool:
    """Whether the session reaches local files through Hadoop's raw local file system (``LOCAL_CHECKPOINT``), as a
    session built with it does: through the default one, each log entry would get a checksum file beside it."""
    context: Any = session.sparkContext._jsc  # py4j's view of the JavaSparkContext
    files = context.hadoopConfiguration().get("fs.file.impl")
    return files == LOCAL_CHECKPOINT["spark.hadoop.fs.file.impl"]


def _use_file_system_checkpoint_manager(session: SparkSession) -> None:
    """Spark's FileSystem-based checkpoint manager for the session's queries, under the name this Spark knows it by;
    none known, Spark keeps its default."""
    jvm: Any = session.sparkContext._jvm  # py4j's view of the JVM: its attributes are Java's packages
    for name in FILE_SYSTEM_CHECKPOINT_MANAGERS:
        try:
            jvm.java.lang.Class.forName(name)
        except Exception:  # py4j's error for a class this Spark does not have
            continue
        session.conf.set(CHECKPOINT_MANAGER, name)
        log.info("the query's logs in its local checkpoint: through Hadoop's raw local file system (%s)", name)
        return
    log.info("this Spark has no FileSystem-based checkpoint manager; the query's logs go through FileContext")


def _use_driver_pool() -> None:
    """The C library's malloc as the driver's default Arrow pool (the job owns its driver process), unless
    ARROW_DEFAULT_MEMORY_POOL names one, as ``laketide run`` sets it for a job it starts (``laketide.cli``). The
    driver writes every micro-batch small enough for it, and pyarrow's default mimalloc spent most of a 1M-row load
    in the kernel on a machine up for a day (huge-page faults under THP's ``madvise`` defrag): on local[2] the load
    took 1.78 to 1.91 s on mimalloc, 1.16 to 1.24 on malloc and 1.07 to 1.14 on jemalloc, interleaved, at the same
    peak RSS. jemalloc is not taken: at 10,000 change events a second (``bench/freshness_bench.py``) its freshness
    p99 was 3.67 s against 2.94 on malloc, one run each. Arrays already allocated stay in the pool that made them."""
    # set by name even when the variable is there: pyarrow reads it once, and a process that used Arrow before
    # the variable was set (a library import, a test) still holds its first default
    name = os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "system")
    pools = {"system": pa.system_memory_pool, "jemalloc": pa.jemalloc_memory_pool, "mimalloc": pa.mimalloc_memory_pool}
    try:
        pa.set_memory_pool(pools.get(name, pa.system_memory_pool)())
    except NotImplementedError:  # a pyarrow built without the named pool keeps its default
        log.info("pyarrow has no %s pool here; the driver keeps %s", name, pa.default_memory_pool().backend_name)


def _submitted(config: SparkSection, wanted: dict[str, str]) -> SparkSession:
    """The session spark-submit prepared; ``[spark]`` adds only what it left unset."""
    SparkContext._ensure_initialized()
    submitted = SparkConf()  # loads what spark-submit passed (the driver JVM's spark.* properties)
    if "master" in config.model_fields_set and config.master != submitted.get("spark.master"):
        log.warning(
            "spark.master = %r from spark-submit wins over [spark] master = %r",
            submitted.get("spark.master"),
            config.master,
        )
    builder = SparkSession.builder
    if not submitted.contains("spark.app.name"):
        builder = builder.appName(config.app_name)
    on_one_machine = (submitted.get("spark.master") or "").startswith("local")
    for key, value in {**wanted, **(LOCAL if on_one_machine else {}), **config.conf}.items():
        if not submitted.contains(key):
            builder = builder.config(key, value)
        elif key in config.conf and submitted.get(key) != value:
            log.warning("%s = %r from spark-submit wins over [spark.conf] %r", key, submitted.get(key), value)
    return builder.getOrCreate()


def _built(config: SparkSection, wanted: dict[str, str]) -> SparkSession:
    """``laketide run``: a session from ``[spark]``, with the one-machine defaults for a local master."""
    # Workers must run the same interpreter (and so see the same packages) as the driver, unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    on_one_machine = config.master.startswith("local")
    if on_one_machine:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(config.app_name)
    if "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "") and config.master:
        builder = builder.master(config.master)
    for key, value in {**wanted, **(LOCAL if on_one_machine else {}), **config.conf}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
