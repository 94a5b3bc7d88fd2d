"""Benchmarks for durably: `python -m benchmarks.compare` (durably beside DBOS Transact; `make
bench`) and `python -m benchmarks.core` (durably alone, against its store's commit floor)."""
