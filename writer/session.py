"""The Spark session of a job: reuse the one ``spark-submit`` made, or build a local one."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from laketide.config import SparkSection


def spark_session(config: SparkSection) -> SparkSession:
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Local workers must run the same interpreter (and so see the same packages) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(config.app_name)
    if "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "") and config.master:
        builder = builder.master(config.master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    }
    for key, value in {**defaults, **config.conf}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
