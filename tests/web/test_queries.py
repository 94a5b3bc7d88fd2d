"""Queries through the HTTP API against the real server (uvicorn on loopback), on both
stores: a token that may read asks a run a query and gets the handler's answer as JSON; the
run is not changed; each way it goes wrong is a JSON error naming what to do."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

import durably
from durably.testing import FakeClock
from tests.integration.query_app import define

from .conftest import Keys, Live, serving

ITEMS = [{"sku": 1, "price": 3}, {"sku": 2, "price": 4}]


@pytest.fixture
def orders(store_url: str, clock: FakeClock, keys: Keys) -> Iterator[Live]:
    """The order app, with run o-1 waiting for approval, served for real."""
    app = durably.App(store_url, clock=clock)
    define(app, [])
    app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    try:
        with serving(app, keys) as running:
            yield running
    finally:
        app.close()


def test_a_reader_asks_a_query_and_nothing_changes(orders: Live) -> None:
    before = (orders.app.client.get("o-1"), orders.app.client.history("o-1"))
    with httpx.Client(base_url=orders.url, headers=orders.headers(orders.keys.read)) as web:
        answered = web.post("/api/runs/o-1/queries/total")
        assert answered.status_code == 200, answered.text
        assert answered.json() == {"run": "o-1", "query": "total", "answer": 7, "calls": 3}
        lines = web.post("/api/runs/o-1/queries/lines", json={"args": [1]})
        assert lines.json()["answer"] == [4]
    assert (orders.app.client.get("o-1"), orders.app.client.history("o-1")) == before


def test_errors_name_what_is_wrong(orders: Live) -> None:
    with httpx.Client(base_url=orders.url, headers=orders.headers(orders.keys.read)) as web:
        unknown_run = web.post("/api/runs/nope/queries/total")
        assert (unknown_run.status_code, unknown_run.json()["error"]) == (404, "not_found")
        unknown_query = web.post("/api/runs/o-1/queries/missing")
        assert unknown_query.status_code == 404
        assert "registered by then: lines, total" in unknown_query.json()["message"]
        bad_args = web.post("/api/runs/o-1/queries/lines", json={"args": ["two"]})
        assert bad_args.status_code == 422
        assert "query 'lines'" in bad_args.json()["message"]
        not_a_list = web.post("/api/runs/o-1/queries/lines", json={"args": {"first": 1}})
        assert not_a_list.status_code == 422
        assert "args" in not_a_list.json()["message"]
        extra = web.post("/api/runs/o-1/queries/lines", json={"arguments": [1]})
        assert extra.status_code == 422
        assert "arguments is not a field" in extra.json()["message"]
        assert (
            web.post("/api/runs/o-1/queries/total", headers={"Authorization": ""}).status_code
            == 401
        )


def test_a_query_past_its_timeout_is_a_504(store_url: str, clock: FakeClock, keys: Keys) -> None:
    blocking, released = threading.Event(), threading.Event()
    app = durably.App(store_url, clock=clock)

    @app.workflow(name="slow", version="1")
    async def slow() -> None:
        @durably.query
        def ready() -> bool:
            return True

        if blocking.is_set():  # only in the query's replay: the test holds it there
            released.wait(30)
        await durably.wait_for_signal("go")

    app.start("slow", id="s-1")
    app.run_until_idle()
    blocking.set()
    try:
        with serving(app, keys) as live, httpx.Client(base_url=live.url) as web:
            late = web.post(
                "/api/runs/s-1/queries/ready", json={"timeout": 0.2}, headers=live.headers()
            )
            assert (late.status_code, late.json()["error"]) == (504, "timeout")
            assert "abandoned" in late.json()["message"]
    finally:
        released.set()
        app.close()
