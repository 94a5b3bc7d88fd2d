"""Engine runners (protocol.py). This package imports nothing, as benchmarks/__init__.py."""
