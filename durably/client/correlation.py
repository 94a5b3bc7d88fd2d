"""Correlation ids: the caller's name for the request a run serves, recorded with the run
(its row and its run_started event), inherited by its children and restarts, shown by
`runs show`, the API and the dashboard, carried by every log line about it, and searched by.

Given to `start()`, or else taken from the caller's OpenTelemetry trace (its trace id, as 32
hex digits), when the caller has one: the run is then found by the trace that started it.
"""

from __future__ import annotations

import sys
from typing import Any

from durably.errors import PayloadError

__all__ = ["MAX_LENGTH", "correlation_of", "trace_parent"]

MAX_LENGTH = 200


def correlation_of(given: str | None) -> str | None:
    """The correlation id to record: `given` (checked), else the current trace's id, else
    None. DurablyError if `given` is empty, too long or holds control characters."""
    if given is None:
        return _trace_id()
    if not isinstance(given, str) or not given.strip():
        raise PayloadError(f"a correlation id is a non-empty string, not {given!r}")
    if len(given) > MAX_LENGTH:
        raise PayloadError(
            f"a correlation id has at most {MAX_LENGTH} characters; this one has {len(given)}"
        )
    if not given.isprintable():
        raise PayloadError(f"a correlation id holds printable characters only: {given!r}")
    return given


def trace_parent() -> str | None:
    """The caller's trace context as a W3C traceparent, recorded with the run so that its
    steps' spans join the caller's trace (durably.observability.tracing); None without one."""
    context = _span_context()
    if context is None:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _trace_id() -> str | None:
    context = _span_context()
    return None if context is None else f"{context.trace_id:032x}"


def _span_context() -> Any:
    """The caller's current OpenTelemetry span context, if it imported OpenTelemetry and is in
    a span. Looked up in sys.modules: a caller that never imported it has no trace, and pays
    nothing."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    return context if context.is_valid else None
