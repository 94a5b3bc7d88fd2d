"""OpenTelemetry traces for durably (the `otel` extra): a span for every step attempt and one
for every run that ends, in the trace of whoever started the run.

`start()` records the caller's trace context (its W3C traceparent) with the run, and children
inherit it; so a step that runs hours later, on another machine, still appears in the trace of
the request that started its run. Inside a step's body the step's span is the current one:
the calls it makes through instrumented libraries (HTTP clients, database drivers) become its
children.

    from durably.observability.tracing import Tracing
    app = durably.App(url, hooks=[Tracing()])      # spans go to the global TracerProvider

Spans: `durably.step <name>` (attributes durably.run_id, durably.workflow, durably.step,
durably.attempt, durably.dependency, durably.correlation_id; status ERROR and an `exception`
event naming the error's class when the attempt failed: not its message, which may repeat a
secret) and `durably.run <workflow>` (from the run's start to its
end, status ERROR unless it completed).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as missing:  # pragma: no cover - the message is the point
    raise ImportError(
        "durably's traces need OpenTelemetry: pip install 'durably[otel]'"
    ) from missing

from durably.core.children import lineage
from durably.core.history import Event, error_class_name
from durably.core.status import PARKED
from durably.runtime.hooks import Hooks
from durably.workflow.context import current_execution

__all__ = ["Tracing"]

_PROPAGATOR = TraceContextTextMapPropagator()
_PARKED = frozenset(str(status) for status in PARKED)


class Tracing(Hooks):
    """Engine hooks that make OpenTelemetry spans; `tracer_provider`: the global one by
    default."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("durably", tracer_provider=tracer_provider)
        self._open: dict[tuple[str, str, int], tuple[Any, object]] = {}  # attempt -> span, token
        self._lock = threading.Lock()

    def attempt_started(self, run_id: str, step: str, attempt: int, dependency: str | None) -> None:
        execution = current_execution()
        parent = _parent(getattr(execution, "trace_parent", None), run_id)
        attributes: dict[str, str | int] = {
            "durably.run_id": run_id,
            "durably.step": step,
            "durably.attempt": attempt,
            "durably.workflow": getattr(execution, "workflow_name", None) or "",
        }
        if dependency:
            attributes["durably.dependency"] = dependency
        correlation = getattr(execution, "correlation_id", None)
        if correlation:
            attributes["durably.correlation_id"] = correlation
        name = f"durably.step {step}"
        span = self._tracer.start_span(name, context=parent, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))  # the body's current span
        with self._lock:
            self._open[(run_id, step, attempt)] = (span, token)

    def attempt_finished(
        self,
        run_id: str,
        step: str,
        attempt: int,
        dependency: str | None,
        error: BaseException | None,
    ) -> None:
        with self._lock:
            opened = self._open.pop((run_id, step, attempt), None)
        if opened is None:
            return
        span, token = opened
        otel_context.detach(token)  # type: ignore[arg-type]
        if error is not None:
            # the error's class, not its message or traceback: they may repeat a secret the
            # step was given (the run's history holds them with its secrets redacted)
            name = error_class_name(type(error))
            span.add_event("exception", {"exception.type": name, "exception.escaped": True})
            span.set_status(Status(StatusCode.ERROR, name))
        span.end()

    def run_ended(self, run_id: str, workflow: str, status: str, events: Sequence[Event]) -> None:
        if not events or status in _PARKED:  # one span a run: when it is over
            return
        family = lineage(events)
        attributes: dict[str, str] = {
            "durably.run_id": run_id,
            "durably.workflow": workflow,
            "durably.status": status,
        }
        if family.correlation_id:
            attributes["durably.correlation_id"] = family.correlation_id
        parent, began = _parent(family.trace_parent, run_id), _nanos(events[0])
        name = f"durably.run {workflow}"
        span = self._tracer.start_span(name, parent, start_time=began, attributes=attributes)
        if status != "completed":
            span.set_status(Status(StatusCode.ERROR, f"the run ended {status}"))
        span.end(end_time=_nanos(events[-1]))


def _parent(traceparent: str | None, run_id: str) -> otel_context.Context:
    """The starter's context, from its recorded traceparent; without one, a trace of the
    run's own, the same on every worker (its ids are drawn from the run's id), so that all
    its steps' spans and its run span are one trace."""
    if traceparent:
        return _PROPAGATOR.extract({"traceparent": traceparent})
    digest = hashlib.sha256(run_id.encode()).digest()
    trace_id = int.from_bytes(digest[:16]) or 1
    span_id = int.from_bytes(digest[16:24]) or 1
    root = trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(root))


def _nanos(event: Event) -> int:
    return int(event.at.timestamp() * 1_000_000_000)
