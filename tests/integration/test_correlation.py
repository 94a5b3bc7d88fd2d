"""Correlation ids on both stores: given to start() (or taken from the caller's trace), stored
with the run and in its history, inherited by its children and restarts, searched by, shown by
`runs show`, and carried by every log line about the run."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

import durably
from durably import DurablyError, RunStatus
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import RunStarted
from durably.observability.logs import JsonFormatter, RunContext
from durably.testing import FakeClock

from .test_cli import durably_cli


def family_app(app: durably.App) -> None:
    log = logging.getLogger("durably.tests.correlation")

    @app.step
    async def wrap(item: str) -> str:
        log.info("wrapping %s", item)
        return f"wrapped {item}"

    @app.workflow
    async def gift(item: str) -> str:
        return await wrap(item)  # type: ignore[no-any-return]

    @app.workflow
    async def order(item: str) -> str:
        return await gift(item)  # type: ignore[no-any-return]  # a child run


def test_a_correlation_id_is_stored_inherited_and_searched_by(
    app: durably.App, clock: FakeClock
) -> None:
    family_app(app)
    app.start("order", "lamp", id="o-1", correlation_id="req-42")
    app.start("order", "desk", id="o-2")
    app.run_until_idle()
    app.run_until_idle()

    parent, child = app.client.get("o-1"), app.client.get("o-1.0.gift")
    assert parent.status is RunStatus.COMPLETED
    assert (parent.correlation_id, child.correlation_id) == ("req-42", "req-42")
    started = read_payload(app.client.history("o-1")[0], RunStarted)
    assert started.correlation_id == "req-42"
    assert app.client.get("o-2").correlation_id is None

    found = app.client.runs(correlation_id="req-42").runs
    assert sorted(run.id for run in found) == ["o-1", "o-1.0.gift"]
    assert app.client.runs(correlation_id="nobody").runs == []

    restarted = app.client.restart("o-1", from_step=0, by="ops")
    assert restarted.correlation_id == "req-42"
    [first] = [e for e in app.client.history(restarted.id) if e.kind is EventKind.RUN_STARTED]
    assert read_payload(first, RunStarted).correlation_id == "req-42"


def test_a_bad_correlation_id_is_refused_and_nothing_is_started(app: durably.App) -> None:
    family_app(app)
    for bad, said in (("", "non-empty"), ("x" * 201, "at most 200"), ("a\nb", "printable")):
        with pytest.raises(DurablyError, match=said):
            app.start("order", "lamp", id="bad", correlation_id=bad)
    assert app.client.runs().runs == []


def test_the_callers_trace_id_is_the_default(app: durably.App) -> None:
    trace = pytest.importorskip("opentelemetry.trace", reason="the otel extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider

    family_app(app)
    tracer = TracerProvider().get_tracer("tests")
    with tracer.start_as_current_span("checkout") as span:
        app.start("order", "lamp", id="traced")
        trace_id = f"{span.get_span_context().trace_id:032x}"
    assert trace.get_current_span().get_span_context().is_valid is False
    assert app.client.get("traced").correlation_id == trace_id


def test_log_lines_and_runs_show_carry_it(app: durably.App, store_url: str, tmp_path: Path) -> None:
    family_app(app)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RunContext())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("durably.tests.correlation")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        app.start("gift", "vase", id="g-1", correlation_id="req-7")
        app.run_until_idle()
    finally:
        logger.removeHandler(handler)
    [line] = [json.loads(text) for text in out.getvalue().splitlines()]
    assert line["message"] == "wrapping vase"
    assert (line["run_id"], line["correlation_id"], line["step"]) == ("g-1", "req-7", "wrap")

    shown = durably_cli("runs", "show", "g-1", "--store", store_url, cwd=tmp_path)
    listed = durably_cli(
        "runs", "list", "--correlation-id", "req-7", "--store", store_url, cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    assert "correlation:   req-7" in shown.stdout
    assert listed.returncode == 0, listed.stderr
    assert "g-1" in listed.stdout
