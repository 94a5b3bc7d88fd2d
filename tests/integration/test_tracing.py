"""OpenTelemetry traces on both stores, with the SDK's in-memory exporter: a step attempt is a
span in the trace of whoever started its run (its context recorded at start() and carried to
the worker), the step's body sees it as the current span, a failed attempt is an error span,
and the ended run is a span of its own; the trace id is the run's correlation id."""

from __future__ import annotations

import pytest

import durably
from durably import Retry
from durably.testing import FakeClock

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from durably.observability.tracing import Tracing  # noqa: E402


def test_steps_join_the_starters_trace(store_url: str, clock: FakeClock) -> None:
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = durably.App(store_url, clock=clock, hooks=[Tracing(provider)])
    seen_inside: list[int] = []
    flaky = iter([ConnectionError("reset")])
    try:

        @app.step(retry=Retry(attempts=2, initial="1s"), dependency="payments")
        async def charge(order: str) -> str:
            seen_inside.append(trace.get_current_span().get_span_context().span_id)
            if (error := next(flaky, None)) is not None:
                raise error
            return f"ch-{order}"

        @app.step
        def label(order: str) -> str:  # a sync body: its thread carries the context too
            seen_inside.append(trace.get_current_span().get_span_context().span_id)
            return f"label-{order}"

        @app.workflow
        async def checkout(order: str) -> str:
            await charge(order)
            return await label(order)  # type: ignore[no-any-return]

        with provider.get_tracer("shop").start_as_current_span("POST /orders") as request:
            app.start(checkout, "o-1", id="o-1")
            caller = request.get_span_context()
        app.run_until_idle()  # no span is current here: the context comes from the store
        clock.advance("1s")
        app.run_until_idle()
    finally:
        app.close()

    spans = {
        (s.name, s.attributes.get("durably.attempt")): s for s in exporter.get_finished_spans()
    }
    failed, charged = spans[("durably.step charge", 1)], spans[("durably.step charge", 2)]
    labelled, run = spans[("durably.step label", 1)], spans[("durably.run checkout", None)]
    for span in (failed, charged, labelled, run):
        assert span.context.trace_id == caller.trace_id
        assert span.parent is not None
        assert span.parent.span_id == caller.span_id
    assert failed.status.status_code is trace.StatusCode.ERROR
    assert failed.events[0].name == "exception"
    assert charged.status.status_code is trace.StatusCode.UNSET
    assert charged.attributes["durably.dependency"] == "payments"
    assert charged.attributes["durably.correlation_id"] == f"{caller.trace_id:032x}"
    assert seen_inside == [
        failed.context.span_id,
        charged.context.span_id,
        labelled.context.span_id,
    ]
    assert run.attributes["durably.status"] == "completed"
    assert (run.end_time or 0) > (run.start_time or 0)


def test_a_run_started_outside_a_trace_is_one_trace_of_its_own(
    store_url: str, clock: FakeClock
) -> None:
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = durably.App(store_url, clock=clock, hooks=[Tracing(provider)])
    try:

        @app.step
        async def pack(order: str) -> str:
            return order

        @app.workflow
        async def ship(order: str) -> str:
            await pack(order)
            return await pack(order + "-2")  # type: ignore[no-any-return]

        app.start(ship, "a", id="s-a")
        app.start(ship, "b", id="s-b")
        app.run_until_idle()
    finally:
        app.close()

    by_run: dict[str, set[int]] = {}
    for span in exporter.get_finished_spans():
        by_run.setdefault(str(span.attributes["durably.run_id"]), set()).add(span.context.trace_id)
    assert len(by_run["s-a"]) == 1  # its two step spans and its run span: one trace
    assert len(by_run["s-b"]) == 1
    assert by_run["s-a"] != by_run["s-b"]
