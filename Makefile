# The two commands: `make demo` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check slow lint typecheck docs unit chaos soak bench bench-core clean

# the suite's tests spread over the cores (at most 4 processes: each test opens its own stores)
PARALLEL := -n auto --maxprocesses 4 --dist loadfile

$(STAMP): pyproject.toml
	@echo "installing durably and what it needs into $(VENV) (once; about a minute)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/durably demo

test: lint typecheck
	$(BIN)/pytest -m "not soak and not slow" $(PARALLEL)

# ruff, mypy and the fast half (unit and contract tests): the inner loop, in under a minute
check: lint typecheck
	$(BIN)/pytest tests/unit tests/contract $(PARALLEL)

# the chaos runs of several seconds each, which `make test` leaves out (CI runs both)
slow: $(STAMP)
	$(BIN)/pytest -m "slow and not soak" $(PARALLEL)

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
# beside DBOS (compare, kills, roundtrip, debounce, queues, outputs) install the bench extra first, e.g. make bench WHAT=queues
WHAT ?= core
BENCH_EXTRA := $(BIN)/pip install --quiet -e '.[dev,bench]'

bench: $(STAMP)
	$(if $(filter compare kills roundtrip debounce queues outputs,$(WHAT)),$(BENCH_EXTRA))
	$(BIN)/python -m benchmarks $(WHAT)

bench-core: ; $(MAKE) bench WHAT=core

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache durably.db durably.db-wal durably.db-shm
