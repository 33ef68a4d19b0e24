#!/usr/bin/env bash
# Launch the laketide streaming job with spark-submit.
#
#   deploy/spark-submit.sh [--master URL] --config job.toml [--conf section.key=value ...]
#
# The master is --master, else MASTER, else local[2]. SPARK_SUBMIT picks the spark-submit binary
# (default: the one that ships with the pyspark wheel in the venv); SPARK_SUBMIT_ARGS adds options,
# e.g. "--deploy-mode client --executor-memory 4g --conf spark.driver.host=10.0.0.5". What is passed
# to spark-submit is the session's; laketide's own Spark defaults fill only what is left unset.
# laketide travels to the executors as a .zip in --py-files (Spark puts .zip, .egg and .jar py-files on
# the workers' path, never a .whl), so the nodes need only its dependencies (see docs/deploying.md).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$repo/.venv}"
python="$venv/bin/python"
master="${MASTER:-local[2]}"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --master) master="$2"; shift 2 ;;
    --master=*) master="${1#--master=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
"$python" -m pip wheel -q --no-deps -w "$repo/dist" "$repo"
wheel="$(ls -t "$repo"/dist/laketide-*.whl | head -n 1)"
# A wheel is a zip archive with the packages at its root: as .zip it is importable from the workers' path.
package="${wheel%.whl}.zip"
cp "$wheel" "$package"
submit="${SPARK_SUBMIT:-$venv/bin/spark-submit}"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$python}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$python}"
# Spark plans a Python data source (laketide's Kafka reader) on the driver, in Python workers started with
# PYSPARK_PYTHON and the driver JVM's PYTHONPATH, never --py-files: without this a Kafka job on a cluster whose
# nodes' Python lacks laketide stopped at its start with "No module named 'laketide'".
export PYTHONPATH="$package${PYTHONPATH:+:$PYTHONPATH}"
case "$master" in
  local*) export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}" ;;  # one machine: stay on loopback
esac
# shellcheck disable=SC2086
exec "$submit" --master "$master" --name laketide --py-files "$package" ${SPARK_SUBMIT_ARGS:-} \
  "$repo/deploy/laketide_main.py" run "${args[@]}"
