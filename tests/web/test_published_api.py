"""The API's routes for what runs publish, against the real server (uvicorn on loopback) on
both stores: the events and progress, one event waited for while the run sets it, its
timeout, a run that ended without it, and a stream read as Server-Sent Events by a real HTTP
client, resumed with Last-Event-ID. The test process's worker drives the runs."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import httpx
import pytest

import durably
from durably.web import published

from .conftest import Keys, Live, serving


def make_app(url: str) -> durably.App:
    app = durably.App(url)

    @app.step
    async def pack(items: int) -> int:
        for n in range(items):
            durably.write_stream("log", f"packed {n}")
            durably.progress(n + 1, items, "items packed")
            await asyncio.sleep(0)
        return items

    @app.workflow
    async def order(items: int) -> str:
        durably.write_stream("log", "begun")
        await durably.wait_for_signal("go")
        await pack(items)
        durably.set_event("status", {"state": "shipped", "items": items})
        durably.close_stream("log")
        return "ok"

    @app.workflow
    async def quiet() -> str:
        return "nothing said"

    return app


@pytest.fixture
def live_app(store_url: str, keys: Keys) -> Iterator[Live]:
    app = make_app(store_url)
    with serving(app, keys) as running:
        yield running
    app.close()


def sse(lines: Iterator[str], *, until: str = "end") -> list[dict[str, str]]:
    """The events (and comments, as {"comment": ...}) of an SSE body, up to the first `until`."""
    found: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in lines:
        if line.startswith(":"):
            found.append({"comment": line[1:].strip()})
            if until == "comment":
                return found
        elif line:
            field, _, value = line.partition(":")
            current[field] = value.removeprefix(" ")
        elif current:
            found.append(current)
            if current.get("event") == until:
                return found
            current = {}
    return found


def test_events_give_each_key_and_the_progress(live_app: Live) -> None:
    app = live_app.app
    handle = app.start("order", 2)
    app.run_until_idle()
    app.client.signal(handle.id, "go", None)
    app.run_until_idle()
    with httpx.Client(base_url=live_app.url, headers=live_app.headers(live_app.keys.read)) as web:
        body = web.get(f"/api/runs/{handle.id}/events").json()
        assert [(e["key"], e["value"]) for e in body["events"]] == [
            ("status", {"state": "shipped", "items": 2})
        ]
        progress = body["progress"]
        assert (progress["done"], progress["total"], progress["fraction"]) == (2, 2, 1.0)
        assert progress["bar"] == "[####################] 2/2 items packed"
        one = web.get(f"/api/runs/{handle.id}/events/status").json()
        assert one["value"] == {"state": "shipped", "items": 2}
        missing = web.get("/api/runs/nope/events")
        assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
        assert web.get("/api/runs/nope/events/status").status_code == 404


def test_an_event_is_waited_for_while_the_run_sets_it(live_app: Live) -> None:
    app = live_app.app
    handle = app.start("order", 1)
    app.run_until_idle()
    assert "status" not in handle.events()  # not set when the request begins
    answer: Future[httpx.Response] = Future()

    def ask() -> None:
        with httpx.Client(base_url=live_app.url, headers=live_app.headers(), timeout=30) as web:
            answer.set_result(web.get(f"/api/runs/{handle.id}/events/status?timeout=20s"))

    asking = threading.Thread(target=ask)
    asking.start()
    app.client.signal(handle.id, "go", None)
    app.run_until_idle()
    asking.join(timeout=30)
    got = answer.result(timeout=0)
    assert got.status_code == 200, got.text
    assert got.json()["value"] == {"state": "shipped", "items": 1}


def test_a_wait_times_out_408_and_a_run_that_ended_without_it_is_409(live_app: Live) -> None:
    app = live_app.app
    waiting, ended = app.start("order", 1), app.start("quiet")
    app.run_until_idle()
    with httpx.Client(base_url=live_app.url, headers=live_app.headers(), timeout=30) as web:
        late = web.get(f"/api/runs/{waiting.id}/events/status?timeout=200ms")
        assert (late.status_code, late.json()["error"]) == (408, "timeout")
        assert "ask again" in late.json()["message"]
        never = web.get(f"/api/runs/{ended.id}/events/status?timeout=5s")
        assert (never.status_code, never.json()["error"]) == (409, "event_not_set")
        assert "ended (completed) without setting event 'status'" in never.json()["message"]
        refused = web.get(f"/api/runs/{waiting.id}/events/status?timeout=soon")
        assert refused.status_code == 422, refused.text
        assert "timeout" in refused.json()["message"]


def _stream(web: httpx.Client, path: str, **options: Any) -> Iterator[str]:
    with web.stream("GET", path, **options) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield from response.iter_lines()


def test_a_stream_is_sent_as_server_sent_events_and_resumed_from_last_event_id(
    live_app: Live,
) -> None:
    app = live_app.app
    handle = app.start("order", 3)
    app.run_until_idle()
    path = f"/api/runs/{handle.id}/streams/log"
    with httpx.Client(base_url=live_app.url, headers=live_app.headers(), timeout=30) as web:
        lines = _stream(web, path)
        first = sse(lines, until="item")
        assert first == [{"event": "item", "id": "0", "data": '"begun"'}]  # written so far
        app.client.signal(handle.id, "go", None)
        app.run_until_idle()
        rest = sse(lines)
        assert [(e["id"], json.loads(e["data"])) for e in rest[:-1]] == [
            (str(n + 1), f"packed {n}") for n in range(3)
        ]
        assert rest[-1] == {"event": "end", "data": '{"next_offset": 4}'}
        again = sse(_stream(web, path, headers={"Last-Event-ID": "1"}))
        assert [e.get("id") for e in again] == ["2", "3", None]
        assert sse(_stream(web, f"{path}?from=3"))[0]["data"] == '"packed 2"'
        bad = web.get(path, headers={"Last-Event-ID": "x"})
        assert bad.status_code == 422
        assert "last-event-id" in bad.json()["message"]
        assert web.get("/api/runs/nope/streams/log").status_code == 404


def test_an_idle_stream_sends_keep_alive_comments(
    live_app: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(published, "_KEEP_ALIVE_EVERY", 0.1)  # rather than 15 s
    app = live_app.app
    handle = app.start("order", 1)
    app.run_until_idle()
    with httpx.Client(base_url=live_app.url, headers=live_app.headers(), timeout=30) as web:
        seen = sse(_stream(web, f"/api/runs/{handle.id}/streams/log"), until="comment")
    assert seen[-1] == {"comment": "keep-alive"}
    app.client.cancel(handle.id, by="test")  # the server's reader ended with the client


def test_the_run_page_draws_the_progress_bar_and_the_events(store_url: str, keys: Keys) -> None:
    app = make_app(store_url)
    handle = app.start("order", 2)
    app.run_until_idle()
    app.client.signal(handle.id, "go", None)
    app.run_until_idle()
    try:
        with serving(app, keys, open_reads=True) as running, httpx.Client() as web:
            page = web.get(f"{running.url}/runs/{handle.id}")
    finally:
        app.close()
    assert page.status_code == 200
    assert '<progress max="2.0" value="2.0"' in page.text
    assert "[####################] 2/2 items packed" in page.text
    assert "<code>status</code>" in page.text
    assert "&#34;shipped&#34;" in page.text or "&quot;shipped&quot;" in page.text
