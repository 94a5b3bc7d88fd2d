"""Benchmarks for durably: `python -m benchmarks.core` (or `make bench`)."""
