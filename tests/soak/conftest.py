"""Fixtures for the soak runs: worker processes (they run only with `make soak`)."""

from tests.integration.processes import processes  # noqa: F401  (a fixture)
