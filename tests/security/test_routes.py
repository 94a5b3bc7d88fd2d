"""Every route of the server, as the app itself lists them (so a new route cannot be left out
of these checks): without a token, each API route is refused 401 and each dashboard page or
form sends the request to the login page; a read token cannot act through any API route but
the reads. The routes open by design are named here, one by one: a new open route fails this
test until it is added to them, with its reason."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import fastapi.routing
import httpx
from fastapi import FastAPI
from starlette.routing import Mount

from durably.web.server import create_app

from .conftest import Live

OPEN = {
    ("GET", "/api/health"): "a probe: the server is up",
    ("GET", "/api/ready"): "a probe: the store answers",
    ("GET", "/api/openapi.json"): "the API's schema, which holds no data",
    ("GET", "/api/docs"): "the schema's page",
    ("GET", "/metrics"): "Prometheus scrapes without a token (docs/explanation/security.md)",
    ("GET", "/login"): "the login page",
    ("POST", "/login"): "logging in (rate limited by address)",
    ("POST", "/logout"): "ends a session; without one, refused for its missing CSRF token",
    ("GET", "/"): "a redirect to /runs",
    ("GET", "/static"): "the dashboard's stylesheet and scripts",
}
# POST routes that only read (a body carries their question), so a read token may use them
READS_BY_POST = {
    ("POST", "/api/runs/{run_id}/queries/{name}"): "a query replays the run, changing nothing",
}
VALUES = {"run_id": "o-1", "target": "o-1", "name": "approval"}


def routes(web: FastAPI) -> Iterator[tuple[str, str]]:
    """(method, path) of every route `web` serves. FastAPI 0.16x includes routers lazily:
    iter_route_contexts flattens them (older releases copy them into the app's list)."""
    flatten = getattr(fastapi.routing, "iter_route_contexts", None)
    listed: Any = web.routes if flatten is None else flatten(web.routes)
    for route in listed:
        original = getattr(route, "original_route", route)
        if isinstance(original, Mount):
            yield "GET", original.path
            continue
        for method in sorted(route.methods - {"HEAD"}):
            yield method, route.path


def filled(path: str) -> str:
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda found: VALUES.get(found[1], "x"), path)


def test_anonymous_requests_are_refused_by_every_route_not_open_by_design(live: Live) -> None:
    web = create_app(live.app, tokens=live.keys.tokens)  # its routes only: not served
    served = set(routes(web))
    assert set(OPEN) <= served, set(OPEN) - served  # an open route gone: take it out of OPEN
    checked = 0
    with httpx.Client(base_url=live.url, follow_redirects=False) as anonymous:
        for method, path in sorted(served - set(OPEN)):
            answer = anonymous.request(method, filled(path))
            where = f"{method} {path}: {answer.status_code} {answer.text[:200]}"
            if path.startswith("/api/"):
                assert answer.status_code == 401, where
                assert answer.json()["error"] == "unauthorized", where
                assert answer.headers["www-authenticate"] == "Bearer", where
            else:
                assert answer.status_code == 303, where
                assert answer.headers["location"].startswith("/login?next="), where
            checked += 1
    assert checked >= 45


def test_the_routes_open_by_design_answer_without_a_token(live: Live) -> None:
    with httpx.Client(base_url=live.url, follow_redirects=False) as anonymous:
        for method, path in OPEN:
            target = "/static/durably.css" if path == "/static" else path
            answer = anonymous.request(method, target)
            assert answer.status_code in (200, 303), f"{method} {path}: {answer.status_code}"


def test_a_read_token_acts_through_no_api_route(live: Live) -> None:
    web = create_app(live.app, tokens=live.keys.tokens)
    acting = [
        (method, path)
        for method, path in routes(web)
        if path.startswith("/api/")
        and method != "GET"
        and (method, path) not in OPEN
        and (method, path) not in READS_BY_POST
    ]
    assert len(acting) >= 15
    assert set(READS_BY_POST) <= set(routes(web))  # a read gone: take it out of the list
    with httpx.Client(base_url=live.url, headers=live.headers(live.keys.read)) as reader:
        for method, path in acting:
            answer = reader.request(method, filled(path), json={})
            assert answer.status_code == 403, f"{method} {path}: {answer.status_code}"
            assert "may only read" in answer.json()["message"]
        for method, path in READS_BY_POST:  # not refused for the token's role
            answer = reader.request(method, filled(path), json={})
            assert answer.status_code not in (401, 403), f"{method} {path}: {answer.text}"
