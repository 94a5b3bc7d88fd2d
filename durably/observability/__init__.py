"""Observability: structured logs (durably.observability.logs) and Prometheus metrics
(durably.observability.metrics, the `metrics` extra)."""
