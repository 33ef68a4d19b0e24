#!/usr/bin/env bash
# A PySpark shell (or, with SPARK_SUBMIT, any spark-submit) that reads laketide's Delta mirrors with delta-spark.
#
#   DELTA_VERSION=4.0.0 deploy/delta-shell.sh
#   >>> spark.read.format("delta").load("/mnt/lake/orders").show()
#
# delta-spark's jars come from Maven (--packages); pick the release built for your Spark's Scala version.
# Read only: never run VACUUM on a mirror, Hudi's cleaner is the one deleter of its files.
set -euo pipefail
exec "${PYSPARK:-pyspark}" \
  --packages "io.delta:delta-spark_2.13:${DELTA_VERSION:?set DELTA_VERSION to a delta-spark release}" \
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
  "$@"
