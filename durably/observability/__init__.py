"""Observability: structured logs (durably.observability.logs), Prometheus metrics
(durably.observability.metrics, the `metrics` extra) and OpenTelemetry traces
(durably.observability.tracing, the `otel` extra)."""
