"""Observability: Prometheus metrics (durably.observability.metrics, the `metrics` extra)."""
