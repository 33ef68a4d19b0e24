VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
export SPARK_LOCAL_IP ?= 127.0.0.1

.PHONY: install system-deps test-servers test lint docs test-spark42 screenshots demo bench bench-upsert bench-tasks bench-scale bench-object-store bench-kafka bench-memory bench-job-memory bench-api bench-database bench-freshness bench-catalog-down clean wheel

# after system-deps: the install compiles laketide's C key hashing (setup.py)
$(VENV)/.installed: pyproject.toml setup.py $(wildcard index/_keyhash*.c index/_keyhash.h) | system-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# the sources compiled once: a Spark Python worker imports them at its first task, and where bytecode is not
# written (PYTHONDONTWRITEBYTECODE) each worker compiled them again, about 0.4 s of the first micro-batch
install: $(VENV)/.installed $(VENV)/.pyspark-compiled
	$(PY) -m compileall -q src api catalog coordinator index spark table writer

# pyspark.zip with bytecode: each Python process Spark starts imports PySpark from it (deploy/compile_pyspark_zip.py)
$(VENV)/.pyspark-compiled: $(VENV)/.installed
	$(PY) deploy/compile_pyspark_zip.py
	touch $@

system-deps:
	./deploy/install-system-deps.sh

# servers the tests start that come from npm (Azurite)
test-servers:
	./deploy/install-test-servers.sh

# two workers, a test module each at a time: most of the suite waits on subprocesses, servers and JVMs
TEST_WORKERS ?= 2

# the classes a Spark driver JVM loads, archived once per environment: the suite's JVMs start sooner
$(VENV)/spark-classes.jsa: $(VENV)/.installed
	$(PY) tests/support/class_archive.py $@

# the timed tests (a page drawn in under a second) and the browser's run alone after the rest, on a machine that is
# not also running Spark jobs and brokers for the other worker
test: install system-deps test-servers $(VENV)/spark-classes.jsa lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not timed and not browser"
	$(PY) -m pytest -m "timed or browser"

# the suite on PySpark 4.2.0, the line `laketide[delta]` installs (delta-spark 4.4 requires pyspark <= 4.2.0)
test-spark42: system-deps test-servers
	$(PYTHON) -m venv .venv42
	.venv42/bin/python -m pip install -q --upgrade pip
	.venv42/bin/python -m pip install -q 'pyspark==4.2.0' -e '.[test]'
	.venv42/bin/python -m pytest

# the documentation's dashboard screenshots (docs/img), taken by the browser tests
screenshots: install system-deps
	LAKETIDE_SCREENSHOTS=docs/img $(PY) -m pytest -q tests/api/test_dashboard.py

demo: install system-deps
	rm -rf demo
	$(VENV)/bin/laketide run --conf source.generator.batches=5 --conf source.generator.rows_per_batch=20000

# the peers in one run: laketide (COW, MOR), delta-rs, DuckLake, pypaimon, PyIceberg; pypaimon needs pyarrow < 20,
# so it gets an environment of its own
bench: install system-deps .venv-paimon/.installed
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/peers.py

.venv-paimon/.installed:
	$(PYTHON) -m venv .venv-paimon
	.venv-paimon/bin/python -m pip install -q 'pypaimon==2.1.0' psutil numpy
	touch $@

# the peers' workload with [catalog] set to a metastore that never answers, beside the same jobs without it
bench-catalog-down: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/peers.py --engines laketide-cow,laketide-mor,laketide-cow-catalog-down,laketide-mor-catalog-down,delta-rs \
		--out bench/results/peers-catalog-down.json

# laketide against delta-rs on 1M and 10M rows, with the steps of a micro-batch
bench-upsert: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/upsert_bench.py

# the same 1M-row micro-batches through Spark's tasks and through the driver
bench-tasks: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/tasks_path.py

# merge-on-read upserts against a table of 1M keys and one of 100M (about 25 minutes, 4 GB of disk)
bench-scale: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/scale.py

# the same workload on an S3 server (moto's), laketide against delta-rs, with requests per micro-batch
bench-object-store: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/object_store_bench.py

# a whole database in one job against 20 single-table jobs and delta-rs (about 40 minutes); ARGS goes to the
# script, e.g. make bench-database ARGS="--snapshot-rows 1000000" (a snapshot on the driver and on Spark's tasks)
bench-database: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/database_bench.py $(ARGS)

# records per second and commit-to-commit time from a 3-partition Kafka topic (Tansu) against the same records as
# parquet landing files (about 6 minutes)
bench-kafka: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/kafka_bench.py

# freshness of a merge-on-read table under a steady Debezium stream at 2,000, 10,000 and 30,000 records a second (about 15 minutes)
bench-freshness: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/freshness_bench.py

# micro-batch median idle and under 32 API clients asking flat out, with the answers' p50/p99 (about 4 minutes)
bench-api: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/api_bench.py

# a small job's process tree (generator, 2,000 rows a micro-batch every second): peak RSS and PSS (about 3 minutes)
bench-job-memory: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/job_memory.py

bench-memory: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/driver_memory.py

wheel: install
	$(PY) -m pip wheel -q --no-deps -w dist .

clean:
	rm -rf $(VENV) .venv42 .venv-paimon build dist *.egg-info demo

# ruff's checks and format over every folder, then pyright's type check over every source folder (settings in
# pyproject.toml): `ruff format .` fixes the format
lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/pyright

# the documentation site (docs/, mkdocs.yml) into ./site; the suite builds it too, strictly (tests/project/test_docs.py)
docs: install
	$(PY) -m mkdocs build --strict
