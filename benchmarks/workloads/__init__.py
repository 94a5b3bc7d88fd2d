"""The measures the benchmarks are made of (benchmarks.registry puts them at their sizes)."""
