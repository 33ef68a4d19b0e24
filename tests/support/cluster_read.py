"""A spark-submit application: read a laketide table through its Spark source, write its rows to a parquet file.

Executors that run another Python than the driver's need the source registered in the session:
Spark starts a statically found Python data source with the driver's interpreter
(``PYSPARK_DRIVER_PYTHON``), a registered one with the executors' (``PYSPARK_PYTHON``).
"""

import sys

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from laketide.spark.table_source import LaketideDataSource

if __name__ == "__main__":
    table, out = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.appName("laketide-read").getOrCreate()
    spark.dataSource.register(LaketideDataSource)
    pq.write_table(spark.read.format("laketide").load(table).toArrow(), out)
    spark.stop()
