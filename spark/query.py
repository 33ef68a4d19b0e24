"""A job's streaming query, whichever writes it (one table's, or a whole database's): the writer id its
checkpoint keeps, what a killed job left half written there, the query started under the job's name,
checkpoint and trigger, and waited for."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from laketide.config import JobConfig
from laketide.coordinator.services import TableServiceFailed
from laketide.spark.decided_stops import told_once
from laketide.table import FileIO

log = logging.getLogger("laketide.job")
WRITER_ID_FILE = "laketide-writer-id"


def writer_id_for(checkpoint: str, options: dict[str, str] | None = None) -> str:
    """The writer id lives in the checkpoint: a new checkpoint is a new writer with its own batch ids."""
    io = FileIO.for_uri(checkpoint, options)
    if io.is_file(WRITER_ID_FILE):
        return io.read_text(WRITER_ID_FILE).strip()
    writer_id = uuid.uuid4().hex
    io.write_atomic(WRITER_ID_FILE, writer_id.encode(), overwrite=False)
    return writer_id


def clear_interrupted_log_writes(checkpoint: str, options: dict[str, str] | None = None) -> list[str]:
    """Delete what a killed job left half written in its checkpoint; the paths deleted.

    Spark writes each entry of the query's logs (offsets, commits, a file source's seen files, the metadata) to
    ``.<name>.<uuid>.tmp`` beside it and renames it into place (its ``CheckpointFileManager.createAtomic``). A job
    killed between the two leaves the temporary file, which Spark never reads, but beside which it refuses to start
    a query whose offset log holds no batch yet (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``: a kill -9 in the
    first micro-batch left a checkpoint no later job could start on). Run before the query starts: a checkpoint
    is one query's, and no other writes it then."""
    io = FileIO.for_uri(checkpoint, options)
    left = [
        e.path for e in io.walk() if not e.is_dir and e.name.startswith(".") and e.name.endswith((".tmp", ".tmp.crc"))
    ]
    for path in left:
        io.delete(path)
    if left:
        log.info(
            "deleted %d half-written log entries a stopped job left in checkpoint %s: %s", len(left), checkpoint, left
        )
    return left


def start_query(config: JobConfig, source, each: Callable):
    """The query of ``source`` (a streaming DataFrame) handing each micro-batch to ``each(df, batch_id)``, under the
    job's name, checkpoint and trigger."""
    clear_interrupted_log_writes(config.stream.checkpoint, config.storage.io_options)
    stream = (
        source.writeStream.queryName(config.stream.query_name)
        .option("checkpointLocation", config.stream.checkpoint)
        .foreachBatch(told_once(source.sparkSession, each))
    )
    if config.stream.trigger == "available-now":
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=config.stream.trigger)
    return stream.start()


def await_query(
    query,
    watch: Callable[[], None],
    stop_requested: threading.Event,
    failed: Callable[[Exception], BaseException | None],
) -> bool:
    """Wait for the query to end; ``True`` when it was stopped (by a stop request or Ctrl-C) rather than ending by
    itself. ``watch()`` runs every second and raises, once it stopped the query, what must end the job (a lost
    lease, a service that failed too often); ``failed(error)`` names what a failed query ends the job with, or
    ``None`` for the error as it came."""
    try:
        while not query.awaitTermination(1):
            watch()
            if stop_requested.is_set():
                query.stop()
    except KeyboardInterrupt:
        log.info("stopping the query")
        query.stop()
        return True
    except TableServiceFailed:
        raise
    except Exception as failure:
        named = failed(failure)
        if named is not None:
            raise named from None
        raise
    return stop_requested.is_set()
