# Each target does its own set-up on a fresh machine: a virtual environment in .venv, the
# CPU build of torch first (so pip does not pull a multi-GB CUDA build), then the package.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stepwatch-installed

.PHONY: demo stack test test-gpu proto proto-check docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

demo: $(STAMP)
	$(VENV)/bin/stepwatch demo

# collector + Debian prometheus + prometheus-alertmanager on deploy/ configs (no docker)
stack: $(STAMP)
	$(VENV)/bin/stepwatch stack

# two pytest workers (pytest-xdist), each test file kept on one worker (its module fixtures run
# once): the suite waits on subprocesses, sockets and timers about half of its time on 2 cores
# (bench/results/ci_durations_2core.md); TEST_WORKERS=0 runs it in one process
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-gpu: $(STAMP)
	$(PY) -m pytest -q tests/gpu

proto:
	$(PY) proto/generate.py

proto-check:
	$(PY) proto/generate.py --check

# docs/configuration.md's options tables from the settings model (tests/test_docs.py checks them)
docs: $(STAMP)
	$(PY) docs/options_doc.py --write docs/configuration.md

clean:
	rm -rf $(VENV) build *.egg-info
