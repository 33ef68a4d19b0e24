#!/usr/bin/env bash
# Launch the laketide streaming job with spark-submit.
#
#   deploy/spark-submit.sh --config job.toml [--conf section.key=value ...]
#
# MASTER picks the cluster manager (default local[2]); SPARK_SUBMIT the spark-submit binary
# (default: the one that ships with the pyspark wheel in .venv); SPARK_SUBMIT_ARGS adds options,
# e.g. "--deploy-mode cluster --num-executors 4 --executor-memory 4g".
# The laketide wheel travels to the executors with --py-files; its dependencies (pyarrow, numpy,
# pydantic, fastavro, typer) must be installed on every node, or shipped as an archive (see README).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$repo/.venv}"
python="$venv/bin/python"
"$python" -m pip wheel -q --no-deps -w "$repo/dist" "$repo"
wheel="$(ls -t "$repo"/dist/laketide-*.whl | head -n 1)"
submit="${SPARK_SUBMIT:-$venv/bin/spark-submit}"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$python}"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
# shellcheck disable=SC2086
exec "$submit" --master "${MASTER:-local[2]}" --name laketide --py-files "$wheel" ${SPARK_SUBMIT_ARGS:-} \
  "$repo/deploy/laketide_main.py" run "$@"
