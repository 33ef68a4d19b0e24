"""A stop the job decided, told in one line.

A micro-batch that raises one of laketide's errors (events of two source tables, a log that went back, a
refused rollback, a lost lease) stops the query on purpose, and the job's last line names the reason and the way
out. Spark and py4j would each tell it again first, with about a hundred lines of their own machinery: py4j logs
the Python traceback of the callback (logger ``py4j.clientserver``), and Spark's streaming engine logs the query's
end with the Java stack around that traceback. For such an error both are kept at DEBUG (``laketide.job``); any
other failure is told by them as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from laketide.table.errors import LaketideError

log = logging.getLogger("laketide.job")
# where Spark's streaming engine logs a query that ended with an error (MicroBatchExecution and its kin)
STREAMING_LOGGERS = "org.apache.spark.sql.execution.streaming"


class _DecidedStops(logging.Filter):
    """Keeps py4j's report of a callback that raised one of laketide's errors at DEBUG only."""

    def filter(self, record: logging.LogRecord) -> bool:
        failure = record.exc_info[1] if record.exc_info else None
        if isinstance(failure, LaketideError):
            log.debug("the micro-batch stopped the query: %s", failure, exc_info=record.exc_info)
            return False
        return True


_FILTER = _DecidedStops()


def told_once(spark, each: Callable) -> Callable:
    """``each`` (a ``foreachBatch`` function) whose own errors end the query with no report but the job's."""
    logging.getLogger("py4j.clientserver").addFilter(_FILTER)  # one filter object: adding it again is a no-op

    def quietly(df, batch_id: int) -> None:
        try:
            each(df, batch_id)
        except LaketideError:
            _quiet_streaming_logs(spark)
            raise

    return quietly


def _quiet_streaming_logs(spark) -> None:
    """Spark's streaming engine told at DEBUG from here on: the query is ending with an error the job reports."""
    try:
        jvm = spark.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.OFF
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(STREAMING_LOGGERS, level)
    except Exception as failure:  # only a log's level: the stop is reported either way
        log.debug("could not quiet Spark's streaming logs: %s", failure)
