"""Every response of the real server carries its security headers (the dashboard's pages a
content security policy with no inline script, and no page may be framed), and a request's
body is bounded before it is read: a declared length over the bound is a 413 at once, a body
sent without one is read only up to it; a body within it is served as before."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlparse

import httpx
import pytest

from .conftest import Keys, Live, serving

POLICY = "content-security-policy"


@pytest.fixture
def small(live: Live, keys: Keys) -> Iterator[Live]:
    """The same app served with a body limit of 2,000 bytes."""
    with serving(live.app, keys, max_body=2_000) as running:
        yield running


def test_pages_and_answers_carry_the_security_headers(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers()) as web:
        for path in ("/login", "/api/runs", "/api/health", "/static/durably.css", "/metrics"):
            answer = web.get(path)
            assert answer.headers["x-content-type-options"] == "nosniff", path
            assert answer.headers["x-frame-options"] == "DENY", path
            assert answer.headers["referrer-policy"] == "no-referrer", path
        policy = web.get("/login").headers[POLICY]
        assert "script-src 'self';" in policy  # no inline script, no other origin's
        assert "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
        page = web.get("/login").text
        assert "<script>" not in page  # the dashboard's one script is a file of its own


def test_a_body_over_the_bound_is_refused_before_it_is_read(small: Live) -> None:
    big = {"workflow": "checkout", "input": ["o-big", 1], "id": "o-big", "pad": "x" * 5_000}
    with httpx.Client(base_url=small.url, headers=small.headers()) as web:
        refused = web.post("/api/runs", json=big)
        assert refused.status_code == 413, refused.text
        assert refused.json()["error"] == "too_large"
        assert "at most 2000" in refused.json()["message"]
        fits = web.post(
            "/api/runs", json={"workflow": "checkout", "input": ["o-1", 1], "id": "o-1"}
        )
        assert fits.status_code == 201, fits.text
    assert [run.id for run in small.app.client.runs().runs] == ["o-1"]


def test_a_declared_length_over_the_bound_is_refused_without_reading_a_byte(small: Live) -> None:
    where = urlparse(small.url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as raw:
        head = (
            "POST /api/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {small.keys.write}\r\nContent-Length: 10000000\r\n\r\n"
        )
        raw.sendall(head.encode())  # ... and not one byte of the 10 MB it announces
        answer = raw.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 413 ")


def test_a_chunked_body_is_read_only_up_to_the_bound(small: Live) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"workflow": "checkout", "input": ["o-2", 1], "pad": "'
        for _ in range(100):
            yield b"y" * 100
        yield b'"}'

    with httpx.Client(base_url=small.url, headers=small.headers()) as web:
        refused = web.post(
            "/api/runs", content=chunks(), headers={"Content-Type": "application/json"}
        )
    assert refused.status_code == 413, refused.text
