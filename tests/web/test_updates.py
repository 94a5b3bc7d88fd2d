"""Updates through the HTTP API against the real server (uvicorn on loopback), with a real
worker in a thread, on both stores: a writer sends an update and gets the handler's value;
the same id is answered the same; a refusal is a 409 naming what refused it and why; a reader
may not send one; past its timeout, 504."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import httpx
import pytest

import durably
from tests.integration.update_app import define

from .conftest import Keys, Live, serving

WAIT = 20.0


@pytest.fixture
def shop(store_url: str, keys: Keys) -> Iterator[Live]:
    """The cart app with run c-1 taking items, a worker serving it, and the API, for real."""
    app = define(durably.App(store_url))
    app.start("cart", [10], id="c-1")
    worker = app.worker(poll="50ms")
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()))
    thread.start()
    try:
        with serving(app, keys) as running:
            yield running
    finally:
        worker.stop()
        thread.join(WAIT)
        app.close()


def test_a_writer_sends_an_update_and_gets_the_answer(shop: Live) -> None:
    with httpx.Client(base_url=shop.url, headers=shop.headers(), timeout=WAIT) as web:
        added = web.post("/api/runs/c-1/updates/add_item", json={"args": [5], "id": "line-1"})
        assert added.status_code == 200, added.text
        assert added.json() == {"run": "c-1", "update": "add_item", "id": "line-1", "answer": 15}
        again = web.post("/api/runs/c-1/updates/add_item", json={"args": [5], "id": "line-1"})
        assert again.json()["answer"] == 15  # the same id: applied once, the same answer
        fresh = web.post("/api/runs/c-1/updates/add_item", json={"args": [1]})
        assert fresh.json()["answer"] == 16
        assert len(fresh.json()["id"]) == 32  # a new id, to ask again by

    trail = [entry for entry in shop.app.client.audit().entries if entry.run_id == "c-1"]
    assert {entry.by for entry in trail} == {"erin"}  # the token's person sent them


def test_refusals_and_bad_requests_say_why(shop: Live) -> None:
    with httpx.Client(base_url=shop.url, headers=shop.headers(), timeout=WAIT) as web:
        refused = web.post("/api/runs/c-1/updates/add_item", json={"args": [-3]})
        assert refused.status_code == 409
        assert (
            "refused by its validator: ValueError: a price is never negative"
            in (refused.json()["message"])
        )
        unknown = web.post("/api/runs/nope/updates/add_item", json={"args": [1]})
        assert unknown.status_code == 404
        extra = web.post("/api/runs/c-1/updates/add_item", json={"arguments": [1]})
        assert extra.status_code == 422
        slow = web.post("/api/runs/c-1/updates/rename", json={"args": ["x"], "timeout": 0.3})
        assert slow.status_code == 504
        assert "ask again with update_id" in slow.json()["message"]
        too_long = web.post("/api/runs/c-1/updates/add_item", json={"timeout": 600})
        assert too_long.status_code == 422
    with httpx.Client(base_url=shop.url, headers=shop.headers(shop.keys.read)) as web:
        reader = web.post("/api/runs/c-1/updates/add_item", json={"args": [1]})
        assert reader.status_code == 403
