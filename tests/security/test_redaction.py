"""Redaction, searched for everywhere, on both stores: secrets planted in a workflow's input (a
parameter typed durably.Secret[str], a dict's `api_key`), in a step's result (a `password`
field) and in an exception's message appear in no output: not in `durably runs show` and
`runs list`, the API's runs, history, export and dead letters, the dashboard's pages, the
worker's log lines (text and JSON), the traces, nor /metrics. Each shows `[redacted]`
instead; the workflow itself gets the values as they were given."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

import durably
from durably import Retry, Secret
from durably.observability.logs import JsonFormatter, RunContext, TextFormatter
from durably.testing import FakeClock
from tests.web.conftest import Keys, serving, settle

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")

from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from durably.observability.tracing import Tracing  # noqa: E402

CARD = "sk-INPUT-7f3a9c21"  # a parameter typed Secret[str]
API_KEY = "KEY-in-dict-99182"  # under "api_key" in a dict
PASSWORD = "pw-RESULT-123456"  # under "password" in a step's result
SECRETS = (CARD, API_KEY, PASSWORD)
RUN = "order-1"


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """The "durably" logger's lines, in both formats, whatever the suite did to the root."""
    out = io.StringIO()
    handlers = [logging.StreamHandler(out), logging.StreamHandler(out)]
    handlers[0].setFormatter(TextFormatter())
    handlers[1].setFormatter(JsonFormatter())
    logger = logging.getLogger("durably")
    saved = (logger.level, logger.propagate, logger.disabled)
    logger.setLevel(logging.INFO)
    logger.disabled = False
    for handler in handlers:
        handler.addFilter(RunContext())
        logger.addHandler(handler)
    try:
        yield out
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate, logger.disabled = saved[1], saved[2]


def test_planted_secrets_appear_in_no_output(
    store_url: str, clock: FakeClock, keys: Keys, logs: io.StringIO
) -> None:
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = durably.App(store_url, clock=clock, seed=1, hooks=[Tracing(provider)])
    seen: list[object] = []

    @app.step
    async def sign_in(account: dict[str, object]) -> dict[str, str]:
        return {"user": "ada", "password": PASSWORD}

    @app.step(retry=Retry(attempts=1))
    async def charge(card: Secret[str], account: dict[str, object]) -> str:
        raise ValueError(f"card {card} was declined for key {account['api_key']}")

    @app.workflow
    async def order(card: Secret[str], account: dict[str, object]) -> str:
        session = await sign_in(account)
        seen.append((card, account, session))
        return await charge(card, account)  # type: ignore[no-any-return]

    account = {"api_key": API_KEY, "plan": "pro"}
    app.start("order", CARD, account, id=RUN)
    settle(app, RUN)
    assert seen[0] == (CARD, account, {"user": "ada", "password": PASSWORD})  # given as is
    assert app.client.get(RUN).status is durably.RunStatus.NEEDS_ATTENTION

    outputs: dict[str, str] = {"logs": logs.getvalue()}
    outputs["traces"] = repr(
        [
            (s.name, s.attributes, s.status.description, s.events)
            for s in exporter.get_finished_spans()
        ]
    )
    with serving(app, keys) as live, httpx.Client(base_url=live.url) as web:
        for route in (
            "/api/runs",
            f"/api/runs/{RUN}",
            f"/api/runs/{RUN}/history",
            f"/api/runs/{RUN}/export",
            "/api/dead-letters",
        ):
            answer = web.get(route, headers=live.headers())
            assert answer.status_code == 200, route
            outputs[route] = answer.text
        outputs["/metrics"] = web.get("/metrics").text
        web.post("/login", data={"token": keys.write, "next": "/runs"})
        for page in ("/runs", f"/runs/{RUN}", "/dead-letters"):
            answer = web.get(page)
            assert answer.status_code == 200, page
            outputs[page] = answer.text
    app.close()
    for command in (["runs", "show", RUN], ["runs", "list"], ["dlq", "list"]):
        done = subprocess.run(
            [sys.executable, "-m", "durably", *command, "--store", store_url],
            capture_output=True,
            text=True,
            check=True,
        )
        outputs[" ".join(command)] = done.stdout + done.stderr

    leaks = [(where, s) for where, text in outputs.items() for s in SECRETS if s in text]
    assert leaks == []
    assert "[redacted]" in outputs["logs"]  # the failed attempt's message, scrubbed
    for where in ("runs show " + RUN, f"/api/runs/{RUN}/history", f"/runs/{RUN}"):
        assert "[redacted]" in outputs[where], where
