"""Benchmarks for durably: one command, `python -m benchmarks NAME...` (benchmarks.__main__;
`--list` names them), runs every benchmark of the registry (benchmarks.registry: each one's
workloads, sizes, repetitions, engines, stores and targets, as data) through one harness
(benchmarks.harness), and reports with benchmarks.report into benchmarks/results/.

This package imports nothing: `python -m benchmarks.runners...` imports it before a runner's
cold-start clock starts.
"""
