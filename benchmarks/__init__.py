"""Benchmarks for durably: `python -m benchmarks NAME...` (benchmarks.__main__) runs the
benchmarks of benchmarks.registry through benchmarks.harness. This package imports nothing:
a runner process imports it before its cold-start clock starts."""
