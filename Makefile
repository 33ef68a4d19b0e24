VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
export SPARK_LOCAL_IP ?= 127.0.0.1

.PHONY: install system-deps test demo bench clean

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
	@echo "make demo: the streaming job is not built yet"

clean:
	rm -rf $(VENV) build dist *.egg-info demo
