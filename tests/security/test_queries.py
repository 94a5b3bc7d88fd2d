"""A NUL byte, which PostgreSQL refuses in any text it is sent, in a query's value or a path
is a 4xx naming what is wrong, never a 500: in the API's every string query parameter (listed
from the server's own schema), in the dashboard's searches and run pages, and in the client's
filters, on both stores. (schemathesis found the first of these on PostgreSQL.)"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import durably
from durably.errors import PayloadError, RunNotFound

from .conftest import Live

NUL = "a\x00b"


def string_queries(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, parameter) of every GET operation's string query parameter (a repeatable one,
    a list of strings, too)."""
    found = []
    for path, operations in spec["paths"].items():
        get = operations.get("get")
        if get is None or "{" in path:
            continue
        for parameter in get.get("parameters", []):
            schema = parameter.get("schema", {})
            parts = [schema, *schema.get("anyOf", [])]
            kinds = [part.get("type") for part in parts]
            kinds += [part.get("items", {}).get("type") for part in parts if part.get("items")]
            if parameter["in"] == "query" and "string" in kinds:
                found.append((path, parameter["name"]))
    return found


def test_a_nul_byte_in_a_query_is_refused_naming_it(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        queries = string_queries(web.get("/api/openapi.json").json())
        assert ("/api/runs", "workflow") in queries
        for searched in ("attr", "key", "queue"):
            assert ("/api/runs", searched) in queries
        for path, name in queries:
            answer = web.get(path, params={name: NUL})
            assert 400 <= answer.status_code < 500, f"{path}?{name}: {answer.text}"
            assert name in answer.text, f"{path}?{name}: {answer.text}"
        assert web.get("/api/runs/a%00b").status_code in (404, 422)


def test_the_dashboard_answers_a_nul_byte_without_failing(live: Live) -> None:
    with httpx.Client(base_url=live.url) as web:
        web.post("/login", data={"token": live.keys.read, "next": "/runs"})
        searches = [{"workflow": NUL}, {"q": NUL}, {"attr": f"customer:{NUL}"}, {"attr": NUL}]
        searches += [{"key": NUL}, {"queue": NUL}, {"since": NUL}, {"until": NUL}]
        for page, query in (("/runs", search) for search in searches):
            answer = web.get(page, params=query)
            assert answer.status_code < 500, f"{page} {query}: {answer.text[:300]}"
        unknown = web.get("/runs/a%00b")
        assert unknown.status_code < 500
        assert "no NUL byte" in unknown.text


def test_the_client_refuses_a_nul_byte_in_a_filter(shop: durably.App) -> None:
    for filters in (
        {"workflow": NUL},
        {"correlation_id": NUL},
        {"patch": NUL},
        {"key": NUL},
        {"queue": NUL},
        {"attributes": {"customer": NUL}},
        {"attributes": {NUL: "42"}},
    ):
        with pytest.raises(PayloadError, match="control character"):
            shop.client.runs(**filters)  # type: ignore[arg-type]
    with pytest.raises(RunNotFound, match="no NUL byte"):
        shop.client.get(NUL)
