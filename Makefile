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

# Two parts (tests/conftest.py says which test is in which): the tests that compute on recorded or
# generated data on TEST_WORKERS pytest workers (pytest-xdist, each file on one), then the tests
# marked `serial` (real jobs, collectors, sockets, timers) in one process, alone: on two workers
# beside each other, a timing-sensitive e2e test failed in one of two fresh-clone runs
# (bench/results/ci_durations_2core.md). Both parts run; either failing fails `make test`.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not serial"; a=$$?; \
	$(PY) -m pytest -q -m serial; b=$$?; \
	test $$a -eq 0 && test $$b -eq 0

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
