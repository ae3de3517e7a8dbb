# phasefit: `make demo` and `make test` each do all of their own set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Everything (every extra and the test tools) for test, lint and bench; only the `demo` extra for the demo.
STAMP := $(VENV)/.phasefit-installed
DEMO_STAMP := $(VENV)/.phasefit-demo-installed
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt

.PHONY: demo test lint venv bench images clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "phasefit needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e '.[all,test]'
	@touch $@ $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e '.[demo]'
	@touch $@

venv: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/phasefit demo $(DEMO_ARGS)

# Finds or starts what the tests need (PostgreSQL, promtool, Prometheus, Alertmanager, Chromium), then runs
# the whole suite. Under CI=true a missing component fails its tests instead of skipping them.
test: $(STAMP)
	source scripts/test-env.sh && $(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/ingest_bench.py
	$(BIN)/python benchmarks/sim_bench.py
	$(BIN)/python benchmarks/collector_overhead.py
	$(BIN)/python benchmarks/perf_model_accuracy.py

# Container images need an engine (docker or podman); the development machines have none.
images:
	@command -v docker >/dev/null && docker info >/dev/null 2>&1 || { echo "no container engine here"; exit 1; }
	docker build -f deploy/docker/Dockerfile.collector -t phasefit-collector:dev .
	docker build -f deploy/docker/Dockerfile.service -t phasefit-service:dev .

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build *.egg-info
