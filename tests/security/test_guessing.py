"""Guessing tokens is rate limited by client address, on the real server and both stores:
unknown tokens (API requests bearing one, dashboard logins) count against the address they
came from; past the limit, that address's attempts are answered 429 with Retry-After before
any token is looked at (a right token too: a guess costs the server nothing and learns
nothing), while other addresses go on as before. A success from the address does not wipe its
failures. The lockout ends when its oldest failure leaves the window, on the app's clock (a
fake one here), and is logged once.

The client's address is the connection's, or the one in X-Forwarded-For when the connection
comes from a trusted proxy (uvicorn's --forwarded-allow-ips, 127.0.0.1 by default, which is
where these requests come from): each test speaks as several addresses that way."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from durably.testing import FakeClock
from durably.web.lockouts import Lockouts

from .conftest import Keys, Live, serving

WRONG = "dur_not-a-token-of-this-server"


@pytest.fixture
def guarded(live: Live, keys: Keys) -> Iterator[Live]:
    """The app served with a limit of 3 unknown tokens a minute per address."""
    with serving(live.app, keys, lockouts=Lockouts(failures=3, window=timedelta(minutes=1))) as it:
        yield it


def as_address(live: Live, address: str, token: str | None = None) -> httpx.Client:
    headers = {"X-Forwarded-For": address}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=live.url, headers=headers, follow_redirects=False)


def test_an_address_guessing_tokens_is_locked_out_and_others_are_not(
    guarded: Live, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="durably.server")
    keys = guarded.keys
    with as_address(guarded, "203.0.113.7", WRONG) as guessing:
        assert [guessing.get("/api/runs").status_code for _ in range(3)] == [401, 401, 401]
        refused = guessing.get("/api/runs")
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "60"
        assert refused.json()["error"] == "locked_out"
        assert "try again in 60 seconds" in refused.json()["message"]
        right = guessing.get("/api/runs", headers={"Authorization": f"Bearer {keys.write}"})
        assert right.status_code == 429  # refused before the token is looked at
        for _ in range(5):
            assert guessing.get("/api/runs").status_code == 429
    with as_address(guarded, "198.51.100.2", keys.read) as other:
        assert other.get("/api/runs").status_code == 200
        assert other.get("/api/runs", headers={"Authorization": f"Bearer {WRONG}"}).status_code == (
            401
        )
    locked = [r for r in caplog.records if "is locked out" in r.getMessage()]
    assert [r.getMessage().split()[0] for r in locked] == ["203.0.113.7"]  # once

    clock = guarded.app.clock
    assert isinstance(clock, FakeClock)
    clock.advance("30s")
    with as_address(guarded, "203.0.113.7", keys.write) as guessing:
        assert guessing.get("/api/runs").headers["retry-after"] == "30"
        clock.advance("30s")
        assert guessing.get("/api/runs").status_code == 200  # the window moved past


def test_a_success_does_not_wipe_the_failures_of_its_address(guarded: Live) -> None:
    with as_address(guarded, "203.0.113.8") as web:
        wrong = {"Authorization": f"Bearer {WRONG}"}
        right = {"Authorization": f"Bearer {guarded.keys.write}"}
        assert web.get("/api/runs", headers=wrong).status_code == 401
        assert web.get("/api/runs", headers=wrong).status_code == 401
        assert web.get("/api/runs", headers=right).status_code == 200
        assert web.get("/api/runs", headers=wrong).status_code == 401  # the third failure
        assert web.get("/api/runs", headers=right).status_code == 429


def test_failed_dashboard_logins_count_and_a_locked_out_login_is_told_when_to_retry(
    guarded: Live,
) -> None:
    with as_address(guarded, "203.0.113.9") as person:
        for _ in range(3):
            failed = person.post("/login", data={"token": WRONG, "next": "/runs"})
            assert failed.status_code == 303
            assert "refused=" in failed.headers["location"]
        refused = person.post("/login", data={"token": guarded.keys.write, "next": "/runs"})
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "60"
        assert "try again in 60 seconds" in refused.text
        assert "durably_session" not in refused.headers.get("set-cookie", "")
        api = person.get("/api/runs", headers={"Authorization": f"Bearer {guarded.keys.write}"})
        assert api.status_code == 429  # one count for the address, API and dashboard alike
    with as_address(guarded, "198.51.100.3") as other:
        logged_in = other.post("/login", data={"token": guarded.keys.write, "next": "/runs"})
        assert logged_in.status_code == 303
        assert "durably_session" in logged_in.headers["set-cookie"]
