# The two commands: `make demo` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck docs unit chaos soak bench bench-core bench-scaling bench-sleepers bench-fanout bench-priorities bench-schedules bench-retention clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/durably demo

test: lint typecheck
	$(BIN)/pytest -m "not soak"

lint: $(STAMP)
	$(BIN)/ruff check durably tests benchmarks tools
	$(BIN)/ruff format --check durably tests benchmarks tools

typecheck: $(STAMP)
	$(BIN)/mypy

docs: $(STAMP)
	$(BIN)/python -m tools.docs.cli
	$(BIN)/python -m tools.docs.http_api

unit: $(STAMP)
	$(BIN)/pytest tests/unit tests/contract tests/integration

chaos: $(STAMP)
	$(BIN)/pytest tests/chaos

soak: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,soak]'
	$(BIN)/pytest -m soak -s

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m benchmarks.compare

bench-core: $(STAMP)
	$(BIN)/python -m benchmarks.core

bench-scaling: $(STAMP)
	$(BIN)/python -m benchmarks.scaling

bench-sleepers: $(STAMP)
	$(BIN)/python -m benchmarks.sleepers

bench-fanout: $(STAMP)
	$(BIN)/python -m benchmarks.fanout

bench-priorities: $(STAMP)
	$(BIN)/python -m benchmarks.priorities

bench-schedules: $(STAMP)
	$(BIN)/python -m benchmarks.schedules

bench-retention: $(STAMP)
	$(BIN)/python -m benchmarks.retention

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache durably.db durably.db-wal durably.db-shm
