VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
export SPARK_LOCAL_IP ?= 127.0.0.1

.PHONY: install system-deps test demo bench clean wheel

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

system-deps:
	./deploy/install-system-deps.sh

test: install system-deps
	$(PY) -m pytest

demo: install system-deps
	rm -rf demo
	$(VENV)/bin/laketide run --conf source.generator.batches=5 --conf source.generator.rows_per_batch=20000

bench: install system-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/upsert_bench.py

wheel: install
	$(PY) -m pip wheel -q --no-deps -w dist .

clean:
	rm -rf $(VENV) build dist *.egg-info demo
