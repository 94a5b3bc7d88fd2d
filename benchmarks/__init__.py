"""Benchmarks for durably, one harness (benchmarks.harness) behind three entry points:
`python -m benchmarks.compare` (durably beside DBOS Transact; `make bench`, `durably bench`),
`python -m benchmarks.core` (durably alone, against its store's commit floor; `make
bench-core`) and `python -m benchmarks.scaling` (long histories, big stores, several worker
processes; `make bench-scaling`). Each is a registry of workloads; see benchmarks/harness.py.
"""
