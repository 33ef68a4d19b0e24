"""Spark finds Python data sources in installed modules named ``pyspark_*`` with a ``DefaultSource``:
with laketide installed, ``spark.read.format("laketide")`` and ``spark.readStream.format("laketide")`` need no
registration."""

from laketide.spark.table_source import LaketideDataSource as DefaultSource

__all__ = ["DefaultSource"]
