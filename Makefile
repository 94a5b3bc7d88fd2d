# The two commands: `make demo` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck docs unit chaos soak bench bench-core clean

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

# What `make bench` runs: benchmark names, in order (`python -m benchmarks --list`); the ones
# beside DBOS (compare, roundtrip) install the bench extra first, e.g. make bench WHAT=compare
WHAT ?= core
BENCH_EXTRA := $(BIN)/pip install --quiet -e '.[dev,bench]'

bench: $(STAMP)
	$(if $(filter compare roundtrip,$(WHAT)),$(BENCH_EXTRA))
	$(BIN)/python -m benchmarks $(WHAT)

bench-core: ; $(MAKE) bench WHAT=core

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache durably.db durably.db-wal durably.db-shm
