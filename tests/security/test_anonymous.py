"""An anonymous request costs the database nothing: every API route and dashboard page asks
who is asking before it reads the store. Proved on a server whose store cannot be reached:
a request with no token is answered 401 (the API) or sent to the login page (the dashboard),
never 503, which only a store query could have caused; with a token, the same route is 503."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from durably.testing import FakeClock
from tests.web.shop import Payments, make_shop

from .conftest import Keys, Live, serving

PAGES = ["/runs", "/runs/o-1", "/dead-letters", "/approvals", "/breakers", "/queues", "/workers"]
READS = ["/api/runs", "/api/runs/o-1", "/api/runs/o-1/history", "/api/dead-letters"]
ACTIONS = ["/api/runs/o-1/cancel", "/api/runs/o-1/retry", "/api/upgrade"]


def unreachable_store() -> str:
    """A PostgreSQL URL whose port nothing listens on (found free, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/test?connect_timeout=1"


@pytest.fixture
def down(keys: Keys) -> Iterator[Live]:
    app = make_shop(unreachable_store(), Payments(), clock=FakeClock())
    with serving(app, keys) as running:
        yield running


def test_requests_with_no_token_do_not_reach_the_store(down: Live) -> None:
    with httpx.Client(base_url=down.url, follow_redirects=False) as web:
        for path in READS:
            assert web.get(path).status_code == 401, path
        for path in ACTIONS:
            assert web.post(path).status_code == 401, path
        for path in PAGES:
            answer = web.get(path)
            assert answer.status_code == 303, path
            assert answer.headers["location"].startswith("/login?next="), path
    with httpx.Client(base_url=down.url, headers=down.headers()) as web:
        assert web.get("/api/runs").status_code == 503  # a token: the store is asked, and down
